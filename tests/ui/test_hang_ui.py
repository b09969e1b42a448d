"""A hung run on the dashboard: HUNG in the header, the bell, the notify command with the evidence
(`COCKPIT_EVENT=hung`), no restart unless `on-hang: restart`; back to READY: said and notified."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from cockpit.core.profile import parse_profile
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.unattended import Unattended
from cockpit.ui.widgets.serving import ServingFigures
from tests.ui.screen_text import screen_text
from tests.ui.story import T0, story_snapshot

EVIDENCE = {"hang_after_s": 60.0, "still_for_s": 61.0, "probe_waiting_s": 61.0, "requests_outstanding": 1,
            "silent_ranks": [], "reason": "Cockpit's probe request unanswered for 61 s; no token generated and "
                                          "no batch line for 61 s"}


def hung_snapshot() -> object:
    snap = story_snapshot(0.88, "ready")
    state = snap.state.copy()
    state.phase, state.phase_since, state.hang = "hung", "2026-11-29T12:30:00Z", dict(EVIDENCE)
    return dataclasses.replace(snap, state=state)


def demo_app(tmp_path: Path, **extra: object) -> CockpitApp:
    profile = parse_profile({"name": "demo", "hosts": [{"ssh": "local"}], **extra,
                             "server": {"model-path": "/models/Kimi-K2.5", "tp": 8}}, str(tmp_path / "demo.yaml"))
    return CockpitApp(profile=profile, supervisor_factory=None, clock=lambda: T0)


def test_on_hang_notifies_by_default_and_restarts_only_when_asked() -> None:
    assert Unattended().decide_hang("notify", 0.0).action == "ask"
    u = Unattended(max_per_hour=1)
    assert u.decide_hang("restart", 0.0).action == "restart"
    assert u.decide_hang("restart", 10.0).action == "ask"  # the hourly budget is shared with on-crash


def test_on_hang_never_restarts_a_run_stuck_within_its_first_window_after_ready() -> None:
    """Issue 40 finding 15: a slow first token looks hung; `on-hang: restart` restarted a healthy
    server. Stuck within the first window after READY: notify only."""
    u = Unattended(max_per_hour=5)
    early = {"hang_after_s": 60.0, "still_for_s": 75.0, "stuck_since_ready_s": 3.0}
    d = u.decide_hang("restart", 0.0, early)
    assert d.action == "ask" and "first 60 s" in d.reason and "slow first token" in d.reason
    assert not u.restarts  # no budget spent
    later = {"hang_after_s": 60.0, "still_for_s": 75.0, "stuck_since_ready_s": 600.0}
    assert u.decide_hang("restart", 0.0, later).action == "restart"


async def test_hung_rings_notifies_and_shows_then_ready_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    out = tmp_path / "notified.jsonl"
    script = (f"import json, os; open({str(out)!r}, 'a').write(json.dumps({{k: v for k, v in os.environ.items() "
              "if k.startswith('COCKPIT_')}) + '\\n')")
    app = demo_app(tmp_path, notify=[sys.executable, "-c", script])
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(story_snapshot(0.88, "ready"))
        screen.apply_snapshot(hung_snapshot())  # type: ignore[arg-type]
        screen.apply_snapshot(hung_snapshot())  # type: ignore[arg-type]  (still hung: rung once)
        for _ in range(40):
            await pilot.pause(0.05)
            if out.exists():
                break
        assert screen.bells == 1
        header = screen_text(app)
        assert "HUNG" in header and "probe request unanswered" in header
        event = json.loads(out.read_text().splitlines()[-1])
        assert event["COCKPIT_EVENT"] == "hung" and "no token generated" in event["COCKPIT_SUMMARY"]
        assert event["COCKPIT_ACTION"] == "ask"  # on-hang: notify (the default) never restarts
        screen.apply_snapshot(story_snapshot(0.88, "ready"))
        for _ in range(40):
            await pilot.pause(0.05)
            if len(out.read_text().splitlines()) == 2:
                break
        assert json.loads(out.read_text().splitlines()[-1])["COCKPIT_EVENT"] == "unhung"
        assert "READY" in screen_text(app)


async def test_the_engines_own_figures_feed_the_plots_once_read(tmp_path: Path) -> None:
    app = demo_app(tmp_path)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(story_snapshot(0.88, "ready"))
        await pilot.pause()
        assert "/metrics:" not in screen_text(app)  # not read yet: the log's series, no line
        serving = {"gen_tok_s": 812.5, "prompt_tok_s": 40.0, "running": 3, "waiting": 0, "kv_usage_pct": 41.0,
                   "preemptions_per_min": 0.0, "ttft_ms": {"p50": 120.0, "p99": 410.0, "count": 9},
                   "itl_ms": None, "source": "/metrics"}
        for i in range(3):
            snap = dataclasses.replace(story_snapshot(0.88, "ready"), taken_at=T0 + i,
                                       serving={**serving, "gen_tok_s": 800.0 + i})
            screen.apply_snapshot(snap)
        await pilot.pause(0.6)
        text = screen_text(app)
        assert "/metrics: gen 802.0 tok/s · prompt 40.0 tok/s" in text  # the rest is cut at this width
        line = str(screen.query_one(ServingFigures).render())
        assert "KV 41.0 %" in line and "ITL not reported" in line and "TTFT p50/p99 120/410 ms" in line
        assert "gen tok/s: 802 now" in text and "token usage: 0.41 now" in text  # the plots follow the engine


async def test_S_takes_stacks_and_shows_them_odd_one_out_first(tmp_path: Path) -> None:
    from cockpit.ui.screens.stacks import StacksScreen, StacksTaken

    app = demo_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        await pilot.press("S")  # no run attached: said, nothing taken
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)
        screen.post_message(StacksTaken(["ODD ONE OUT: TP5 in all_reduce (parallel_state.py:512); 7 others elsewhere",
                                         "  7 rank(s) in recv (shm_broadcast.py:10): TP0, TP1"]))
        for _ in range(10):
            await pilot.pause(0.05)
            if isinstance(app.screen, StacksScreen):
                break
        assert isinstance(app.screen, StacksScreen)
        assert "ODD ONE OUT: TP5 in all_reduce" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen
