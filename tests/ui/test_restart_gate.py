"""Every restart through the gate, in the TUI (issue 37 item 1, issue 40 finding 1): the dashboard's
`R`, the crash dialog's `e`, and the unattended policy (`on-crash: restart`, `restart-with-advice`,
`on-hang: restart`) walk the gate on the new flags before anything is stopped.

The run each test follows is one the gate would refuse: a HiCache size per rank beyond this whole
machine's RAM, launched the way an older Cockpit (or a hand) launched it — through the real host
program, without the gate (the simulator is told its host has the RAM, so it comes up READY). A
restart of it is refused with the per-rank arithmetic in the preflight dialog (the advice panel a
refused launch shows), and nothing is stopped or relaunched: a live run keeps its pid and READY; an
automatic restart stops there and asks (note, bell, the `notify:` command with
COCKPIT_EVENT=restart_refused). A flag change the gate accepts relaunches under a new pid.
Real parts: the simulator, the real Supervisor and host program, Textual's Pilot.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.profile import Profile, load_profile
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import ConfirmScreen
from tests.commands.test_cli_ops import Env, _alive, _make_env
from tests.commands.test_restart_cli import host_ram_beyond_gb
from tests.commands.test_stacks_cli import _schedulers
from tests.preflight.test_gate import _in_process


def _unsafe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, mfs: float = 0.88, speed: str | None = None,
            top: str = "") -> tuple[Env, Profile, int]:
    """A simulated SGLang (8 ranks) whose flags hold --hicache-size beyond this machine's RAM."""
    size = host_ram_beyond_gb()
    env = _make_env(tmp_path, ["local"], mfs=mfs,
                    extra_server=f"  enable-hierarchical-cache: true\n  hicache-size: {size}\n")
    text = env.profile.read_text().replace('"--sim-version"', '"--sim-host-mem-gb", "100000000", "--sim-version"')
    if speed is not None:
        text = text.replace('"--sim-speed", "200"', f'"--sim-speed", "{speed}", "--sim-startup-speed", "200"')
    env.profile.write_text(text + top)
    _in_process(env, monkeypatch)
    return env, load_profile(env.profile), size


async def launch_without_the_gate(profile: Profile) -> tuple[str, int]:
    """Start `profile`'s server as a run of it, through the real host program, without the gate —
    what an older Cockpit did (the run this issue is about). Returns (run id, server pid)."""
    from cockpit.backends import get_backend
    from cockpit.preflight.gate import merged_flags
    from cockpit.remote.hostresults import LaunchReply
    from cockpit.supervisor.nodes import resolve_program
    from cockpit.supervisor.supervisor import Supervisor
    from cockpit.supervisor.targets.base import new_run_id

    sup = Supervisor(profile)
    try:
        node = sup.nodes[0]
        argv = resolve_program(list(get_backend(profile.backend).launch.node_argvs(profile, {}, None)[0]), local=True)
        run_id = new_run_id()
        reply = LaunchReply.from_wire(await node.ops.launch(
            node.key, run_id, argv, env=dict(profile.env), cwd=profile.workdir, log=node.log_file,
            meta={"flags": merged_flags(profile, {}), "overrides": {}, "node_rank": 0, "hosts": [node.label]}))
        assert reply.record is not None and reply.error is None, reply
        assert reply.record.pid is not None
        return run_id, reply.record.pid
    finally:
        await sup.close()


async def wait_for(pilot: Any, cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def dash(app: CockpitApp) -> DashboardScreen:
    for s in app.screen_stack:
        if isinstance(s, DashboardScreen):
            return s
    raise AssertionError("no dashboard")


def _phase(app: CockpitApp) -> str | None:
    snap = dash(app).snapshot
    return snap.state.phase if snap is not None else None


def _run_dirs(env: Env) -> list[Path]:
    return [d for d in env.runs_dir("simtest").iterdir() if d.is_dir()]


def _refusal_shown(app: CockpitApp, size: int) -> None:
    d = dash(app)
    assert d.restart_refusal and d.restart_refusal[0].id == "hicache_host_memory", d.restart_refusal
    advice = str(d.query_one("#advice").render())
    assert f"8 ranks × {size} GB" in advice and "GB available" in advice, advice  # the per-rank arithmetic


async def _quit(pilot: Any, app: CockpitApp) -> None:
    while not isinstance(app.screen, DashboardScreen):
        await pilot.press("escape")
    await pilot.press("q", "enter")
    await wait_for(pilot, lambda: app.return_code is not None, 20, "the app to exit")


async def test_R_on_a_live_run_the_gate_refuses_shows_the_preflight_dialog_and_leaves_it_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, profile, size = _unsafe(tmp_path, monkeypatch)
    try:
        run_id, pid = await launch_without_the_gate(profile)
        app = CockpitApp(profile=profile)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: _phase(app) == "ready" and dash(app).snapshot.health == "200",  # type: ignore[union-attr]
                           90, "the attached run READY")
            await pilot.press("R")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await wait_for(pilot, lambda: dash(app).note.startswith("restart refused"), 60, "the refusal")
            _refusal_shown(app, size)
            await pilot.pause(1.0)
            snap = dash(app).snapshot
            assert snap is not None and snap.run is not None and snap.run.id == run_id and snap.run.pid == pid
            assert snap.state.phase == "ready" and snap.lifecycle == "running" and snap.health == "200"
            assert _alive(pid) and len(_run_dirs(env)) == 1
            await _quit(pilot, app)
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


