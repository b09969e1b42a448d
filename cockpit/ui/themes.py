"""Cockpit's themes: definitions in themes/*.yaml, one stylesheet themes/cockpit.tcss.

Colours reach widgets only through theme variables ($mem-weights, $headroom-bad, ...), so a theme
file is the single place a colour is chosen. Names on the command line are the short ones
(dark, light, high-contrast); Textual sees them as cockpit-dark, cockpit-light, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from textual.theme import Theme

from cockpit.face import BadInput, bundled_dir, config_dir

SHORT_NAMES: tuple[str, ...] = ("dark", "light", "high-contrast")
DEFAULT_THEME = "dark"

# Fallbacks so the stylesheet still resolves when the operator picks one of Textual's own themes
# from the command palette.
VARIABLE_DEFAULTS: dict[str, str] = {
    "mem-weights": "#5f87d7",
    "mem-kv": "#af87ff",
    "mem-graphs": "#d7af5f",
    "mem-other": "#808080",
    "mem-free": "#3a3f4a",
    "mem-foreign": "#ff875f",
    "plot-throughput": "#5fd7d7",
    "plot-usage": "#af87ff",
    "headroom-ok": "#5fd75f",
    "headroom-warn": "#ffd75f",
    "headroom-bad": "#ff5f5f",
    "stale": "#6c6c6c",
}


def hex_rgb(color: str | None) -> tuple[int, int, int] | None:
    """`#5fd7d7` → (95, 215, 215); None for anything that is not a six-digit hex colour."""
    c = (color or "").lstrip("#")
    if len(c) != 6:
        return None
    try:
        return (int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16))
    except ValueError:
        return None


def themes_dir() -> Path:
    return bundled_dir("themes")


def stylesheet_path() -> Path:
    return themes_dir() / "cockpit.tcss"


def textual_name(short: str) -> str:
    """`dark` → `cockpit-dark`; a name that is already a Textual theme name passes through."""
    return short if short.startswith("cockpit-") or short not in SHORT_NAMES else f"cockpit-{short}"


def short_name(name: str) -> str:
    return name.removeprefix("cockpit-")


def load_themes() -> list[Theme]:
    """Every theme file in themes/, in the cycling order dark → light → high-contrast."""
    out: list[Theme] = []
    for short in SHORT_NAMES:
        path = themes_dir() / f"{short}.yaml"
        data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        variables = {str(k): str(v) for k, v in (data.pop("variables", None) or {}).items()}
        out.append(Theme(variables=variables, **data))
    return out


def validate_theme_name(name: str | None) -> str | None:
    """The short name, or None when unset. Raises BadInput for a name Cockpit does not ship."""
    if name is None:
        return None
    short = short_name(name)
    if short not in SHORT_NAMES:

        raise BadInput(f"unknown theme {name!r}", hint="choose one of: " + ", ".join(SHORT_NAMES))
    return short


def configured_theme() -> str | None:
    """`theme:` in the user's config file (config_dir()/config.yaml), when set and valid."""
    path = config_dir() / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    if isinstance(data, dict) and isinstance(data.get("theme"), str) and short_name(data["theme"]) in SHORT_NAMES:
        return short_name(data["theme"])
    return None
