"""Issue 27: on-crash restarts back off, and say so.

`on-crash: restart` with `on-crash-max-per-hour: 60` and a server that crashes 2 s after each
launch: the hourly cap alone let it relaunch 60 times in 118 s. The policy is played through that
crash loop on its own clock; then the real dashboard (Textual's test pilot, the journal of
automatic actions on disk) takes two crashes in a row: the second restart waits, and the header's
note and the journal line say how long.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.state import Crash
from cockpit.ui.unattended import Unattended, backoff_s
from tests.ui.story import T0, story_log_lines, story_snapshot

CRASH = Crash(kind="unknown", phase="startup", rank="TP0", line=1, message="exit 1")


def test_a_crash_loop_backs_off(ledger) -> None:
    u = Unattended("restart", max_per_hour=60)
    now, launched, delays = 0.0, [], []
    while now < 118.0:
        d = u.decide(CRASH, (), {}, now=now)
        if d.action != "restart":
            break
        at = now + d.delay_s  # the restart happens after its wait, the server dies 2 s later
        if at >= 118.0:
            break
        launched.append(at)
        delays.append(d.delay_s)
        now = at + 2.0
    ledger.fault("server")
    assert delays[:4] == [0.0, 10.0, 30.0, 90.0][: len(delays)], delays
    assert len(launched) <= 4, launched  # was 60 in 118 s
    assert [backoff_s(k) for k in range(8)] == [0, 10, 30, 90, 270, 810, 900, 900]
    ledger.note(f"crash loop (a crash 2 s after each launch, max-per-hour 60): {len(launched)} restarts in 118 s, "
                f"waits {delays}")
    ledger.survive("server")


def _profile(tmp_path: Path) -> Any:
    from cockpit.core.profile import load_profile

    p = tmp_path / "demo.yaml"
    p.write_text("name: demo\nhosts: [{ssh: local}]\nserver: {model-path: /m}\non-crash: restart\n"
                 "on-crash-max-per-hour: 60\n")
    return load_profile(p)


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(d))
    return d


async def test_the_dashboard_waits_and_says_so(tmp_path: Path, data_home: Path, ledger) -> None:
    from cockpit.ui.app import CockpitApp
    from cockpit.ui.screens.dashboard import DashboardScreen

    clock = [T0]
    app = CockpitApp(profile=_profile(tmp_path), supervisor_factory=None, clock=lambda: clock[0])
    restarts: list[Any] = []
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen._start_restart = lambda changes: restarts.append(changes)  # type: ignore[method-assign]
        screen.query_one("#log").add_lines(story_log_lines())
        screen.apply_snapshot(story_snapshot(0.93, "ready", crashed=True))
        await pilot.pause(0.1)
        assert len(restarts) == 1 and screen.note.endswith("restarting with unchanged flags"), screen.note
        # the restarted run comes up, then crashes again at once
        screen.apply_snapshot(story_snapshot(0.93, "ready", restarted=True))
        await pilot.pause(0.05)
        clock[0] += 2.0
        again = story_snapshot(0.93, "ready", crashed=True)
        assert again.run is not None
        screen.apply_snapshot(dataclasses.replace(again, run=dataclasses.replace(again.run, id="20261129-115811-demo")))
        await pilot.pause(0.2)
        assert len(restarts) == 1, "the second restart did not wait"
        assert "backoff 10 s after 1 in the last hour" in screen.note and screen.note.endswith(" in 10 s"), screen.note
        [journal] = list(data_home.rglob("automatic-actions.jsonl"))
        recs = [json.loads(x) for x in journal.read_text().splitlines()]
        assert [r["delay_s"] for r in recs] == [0.0, 10.0], recs
    ledger.fault("server")
    ledger.survive("server")
