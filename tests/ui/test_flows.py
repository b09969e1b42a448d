"""The operator's flows against the real supervisor and the simulator (no GPU, no mocks):
pick → launch → crash modal → `r` → the new run READY at 0.88; quit leaving the server running.

Each test has its own HOME / XDG dirs / COCKPIT_SIM_GPU_DIR and a free port, and runs the demo
profile at a high --sim-speed so the whole story takes seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cockpit.commands.demo import demo_profile
from cockpit.core.profile import Profile
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import QuitScreen
from cockpit.ui.screens.picker import PickerScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.conftest import free_port

SIM_SPEED = 50.0
STARTUP_SPEED = "500"


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for var, sub in (("HOME", "home"), ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    (tmp_path / "gpus").mkdir()
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(tmp_path / "gpus"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    yield tmp_path


def fast_demo(tmp_path: Path) -> Profile:
    """The bundled demo, fast, on a free port, writing under the test's own directory. Its start-ups
    run at STARTUP_SPEED (--sim-startup-speed), the serving at SIM_SPEED: the crash comes from the
    traffic's long document, 240 simulated seconds into the serving, and READY stays on screen as
    long as before."""
    p = demo_profile(SIM_SPEED)
    server = dict(p.server)
    server["port"] = free_port()
    program = [*(p.program or []), "--sim-startup-speed", STARTUP_SPEED]
    fast = p.model_copy(update={"server": server, "workdir": str(tmp_path / "demo"), "program": program})
    fast.source = p.source
    return fast


async def wait_for(pilot: Any, cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def dashboard(app: CockpitApp) -> DashboardScreen:
    for s in app.screen_stack:
        if isinstance(s, DashboardScreen):
            return s
    raise AssertionError("no dashboard")


def phase(app: CockpitApp) -> str | None:
    snap = dashboard(app).snapshot
    return snap.state.phase if snap else None


async def stop_leftover_server(profile: Profile) -> None:
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(profile)
    try:
        if await sup.attach() is not None:
            await sup.stop(timeout=5)
    finally:
        await sup.close()


async def test_launch_crash_restart_with_the_change_reaches_ready(demo_env: Path) -> None:
    profile = fast_demo(demo_env)
    app = CockpitApp(profile=profile)
    try:
        async with app.run_test(size=(140, 45)) as pilot:
            # at this speed the crash follows readiness within seconds: either phase will do
            await wait_for(pilot, lambda: phase(app) in ("ready", "crashed"), 90, "the first run READY")
            dash = dashboard(app)
            snap = dash.snapshot
            assert snap is not None and len(snap.state.ranks) == 8
            assert snap.state.min_headroom_gb is not None and snap.state.min_headroom_gb < 3.0
            assert any(f.severity == "critical" and f.changes for f in snap.findings), "low headroom is flagged"
            first_run = snap.run.id if snap.run else None
            await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), 120, "the crash modal")
            modal = app.screen
            assert isinstance(modal, CrashScreen)
            assert modal.crash.kind == "cuda_oom"
            assert modal.proposal is not None
            diff = modal.proposal.changes[0]
            assert diff.flag == "--mem-fraction-static" and diff.from_value == 0.93 and diff.to_value == 0.88
            await pilot.press("r")

            def new_run_ready() -> bool:
                s = dashboard(app).snapshot
                return bool(s and s.run and s.run.id != first_run and s.state.phase == "ready")

            await wait_for(pilot, new_run_ready, 120, "the restarted run READY")
            s = dashboard(app).snapshot
            assert s is not None
            assert [c.as_diff() for c in s.flag_diff] == ["--mem-fraction-static 0.93 → 0.88"]
            assert s.state.min_headroom_gb is not None and s.state.min_headroom_gb > 5.0
            assert all(r.avail_after_capture_gb and r.avail_after_capture_gb > 5.0 for r in s.state.ranks.values())
            assert "mfs 0.88 (profile 0.93)" in str(dash.query_one("#header").render())
            # quit: the default leaves the server running
            await pilot.press("q")
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.return_code is not None, 20, "the app to exit")
        assert app.return_code == 0
        from cockpit.supervisor.supervisor import Supervisor

        sup = Supervisor(profile)
        try:
            run = await sup.attach()
            assert run is not None, "the server keeps running after quit"
            assert run.flags.get("mem-fraction-static") == 0.88
        finally:
            await sup.close()
        # opening the profile again attaches to that run: no second launch
        again = CockpitApp(profile=profile)
        async with again.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: phase(again) == "ready", 30, "the attached run")
            snap = dashboard(again).snapshot
            assert snap is not None and snap.run is not None and snap.run.id == run.id
            await pilot.press("q", "enter")
            await wait_for(pilot, lambda: again.return_code is not None, 20, "the app to exit")
    finally:
        await stop_leftover_server(profile)


async def test_pick_launch_filter_and_quit_stopping_the_server(demo_env: Path) -> None:
    profile = fast_demo(demo_env)
    path = demo_env / "work" / "profiles" / "fast-demo.yaml"
    path.parent.mkdir()
    import yaml

    data = profile.model_dump(by_alias=True, exclude_none=True)
    data["name"] = "fast-demo"
    data["server"]["mem-fraction-static"] = 0.88  # this one must not crash: it is left running
    path.write_text(yaml.safe_dump(data))
    from cockpit.core.profile import load_profile

    picked = load_profile(path)
    app = CockpitApp()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            picker = app.screen
            assert isinstance(picker, PickerScreen)
            picker.query_one("#picker-list").highlighted = [p.stem for p in picker.paths].index("fast-demo")  # type: ignore[attr-defined]
            await wait_for(pilot, lambda: picker.preview is not None and picker.preview.path == path, 20, "the preview")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen), 10, "the dashboard")
            await wait_for(pilot, lambda: phase(app) in ("capturing", "warmup", "ready"), 90, "capture")
            pane = dashboard(app).query_one(LogPane)
            await wait_for(pilot, lambda: len(pane.shown_lines) > 20, 20, "log lines")
            await pilot.press("m")
            assert pane.shown_lines and all(
                any(n in ln.text for n in ("avail mem", "max_total_num", "KV Cache", "Allocating", "Capture"))
                for ln in pane.shown_lines
            )
            await pilot.press("2")
            assert dashboard(app).rank_focus == "TP1"
            assert all("TP1" in ln.text for ln in pane.shown_lines)
            run_id = dashboard(app).snapshot.run.id  # type: ignore[union-attr]
            # back to the picker, leaving the server running: the profile is marked live
            await pilot.press("0", "escape")
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.screen is picker, 20, "the picker again")
            await wait_for(pilot, lambda: picker.live.get(path) == run_id, 30, "the live marker")
            assert "● live" in str(picker.query_one("#picker-list").get_option_at_index(picker.paths.index(path)).prompt)  # type: ignore[attr-defined]
            # opening it attaches to that run
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen), 10, "the dashboard again")
            await wait_for(pilot, lambda: dashboard(app).snapshot is not None and dashboard(app).snapshot.run is not None, 30, "attach")  # type: ignore[union-attr]
            assert dashboard(app).snapshot.run.id == run_id  # type: ignore[union-attr]
            await pilot.press("q")
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("s")
            await wait_for(pilot, lambda: app.return_code is not None, 60, "stop and exit")
        from cockpit.supervisor.supervisor import Supervisor

        sup = Supervisor(picked)
        try:
            assert await sup.attach() is None, "quit with s stops the server"
        finally:
            await sup.close()
    finally:
        await stop_leftover_server(picked)
        await asyncio.sleep(0)


async def test_preflight_refuses_the_hicache_mistake_before_launch(demo_env: Path) -> None:
    """8 ranks × --hicache-size 300 on this host: refused with the per-rank arithmetic, nothing runs."""
    base = fast_demo(demo_env)
    server = dict(base.server)
    server.update({"enable-hierarchical-cache": True, "hicache-size": 300})
    profile = base.model_copy(update={"server": server})
    app = CockpitApp(profile=profile)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: dashboard(app).note.startswith("launch refused"), 60, "the preflight refusal")
        dash = dashboard(app)
        hicache = [f for f in dash.preflight_findings if "hicache" in f.id]
        assert hicache and hicache[0].severity == "critical"
        advice = str(dash.query_one("#advice").render())
        assert "8 ranks × 300 GB" in advice and hicache[0].changes and "→" in advice
        assert dash.snapshot is None or dash.snapshot.run is None
        await pilot.press("q", "enter")
        await wait_for(pilot, lambda: app.return_code is not None, 20, "the app to exit")
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(profile)
    try:
        assert await sup.attach() is None, "a refused profile never launches"
    finally:
        await sup.close()


async def test_restart_asks_before_killing_a_leftover_that_holds_gpu_memory(demo_env: Path) -> None:
    """Another process holds memory on GPU 3 (a real process, declared to the simulated GPU the way a
    CUDA process shows up): `r` never launches on top of it; the TUI names it and kills it only
    when the operator says yes, then the new run reaches READY."""
    import json
    import subprocess
    import sys

    from cockpit.ui.screens.dialogs import ConfirmScreen

    profile = fast_demo(demo_env)
    app = CockpitApp(profile=profile)
    intruder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: phase(app) in ("ready", "crashed"), 90, "READY")
            first = dashboard(app).snapshot.run.id  # type: ignore[union-attr]
            proc_file = demo_env / "gpus" / f"proc-{intruder.pid}.json"
            proc_file.write_text(json.dumps({"pid": intruder.pid, "gpu_index": 3, "used_mib": 2048.0, "updated": time.time()}))
            await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), 120, "the crash modal")
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 60, "the leftover question")
            body = app.screen.body  # type: ignore[attr-defined]
            assert f"pid {intruder.pid} on GPU 3" in body and "Kill them" in body
            assert intruder.poll() is None, "nothing is killed before the operator answers"
            await pilot.press("y")
            await wait_for(pilot, lambda: intruder.poll() is not None, 30, "the leftover killed")

            def new_run_ready() -> bool:
                s = dashboard(app).snapshot
                return bool(s and s.run and s.run.id != first and s.state.phase == "ready")

            await wait_for(pilot, new_run_ready, 120, "the new run READY")
            s = dashboard(app).snapshot
            assert s is not None and [c.as_diff() for c in s.flag_diff] == ["--mem-fraction-static 0.93 → 0.88"]
            await pilot.press("q", "s")
            await wait_for(pilot, lambda: app.return_code is not None, 60, "stop and exit")
    finally:
        if intruder.poll() is None:
            intruder.kill()
        intruder.wait()
        await stop_leftover_server(profile)
