"""Issue 17, unattended mode: profile `on-crash:` (ask / restart-with-advice / restart / stop), at
most N automatic restarts an hour, never the same failing setting twice, the terminal bell, the
`notify:` command with the crash summary in its environment, every automatic action journaled."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.findings import FlagChange
from cockpit.core.profile import parse_profile
from cockpit.core.state import Crash
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.unattended import Unattended
from tests.ui.story import T0, story_log_lines, story_snapshot

OOM = Crash(kind="cuda_oom", phase="prefill", rank="TP3", line=812, message="CUDA out of memory")


def test_policy_restarts_with_advice_within_budget_and_never_twice_the_same() -> None:
    findings = story_snapshot(0.93, "ready", crashed=True).findings
    u = Unattended("restart-with-advice", max_per_hour=2)
    d = u.decide(OOM, findings, {"mem-fraction-static": 0.93, "tp": 8}, now=0.0)
    assert d.action == "restart" and [c.as_diff() for c in d.changes] == ["--mem-fraction-static 0.93 → 0.88"]
    assert "1/2 this hour" in d.reason
    # 0.88 crashed too, and the advice still says 0.93 → 0.88: that setting failed, ask
    d2 = u.decide(OOM, findings, {"mem-fraction-static": 0.88, "tp": 8}, now=60.0)
    assert d2.action == "ask" and "already crashed once" in d2.reason
    u2 = Unattended("restart", max_per_hour=1)
    assert u2.decide(OOM, findings, {}, now=0.0).action == "restart"
    limited = u2.decide(OOM, findings, {}, now=10.0)
    assert limited.action == "ask" and "on-crash-max-per-hour 1" in limited.reason
    assert u2.decide(OOM, findings, {}, now=3700.0).action == "restart"  # an hour later
    unknown = dataclasses.replace(OOM, kind="unknown")
    d3 = Unattended("restart-with-advice").decide(unknown, findings, {}, now=0.0)
    assert d3.action == "ask" and "not confident" in d3.reason
    assert Unattended("stop").decide(OOM, findings, {}, now=0.0).action == "stop"
    assert Unattended("ask").decide(OOM, findings, {}, now=0.0).action == "ask"


def test_the_same_failing_setting_is_never_tried_twice() -> None:
    """0.93 crashed → 0.88; 0.88 crashed with advice 0.93 → 0.88 again (stale): ask instead."""
    findings = story_snapshot(0.93, "ready", crashed=True).findings
    u = Unattended("restart-with-advice", max_per_hour=5)
    assert u.decide(OOM, findings, {"mem-fraction-static": 0.93}, now=0.0).action == "restart"
    d = u.decide(OOM, findings, {"mem-fraction-static": 0.93}, now=30.0)
    assert d.action == "ask" and "already crashed once" in d.reason


def _profile(tmp_path: Path, on_crash: str, notify: list[str] | None) -> Any:
    data: dict[str, Any] = {
        "name": "demo",
        "hosts": [{"ssh": "local"}],
        "server": {"model-path": "/models/Kimi-K2.5", "tp": 8, "mem-fraction-static": 0.93},
        "on-crash": on_crash,
    }
    if notify:
        data["notify"] = notify
    return parse_profile(data, str(tmp_path / "demo.yaml"))


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


async def test_dashboard_journals_shows_rings_and_notifies(tmp_path: Path, data_home: Path) -> None:
    out = tmp_path / "notified.json"
    script = ("import json, os, sys; json.dump({k: v for k, v in os.environ.items() if k.startswith('COCKPIT_')}, "
              f"open({str(out)!r}, 'w'))")
    profile = _profile(tmp_path, "restart-with-advice", [sys.executable, "-c", script])
    app = CockpitApp(profile=profile, supervisor_factory=None, clock=lambda: T0)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.query_one("#log").add_lines(story_log_lines())
        screen.apply_snapshot(story_snapshot(0.93, "ready", crashed=True))
        for _ in range(40):
            await pilot.pause(0.05)
            if out.exists() and list(data_home.rglob("automatic-actions.jsonl")):
                break
        assert screen.bells == 1
        assert not isinstance(app.screen, CrashScreen)  # decided by itself, no dialog
        assert screen.note.startswith("auto: on-crash: restart-with-advice, 1/3 this hour: restarting with "
                                      "--mem-fraction-static 0.93 → 0.88")
        [journal] = list(data_home.rglob("automatic-actions.jsonl"))
        rec = json.loads(journal.read_text().splitlines()[-1])
        assert rec["action"] == "restart" and rec["changes"] == [{"flag": "--mem-fraction-static", "from": 0.93, "to": 0.88}]
        assert rec["crash_kind"] == "cuda_oom" and rec["profile"] == "demo"
        env = json.loads(out.read_text())
        assert env["COCKPIT_EVENT"] == "crashed" and env["COCKPIT_ACTION"] == "restart"
        assert "cuda_oom" in env["COCKPIT_SUMMARY"] and env["COCKPIT_RUN_ID"] == "20261129-115402-demo"
        # the restarted run comes up READY: recovered, rung and said
        out.unlink()
        screen.apply_snapshot(story_snapshot(0.88, "ready", restarted=True))
        for _ in range(40):
            await pilot.pause(0.05)
            if out.exists():
                break
        assert screen.bells == 2 and "recovered" in screen.note
        assert json.loads(out.read_text())["COCKPIT_EVENT"] == "recovered"


async def test_ask_is_the_default_and_still_rings(tmp_path: Path, data_home: Path) -> None:
    profile = _profile(tmp_path, "ask", None)
    app = CockpitApp(profile=profile, supervisor_factory=None, clock=lambda: T0)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(story_snapshot(0.93, "ready", crashed=True))
        for _ in range(4):
            await pilot.pause()
        assert isinstance(app.screen, CrashScreen) and screen.bells == 1
        assert not list(data_home.rglob("automatic-actions.jsonl"))


def test_profile_rejects_an_unknown_policy(tmp_path: Path) -> None:
    from cockpit.core.profile import ProfileError

    with pytest.raises(ProfileError) as exc:
        parse_profile({"name": "x", "on-crash": "reboot"}, "x.yaml")
    assert "on-crash" in str(exc.value) and "restart-with-advice" in str(exc.value)
    assert FlagChange  # the change type the decisions carry