async def test_crash_dialog_e_refused_relaunches_nothing_and_a_change_the_gate_accepts_reaches_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash dialog's `e` with a change that keeps the HiCache size: refused, nothing launched
    over the crashed run; `e` again turning HiCache off: the new run READY under a new pid."""
    env, profile, size = _unsafe(tmp_path, monkeypatch, mfs=0.93)  # 0.93: a CUDA OOM in the traffic
    try:
        run_id, pid = await launch_without_the_gate(profile)
        app = CockpitApp(profile=profile)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), 120, "the crash dialog")

            async def edit(words: str) -> None:
                modal = app.screen
                assert isinstance(modal, CrashScreen)
                await pilot.press("e")
                modal.query_one("#crash-edit").value = words  # type: ignore[attr-defined]
                await pilot.press("enter")

            await edit("mem-fraction-static=0.88")
            await wait_for(pilot, lambda: dash(app).note.startswith("restart refused"), 60, "the refusal")
            _refusal_shown(app, size)
            snap = dash(app).snapshot
            assert snap is not None and snap.run is not None and snap.run.id == run_id
            assert snap.state.phase == "crashed" and len(_run_dirs(env)) == 1  # nothing relaunched
            await pilot.press("c")  # the crash dialog again
            await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), 10, "the crash dialog")
            await edit("mem-fraction-static=0.88 enable-hierarchical-cache=false")

            def new_ready() -> bool:
                s = dash(app).snapshot
                return bool(s and s.run and s.run.id != run_id and s.state.phase == "ready" and s.health == "200")

            await wait_for(pilot, new_ready, 120, "the relaunched run READY")
            s = dash(app).snapshot
            assert s is not None and s.run is not None and s.run.pid != pid and not dash(app).restart_refusal
            assert s.run.flags.get("enable-hierarchical-cache") is False and s.run.flags.get("mem-fraction-static") == 0.88
            await _quit(pilot, app)
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


def _notified(out: Path) -> list[dict[str, str]]:
    return [json.loads(ln) for ln in out.read_text().splitlines()] if out.exists() else []


def _notify_top(out: Path) -> str:
    script = (f"import json, os; f = open({str(out)!r}, 'a'); "
              "f.write(json.dumps({k: v for k, v in os.environ.items() if k.startswith('COCKPIT_')}) + '\\n')")
    return f"notify: {json.dumps([sys.executable, '-c', script])}\n"


@pytest.mark.parametrize("policy", ["restart", "restart-with-advice"])
async def test_on_crash_restart_refused_by_the_gate_stops_and_asks(policy: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "notified.jsonl"
    env, profile, size = _unsafe(tmp_path, monkeypatch, mfs=0.93, top=f"on-crash: {policy}\n" + _notify_top(out))
    try:
        run_id, _pid = await launch_without_the_gate(profile)
        app = CockpitApp(profile=profile)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: "restart refused" in dash(app).note, 150, "the automatic restart refused")
            d = dash(app)
            assert d.note.startswith("auto: restart refused by preflight, nothing relaunched"), d.note
            _refusal_shown(app, size)
            assert d.bells >= 2  # the crash, then the refusal
            await wait_for(pilot, lambda: any(n["COCKPIT_EVENT"] == "restart_refused" for n in _notified(out)), 20,
                           "the notify command")
            said = [n for n in _notified(out) if n["COCKPIT_EVENT"] == "restart_refused"]
            assert said[0]["COCKPIT_ACTION"] == "ask" and "refused by preflight" in said[0]["COCKPIT_SUMMARY"]
            await pilot.pause(2.0)
            snap = d.snapshot
            assert snap is not None and snap.run is not None and snap.run.id == run_id  # nothing relaunched
            assert snap.state.phase == "crashed" and len(_run_dirs(env)) == 1
            await _quit(pilot, app)
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


async def test_on_hang_restart_refused_by_the_gate_leaves_the_hung_run_and_asks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "notified.jsonl"
    top = "on-hang: restart\npolicy: {hang-after-s: 3}\n" + _notify_top(out)
    env, profile, size = _unsafe(tmp_path, monkeypatch, speed="20", top=top)
    stopped: list[int] = []
    try:
        env.profile.write_text(env.profile.read_text().replace("  trust-remote-code: true\n",
                                                               "  trust-remote-code: true\n  enable-metrics: true\n"))
        profile = load_profile(env.profile)
        run_id, pid = await launch_without_the_gate(profile)
        app = CockpitApp(profile=profile)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: _phase(app) == "ready" and (dash(app).snapshot.serving or {}).get("gen_tok_s"),  # type: ignore[union-attr]
                           90, "READY with tokens flowing")
            await asyncio.sleep(4)  # past the first window after READY
            stopped = _schedulers(pid)
            assert len(stopped) == 8, stopped
            for p in stopped:
                os.kill(p, signal.SIGSTOP)
            await wait_for(pilot, lambda: "restart refused" in dash(app).note, 60, "the automatic restart refused")
            d = dash(app)
            assert d.note.startswith("auto: restart refused by preflight, nothing relaunched"), d.note
            _refusal_shown(app, size)
            await wait_for(pilot, lambda: any(n["COCKPIT_EVENT"] == "restart_refused" for n in _notified(out)), 20,
                           "the notify command")
            snap = d.snapshot
            assert snap is not None and snap.run is not None and snap.run.id == run_id and snap.run.pid == pid
            assert _alive(pid) and len(_run_dirs(env)) == 1  # not stopped, not relaunched
            await _quit(pilot, app)
    finally:
        for p in stopped:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        env.cockpit("down", "simtest", "--timeout", "3")
