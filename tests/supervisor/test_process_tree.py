"""The run's whole process tree, with real processes (vLLM's shape: the server starts an engine
process that starts workers, and leaves them orphaned when it dies): the host-side waiter records
every descendant while the server lives, ends what the server left behind, and a stop ends the
tree even where a process left the run's session. Nothing is found or signalled by name."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from cockpit.remote.host import HostOps
from cockpit.transport.local import LocalTransport

# a server that starts two children — one in the run's session, one that calls setsid() (a wrapper
# could) — prints their pids, then either exits with the given code or keeps serving
SERVER = (
    "import os, sys, time, subprocess\n"
    "a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
    "print('children', a.pid, b.pid, flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
    "os._exit(int(sys.argv[2]))\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


async def _children(log: Path, timeout: float = 20) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        for line in text.splitlines():
            if line.startswith("children "):
                a, b = line.split()[1:3]
                return int(a), int(b)
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server never printed its children: {log}")


async def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        await asyncio.sleep(0.1)
    return [p for p in pids if _alive(p)]


async def _launch(tmp_path: Path, run_id: str, serve_s: str, code: str) -> tuple[HostOps, dict[str, Any], int, int]:
    """The SERVER above, launched by the host program; (ops, its run, child a, child b)."""
    ops = HostOps(LocalTransport(), runs_root=str(tmp_path / "runs"))
    res = await ops.launch("tree", run_id, [sys.executable, "-c", SERVER, serve_s, code], env={},
                           cwd=str(tmp_path / "wd"), log="s.log")
    assert res.get("launched"), res
    a, b = await _children(Path(res["run"]["log_path"]))
    return ops, res["run"], a, b


async def test_what_a_dead_server_left_behind_is_ended_by_the_waiter(tmp_path: Path) -> None:
    ops, run, a, b = await _launch(tmp_path, "r1", "2.5", "1")
    run_dir = Path(run["run_dir"])
    try:
        # recorded while the server lived, with their start times
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len((run_dir / "tree").read_text().split() if (run_dir / "tree").exists() else []) < 4:
            await asyncio.sleep(0.1)
        tree = dict(line.split() for line in (run_dir / "tree").read_text().splitlines())
        assert {str(a), str(b)} <= set(tree), tree
        # the server exits 1; its children are orphaned — the setsid'd one outside the run's session
        assert not await _wait_dead([a, b], 30), "the server's leftovers outlived it"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (run_dir / "reaped").exists():
            await asyncio.sleep(0.1)
        reaped = (run_dir / "reaped").read_text()
        assert f"{a} SIGTERM" in reaped and f"{b} SIGTERM" in reaped, reaped
        assert (run_dir / "exit_code").read_text().strip() == "1"
        run = (await ops.find("tree"))
        assert run is not None and not run["alive"] and run["members"] == [] and "SIGTERM" in (run["reaped"] or "")
    finally:
        for pid in (a, b):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


async def test_a_stop_ends_a_process_that_left_the_session(tmp_path: Path) -> None:
    ops, run, a, b = await _launch(tmp_path, "r2", "600", "0")
    run_dir = Path(run["run_dir"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and str(b) not in ((run_dir / "tree").read_text() if (run_dir / "tree").exists() else ""):
            await asyncio.sleep(0.1)
        found = await ops.find("tree")
        assert found is not None and b in found["members"], found  # by the recorded tree, not the session
        stop = await ops.stop("tree", "r2", timeout=5)
        assert stop["stopped"] and not stop["left"], stop
        assert not await _wait_dead([a, b, run["pid"]], 5)
    finally:
        for pid in (a, b):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# ---- endings: "stopped" only when Cockpit or the operator stopped it ---------------------------------

# serves for argv[1] seconds, then exits with argv[2] (a negative one: raises that signal itself)
ENDS = ("import os, signal, sys, time\nprint('serving', flush=True)\ntime.sleep(float(sys.argv[1]))\n"
        "code = int(sys.argv[2])\nif code < 0:\n    signal.signal(-code, signal.SIG_DFL)\n    os.kill(os.getpid(), -code)\n"
        "os._exit(code)\n")


def _profile(tmp_path: Path, name: str, serve_s: str, code: str) -> Any:
    import json

    from cockpit.core.profile import load_profile

    script = tmp_path / "ends.py"  # a profile's program items are single lines
    script.write_text(ENDS)
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\nhosts: [{{ssh: local}}]\n"
                 f"program: {json.dumps([sys.executable, str(script), serve_s, code])}\n"
                 f"workdir: {tmp_path / 'work'}\nlog: {name}.log\n")
    return load_profile(p)


async def _ended(tmp_path: Path, name: str, serve_s: str, code: str, act: Any = None) -> Any:
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(_profile(tmp_path, name, serve_s, code), runs_root=str(tmp_path / "runs"))
    info = await sup.launch()
    runner = asyncio.create_task(sup.run())
    try:
        if act is not None:
            await asyncio.sleep(1.0)
            await act(sup, info)
        assert await sup.wait_until(lambda s: s.any_exited, 30)
        await asyncio.sleep(0.3)
        return sup.snapshot()
    finally:
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner


async def test_an_exit_0_nobody_asked_for_is_a_crash(tmp_path: Path) -> None:
    snap = await _ended(tmp_path, "zero", "0.5", "0")
    assert snap.state.phase == "crashed" and snap.state.crash is not None
    assert "ended unexpectedly" in snap.state.crash.message
    # no error in its log: a server exits 0 when asked (a SIGTERM it handled), not by itself
    assert snap.ending == {"exit_code": 0, "signal": None, "by": "external"}
    one = await _ended(tmp_path, "one", "0.3", "1")
    assert one.state.phase == "crashed" and one.ending == {"exit_code": 1, "signal": None, "by": "engine"}


async def test_an_outside_kill_is_external_and_a_fault_is_the_engines(tmp_path: Path) -> None:
    async def kill9(_sup: Any, info: Any) -> None:
        os.kill(info.pid, signal.SIGKILL)

    snap = await _ended(tmp_path, "killed", "600", "0", kill9)
    assert snap.state.phase == "crashed" and snap.ending == {"exit_code": 137, "signal": "SIGKILL", "by": "external"}
    # SIGILL raised by the server's own code (a binary built for another CPU)
    ill = await _ended(tmp_path, "sigill", "0.3", "-4", None)
    assert ill.state.phase == "crashed" and ill.ending == {"exit_code": 132, "signal": "SIGILL", "by": "engine"}


async def test_a_stop_is_the_operators(tmp_path: Path) -> None:
    async def stop(sup: Any, _info: Any) -> None:
        await sup.stop(timeout=5)

    snap = await _ended(tmp_path, "stopped", "600", "0", stop)
    assert snap.state.phase == "stopped" and snap.state.crash is None
    assert snap.ending is not None and snap.ending["by"] == "operator"
