"""Issue 37, item 6: the dashboard holds controllers, not mixins. The screen's only base is
Textual's Screen, nothing in ui/screens reaches into the screen by `getattr`, and the controllers
it owns are plain Python (importing them in a fresh interpreter loads neither textual nor rich)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from textual.screen import Screen

from cockpit.ui.screens.dashboard import DashboardScreen

SCREENS = Path(__file__).resolve().parents[2] / "cockpit" / "ui" / "screens"
CONTROLLERS = ("runcontrol", "autocontrol", "groupcontrol", "logexport", "servingseries", "unattended")


def test_the_dashboard_has_no_mixin_bases() -> None:
    assert DashboardScreen.__bases__ == (Screen,)  # Screen[None]: the generic alias is Screen itself
    own = [c for c in DashboardScreen.__mro__ if c.__module__.startswith("cockpit.")]
    assert own == [DashboardScreen]


def test_nothing_in_the_screens_reaches_into_self_by_getattr() -> None:
    found: list[str] = []
    for path in sorted(SCREENS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "setattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_the_dashboards_controllers_load_no_textual() -> None:
    code = (
        "import json, sys\n"
        + "".join(f"import cockpit.ui.{name}\n" for name in CONTROLLERS)
        + "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules} & {'textual', 'rich'})))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


def test_the_screen_owns_one_of_each() -> None:
    from cockpit.core.profile import parse_profile
    from cockpit.ui.autocontrol import AutoControl
    from cockpit.ui.groupcontrol import GroupControl
    from cockpit.ui.logexport import LogExport
    from cockpit.ui.runcontrol import RunControl
    from cockpit.ui.servingseries import ServingSeries

    profile = parse_profile({"name": "demo", "hosts": [{"ssh": "local"}], "server": {"model-path": "/m", "tp": 1}},
                            "demo.yaml")
    screen = DashboardScreen(profile)
    assert isinstance(screen.control, RunControl) and isinstance(screen.auto, AutoControl)
    assert isinstance(screen.groups, GroupControl) and isinstance(screen.export, LogExport)
    assert isinstance(screen.serving, ServingSeries)
    assert screen.auto.profile is profile and not screen.groups.active
