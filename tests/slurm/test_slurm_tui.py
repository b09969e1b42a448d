"""The TUI drives a Slurm profile on the real test cluster: launch submits a job, the header shows
the job, its node and time left, READY comes from the log + the head node's /health, quit leaves
the job running and a second cockpit attaches to it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.profile import load_profile
from cockpit.supervisor.supervisor import Supervisor
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import QuitScreen
from tests.conftest import SshHome
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_slurm_e2e import _env, _profile


async def _wait(pilot: Any, cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _dash(app: CockpitApp) -> DashboardScreen:
    return next(s for s in app.screen_stack if isinstance(s, DashboardScreen))


async def test_tui_launches_a_job_and_shows_it(slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    profile = load_profile(_profile(tmp_path, "slurmtui", speed="200"))
    app = CockpitApp(profile=profile)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            def ready() -> bool:
                s = _dash(app).snapshot
                return bool(s and s.state.phase == "ready" and s.health == "200")

            await _wait(pilot, ready, 90, "READY")
            snap = _dash(app).snapshot
            assert snap is not None and snap.target is not None and snap.target.kind == "slurm"
            job = snap.target.job_id
            header = str(_dash(app).query_one("#header").render())
            assert f"slurm-login · job {job} · {slurm_cluster.node}" in header
            assert "Slurm RUNNING · 0:0" in header and " left" in header  # the 10-minute limit
            assert len(snap.state.ranks) == 8
            await pilot.press("q")
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("enter")  # the default: leave the job running
            # the app closes its supervisor (the login node's watchers) before it exits: < 5 s on a
            # quiet machine; beside the engines' chain 20 s once passed without the exit
            for _ in range(120):
                await pilot.pause(0.5)
                if app.return_code is not None:
                    break
            assert app.return_code == 0
        assert job in slurm_cluster.job_ids()
        sup = Supervisor(profile)
        try:
            run = await sup.attach()
            assert run is not None and getattr(sup.target, "job_id", None) == job
            res = await sup.stop(timeout=10)
            assert res.stopped
        finally:
            await sup.close()
        assert job not in slurm_cluster.job_ids()
    finally:
        slurm_cluster.cancel_all()
