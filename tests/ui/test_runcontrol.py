"""The dashboard's run control (`cockpit/ui/runcontrol.py`) on its own, without Textual: the real
Supervisor on the simulator, launched to READY, restarted with a change, stopped; a preflight
refusal; the last run's crash shown before anything is launched over it; leftovers holding GPU
memory handed to the operator before a restart. No App, no screen: the events are collected as the
screen's callbacks would post them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.findings import FlagChange
from cockpit.core.profile import Profile, load_profile
from cockpit.supervisor.api import LogBatch, RunSnapshot
from cockpit.supervisor.supervisor import Supervisor
from cockpit.ui.runcontrol import (
    ActionDone,
    LeftoversFound,
    PreflightRefused,
    RunControl,
    RunEvent,
    RunStarted,
    SupervisorFailed,
)
from tests.reliability.helpers import sim_profile
from tests.ui.plainpython import run_without_textual

MFS = "--mem-fraction-static"


@dataclass
class Seen:
    """What the run control said, in order, as the dashboard's callbacks receive it."""

    events: list[RunEvent] = field(default_factory=list)
    snapshots: list[RunSnapshot] = field(default_factory=list)
    lines: int = 0

    def logs(self, batch: LogBatch) -> None:
        self.lines += len(batch.lines)

    @property
    def last(self) -> RunSnapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def control_for(profile: Profile, seen: Seen) -> RunControl:
    return RunControl(profile, Supervisor, on_event=seen.events.append, on_snapshot=seen.snapshots.append,
                      on_logs=seen.logs)


@contextlib.asynccontextmanager
async def launched(control: RunControl, ask_if_crashed: bool = True) -> AsyncIterator[asyncio.Task[None]]:
    """The control's launch-and-follow running as the dashboard's worker does; closed after."""
    follow = asyncio.create_task(control.launch(ask_if_crashed))
    try:
        yield follow
    finally:
        await control.close()
        await asyncio.wait_for(follow, 10)  # close() ends the follow loop


