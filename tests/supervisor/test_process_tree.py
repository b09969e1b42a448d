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

from cockpit.supervisor.host import HostOps
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
