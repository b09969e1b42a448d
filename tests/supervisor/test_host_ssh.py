"""The host program over a real sshd on loopback: launch survives the SSH session, follow
survives killed connections with no line lost or repeated."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

from cockpit.remote.host import HostOps, LinkState, LogChunk, LogFollower, ServerExited
from cockpit.transport.ssh import SSHTransport

WRITER = (
    "import sys, time\n"
    "for i in range(int(sys.argv[1])):\n"
    "    print(f'line {i:06d} ' + 'y' * (i % 70), flush=True)\n"
    "    time.sleep(float(sys.argv[2]))\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_launch_outlives_the_ssh_connection_and_follow_resumes(ssh_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = SSHTransport("gpu-box-1")
    ops = HostOps(t, runs_root=str(tmp_path / "runs"))
    log = tmp_path / "wd" / "s.log"
    res = await ops.launch("p", "r1", [sys.executable, "-c", WRITER, "4000", "0.001"], env={},
                           cwd=str(tmp_path / "wd"), log="s.log")
    assert res.get("launched"), res
    run = res["run"]
    # the SSH session that launched it is gone; the server is not
    ssh_env.kill_connections()
    await asyncio.sleep(0.3)
    assert _alive(run["pid"])
    fol = LogFollower(ops, str(log), offset=0, watch={"pid": run["pid"], "run_dir": run["run_dir"]}, poll_s=0.02)
    got = bytearray()
    downs = 0
    exited: ServerExited | None = None

    async def killer() -> None:
        for _ in range(3):
            await asyncio.sleep(0.8)
            ssh_env.kill_connections()

    k = asyncio.create_task(killer())

    async def consume() -> None:
        nonlocal exited, downs
        async with contextlib.aclosing(fol.items()) as items:
            async for item in items:
                if isinstance(item, LogChunk):
                    assert item.offset == len(got)
                    got.extend(item.data)
                elif isinstance(item, LinkState) and not item.up:
                    downs += 1
                elif isinstance(item, ServerExited):
                    exited = item
                    return

    await asyncio.wait_for(consume(), 60)
    await k
    await fol.close()
    await t.close()
    assert exited is not None and exited.code == 0
    assert downs >= 1
    assert bytes(got) == log.read_bytes()
    assert got.count(b"\n") == 4000


async def test_remote_stop_leaves_no_process(ssh_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = SSHTransport("gpu-box-2")
    ops = HostOps(t, runs_root=str(tmp_path / "runs"))
    res = await ops.launch("p", "r1", [sys.executable, "-c", "import time; time.sleep(600)"], env={},
                           cwd=str(tmp_path), log="x.log")
    pid = res["run"]["pid"]
    again = await ops.launch("p", "r2", ["true"], env={}, cwd=str(tmp_path), log="x.log")
    assert again.get("refused") == "live"
    t0 = time.monotonic()
    stopped = await ops.stop("p", None, timeout=5)
    assert stopped["stopped"] and not _alive(pid)
    assert time.monotonic() - t0 < 5
    await t.close()
