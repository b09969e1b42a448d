"""`cockpit tui` / `cockpit demo` refuse bad input with one line and exit 2, before any TUI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _cockpit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_unknown_theme_is_bad_input(tmp_path: Path) -> None:
    out = _cockpit("tui", "--theme", "solarized", cwd=tmp_path)
    assert out.returncode == 2
    assert "unknown theme 'solarized'" in out.stderr and "dark, light, high-contrast" in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_profile_is_bad_input(tmp_path: Path) -> None:
    out = _cockpit("tui", "no-such-profile", cwd=tmp_path)
    assert out.returncode == 2
    assert "no profile named 'no-such-profile'" in out.stderr and "searched " in out.stderr


def test_demo_sim_speed_must_be_positive(tmp_path: Path) -> None:
    out = _cockpit("demo", "--sim-speed", "0", cwd=tmp_path)
    assert out.returncode == 2
    assert "--sim-speed must be positive" in out.stderr


def test_demo_profile_speed_override() -> None:
    from cockpit.commands.demo import demo_profile

    p = demo_profile(12.5)
    assert p.program is not None
    i = p.program.index("--sim-speed")
    assert p.program[i + 1] == "12.5"
    assert p.name == "demo" and p.flag("mem-fraction-static") == 0.93
    assert "--sim-startup-speed" not in p.program
    fast = demo_profile(12.5, sim_startup_speed=400)
    assert fast.program is not None and fast.program[fast.program.index("--sim-startup-speed") + 1] == "400"
    assert fast.program[fast.program.index("--sim-speed") + 1] == "12.5"


def test_demo_sim_startup_speed_must_be_positive(tmp_path: Path) -> None:
    out = _cockpit("demo", "--sim-startup-speed", "-3", cwd=tmp_path)
    assert out.returncode == 2 and "--sim-startup-speed must be positive" in out.stderr
    assert "Traceback" not in out.stderr


def test_theme_from_config_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from cockpit.commands.tui import resolve_theme

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "cockpit").mkdir()
    (tmp_path / "cockpit" / "config.yaml").write_text("theme: high-contrast\n")
    assert resolve_theme(None) == "high-contrast"
    assert resolve_theme("light") == "light"  # --theme wins
    (tmp_path / "cockpit" / "config.yaml").write_text("theme: nonsense\n")
    assert resolve_theme(None) == "dark"
