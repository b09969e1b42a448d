"""Where Cockpit finds profiles and themes and keeps its journal (XDG via platformdirs)."""

from __future__ import annotations

import os
from pathlib import Path

APP = "cockpit"


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def bundled_dir(kind: str) -> Path:
    """`profiles` or `themes` shipped with Cockpit: inside the wheel, or at the checkout's root."""
    inside = _package_dir() / "_data" / kind
    if inside.is_dir():
        return inside
    return _package_dir().parent / kind


def config_dir() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP))


def data_dir() -> Path:
    """The journal lives here; honours XDG_DATA_HOME (platformdirs does on Linux)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP))


def profile_dirs() -> list[Path]:
    """Search order: ./profiles, the user's config dir, then the bundled examples."""
    dirs = [Path.cwd() / "profiles", config_dir() / "profiles", bundled_dir("profiles")]
    seen: list[Path] = []
    for d in dirs:
        try:
            r = d.resolve()
        except OSError:
            continue
        if r not in seen:
            seen.append(r)
    return seen


def list_profile_files() -> list[Path]:
    """Every *.yaml / *.yml profile file, first directory wins for a given file name."""
    found: dict[str, Path] = {}
    for d in profile_dirs():
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.suffix in (".yaml", ".yml") and p.stem not in found:
                found[p.stem] = p
    return list(found.values())


def resolve_profile(arg: str) -> Path:
    """A path to a profile file, or a profile name looked up in the profile dirs."""
    p = Path(os.path.expanduser(arg))
    if p.exists() or "/" in arg or arg.endswith((".yaml", ".yml")):
        return p
    for d in profile_dirs():
        for suffix in (".yaml", ".yml"):
            cand = d / f"{arg}{suffix}"
            if cand.exists():
                return cand
    return p  # loading it reports "no such file" with the name the operator typed