async def until(cond: Callable[[], object], timeout: float, what: str, seen: Seen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            last = seen.last if seen is not None else None
            state = f" (phase {last.state.phase}, lifecycle {last.lifecycle}, events {seen.events})" if last and seen else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{state}")
        await asyncio.sleep(0.05)


def ready_run(seen: Seen, not_id: str | None = None) -> bool:
    s = seen.last
    return bool(s and s.run and s.run.id != not_id and s.lifecycle == "running" and s.state.phase == "ready")


@pytest.fixture
async def sim_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    """The simulator's GPUs, runs, journal and data under the test's own directory; a profile on a
    free port. Whatever run is left is stopped by its recorded process groups afterwards."""
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(sim_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = tmp_path / "rc.yaml"
    path.write_text(sim_profile("rc", "local", tmp_path, sim_dir, tp=2))
    yield path
    sup = Supervisor(load_profile(path))
    try:
        if await sup.attach() is not None:
            await sup.stop(timeout=3)
    finally:
        await sup.close()


def test_the_run_control_loads_no_textual() -> None:
    """Like the log model, the run control is plain Python: importing it (and the dashboard's
    policy it serves) imports in a fresh interpreter where textual and rich cannot be imported."""
    run_without_textual("import cockpit.ui.runcontrol, cockpit.ui.unattended\n")


async def test_launch_to_ready_restart_with_a_change_and_stop(sim_env: Path) -> None:
    seen = Seen()
    control = control_for(load_profile(sim_env), seen)
    async with launched(control) as follow:
        await until(lambda: ready_run(seen), 60, "the launched run READY", seen)
        # preflight first, then the launch; the follow loop runs
        assert isinstance(seen.events[0], ActionDone) and seen.events[0].what == "preflight-start"
        [started] = seen.of(RunStarted)
        assert started.run is not None and not started.attached and not started.ended
        assert control.following and control.busy is None and seen.lines > 0
        first = started.run.id
        assert control.run_info is not None and control.run_info.id == first

        # restart with a change: stopped, GPUs free, launched with 0.85; the same follow goes on
        change = FlagChange(MFS, 0.88, 0.85)
        restart = asyncio.create_task(control.restart((change,)))
        await until(lambda: control.busy == "restarting", 5, "the restart to begin")
        await restart
        assert control.busy is None
        assert [(e.what, e.error) for e in seen.of(ActionDone)] == [("preflight-start", None), ("restart", None)]
        await until(lambda: ready_run(seen, not_id=first), 60, "the restarted run READY", seen)
        snap = seen.last
        assert snap is not None and snap.run is not None and snap.run.flags.get("mem-fraction-static") == 0.85
        assert [c.as_diff() for c in snap.flag_diff] == ["--mem-fraction-static 0.88 → 0.85"]
        assert control.following and not follow.done()

        # stop: the run ends, no leftovers, done without error; nothing left to attach to
        await control.stop()
        assert seen.of(ActionDone)[-1] == ActionDone("stop", None)
        assert not seen.of(LeftoversFound) and not seen.of(SupervisorFailed)
        other = Supervisor(load_profile(sim_env))
        try:
            assert await other.attach() is None, "the stopped run is gone"
        finally:
            await other.close()
    assert not control.following and follow.done()


async def test_preflight_refusal_launches_nothing(sim_env: Path) -> None:
    """2 ranks × --hicache-size 300000 GB of host memory: refused with the findings, nothing runs."""
    text = sim_env.read_text() + "  enable-hierarchical-cache: true\n  hicache-size: 300000\n"
    sim_env.write_text(text)
    seen = Seen()
    control = control_for(load_profile(sim_env), seen)
    await asyncio.wait_for(control.launch(), 60)  # returns: nothing to follow
    [refused] = seen.of(PreflightRefused)
    assert any(f.severity == "critical" and "hicache" in f.id for f in refused.findings), refused.findings
    assert not seen.of(RunStarted) and not control.following
    await control.close()
    assert control.supervisor is not None and control.supervisor.run_info is None


async def test_a_crashed_last_run_is_shown_not_launched_over(sim_env: Path) -> None:
    seen = Seen()
    control = control_for(load_profile(sim_env), seen)
    async with launched(control):
        await until(lambda: ready_run(seen), 60, "READY", seen)
        info = control.run_info
        assert info is not None and info.pgid is not None
        os.killpg(info.pgid, signal.SIGKILL)  # the server dies without a word
        await until(lambda: seen.last is not None and seen.last.state.phase == "crashed", 30, "the crash", seen)
    # a new dashboard on the profile: the crash, and no launch until the operator asks
    again = Seen()
    async with launched(control_for(load_profile(sim_env), again)):
        await until(lambda: again.of(RunStarted), 30, "the crashed run shown", again)
        [shown] = again.of(RunStarted)
        assert shown.ended and shown.attached and shown.run is not None and shown.run.id == info.id
        assert not any(isinstance(e, ActionDone) and e.what == "preflight-start" for e in again.events)


async def test_a_restart_hands_leftovers_to_the_operator_then_kills_them_when_asked(sim_env: Path) -> None:
    """A process outside the run holds memory on GPU 1 (declared to the simulated GPU the way a
    CUDA process shows up): the restart stops the run but launches nothing and reports it with
    the change it waits on; with kill_leftovers the process is killed and the run comes up."""
    seen = Seen()
    control = control_for(load_profile(sim_env), seen)
    intruder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        async with launched(control):
            await until(lambda: ready_run(seen), 60, "READY", seen)
            first = control.run_info.id if control.run_info else None
            sim_dir = Path(os.environ["COCKPIT_SIM_GPU_DIR"])
            (sim_dir / f"proc-{intruder.pid}.json").write_text(
                json.dumps({"pid": intruder.pid, "gpu_index": 1, "used_mib": 2048.0, "updated": time.time()}))
            change = (FlagChange(MFS, 0.88, 0.85),)
            await asyncio.wait_for(control.restart(change), 90)
            [left] = seen.of(LeftoversFound)
            assert left.changes == change and [p.pid for p in left.leftovers] == [intruder.pid]
            assert intruder.poll() is None, "nothing is killed before the operator answers"
            await asyncio.wait_for(control.restart(change, kill_leftovers=True), 90)
            assert intruder.wait(timeout=30) is not None
            await until(lambda: ready_run(seen, not_id=first), 60, "the new run READY", seen)
    finally:
        if intruder.poll() is None:
            intruder.kill()
            intruder.wait()
