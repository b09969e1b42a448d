"""`cockpit tui PROFILE` on a profile whose last run crashed (the real supervisor on the simulator):
the crash is shown and nothing is launched until the operator asks; `R` in the dialog restarts.

Before: opening the dashboard launched a new run at once, so the operator never saw the crash
they came to look at (issue 22)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from tests.ui.test_flows import dashboard, demo_env, fast_demo, stop_leftover_server, wait_for

__all__ = ["demo_env"]  # the fixture, used by name


async def test_a_crashed_profile_shows_its_crash_and_launches_only_when_asked(demo_env: Path) -> None:
    profile = fast_demo(demo_env)
    try:
        first = CockpitApp(profile=profile)
        async with first.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: isinstance(first.screen, CrashScreen), 150, "the crash modal")
            snap = dashboard(first).snapshot
            assert snap is not None and snap.run is not None
            crashed_run = snap.run.id
            await wait_for(pilot, lambda: dashboard(first).snapshot.lifecycle in ("failed", "stopped"), 60,  # type: ignore[union-attr]
                           "the crashed server's exit")
            await pilot.press("escape")
            await dashboard(first)._close_and_exit()

        again = CockpitApp(profile=profile)
        async with again.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: isinstance(again.screen, CrashScreen), 60, "the last run's crash")
            dash = dashboard(again)
            assert "nothing launched" in dash.note
            await asyncio.sleep(2.0)  # nothing launches by itself meanwhile
            await pilot.pause()
            snap = dash.snapshot
            assert snap is not None and snap.run is not None and snap.run.id == crashed_run
            assert snap.lifecycle not in ("preflight", "launching", "running")
            await pilot.press("R")  # the dialog's restart, unchanged

            def relaunched() -> bool:
                s = dash.snapshot
                return bool(s and s.run and s.run.id != crashed_run)

            await wait_for(pilot, relaunched, 90, "a new run")
            await dash._close_and_exit()
    finally:
        await stop_leftover_server(profile)
