"""The vLLM story in the TUI, by keys, against the real supervisor and the vLLM simulator:
launch → READY → CUDA OOM in prefill → crash modal proposing --gpu-memory-utilization 0.97 → 0.95
→ `r` → the new run READY with the headroom the advice predicted."""

from __future__ import annotations

from pathlib import Path

from cockpit.commands.demo import demo_profile
from cockpit.core.profile import Profile
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from tests.conftest import free_port
from tests.ui.test_flows import dashboard, demo_env, phase, stop_leftover_server, wait_for

__all__ = ["demo_env"]  # the fixture, shared with the SGLang flows


def fast_vllm_demo(tmp_path: Path) -> Profile:
    p = demo_profile(50.0, "vllm")
    server = dict(p.server)
    server["port"] = free_port()
    # the start-ups at 500 (--sim-startup-speed), the serving at 50, as the SGLang flows
    program = [*(p.program or []), "--sim-startup-speed", "500"]
    fast = p.model_copy(update={"server": server, "workdir": str(tmp_path / "demo-vllm"), "program": program})
    fast.source = p.source
    return fast


async def test_vllm_story_by_keys(demo_env: Path) -> None:
    profile = fast_vllm_demo(demo_env)
    app = CockpitApp(profile=profile)
    try:
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_for(pilot, lambda: phase(app) in ("ready", "crashed"), 90, "the first run READY")
            snap = dashboard(app).snapshot
            assert snap is not None and snap.state.backend == "vllm" and set(snap.state.ranks) == {"TP0", "TP1"}
            first_run = snap.run.id if snap.run else None
            await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), 120, "the crash modal")
            modal = app.screen
            assert isinstance(modal, CrashScreen)
            assert (modal.crash.kind, modal.crash.phase) == ("cuda_oom", "prefill")
            assert modal.proposal is not None
            diff = modal.proposal.changes[0]
            assert (diff.flag, diff.from_value, diff.to_value) == ("--gpu-memory-utilization", 0.97, 0.95)
            await pilot.press("r")

            def new_run_ready() -> bool:
                s = dashboard(app).snapshot
                return bool(s and s.run and s.run.id != first_run and s.state.phase == "ready")

            await wait_for(pilot, new_run_ready, 120, "the restarted run READY")
            s = dashboard(app).snapshot
            assert s is not None
            assert [c.as_diff() for c in s.flag_diff] == ["--gpu-memory-utilization 0.97 → 0.95"]
            assert s.state.min_headroom_gb is not None and s.state.min_headroom_gb > 5.0
            await pilot.press("q", "enter")
            await wait_for(pilot, lambda: app.return_code is not None, 20, "the app to exit")
    finally:
        await stop_leftover_server(profile)
