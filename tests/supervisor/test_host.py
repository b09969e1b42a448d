"""The host program through LocalTransport: launch detached, lock, find, stop, follow."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cockpit.remote.host import HostOps, LogChunk, LogFollower, LogReset, ServerExited
from cockpit.transport.local import LocalTransport

WRITER = (
    "import sys, time\n"
    "n = int(sys.argv[1]); delay = float(sys.argv[2])\n"
    "for i in range(n):\n"
    "    print(f'line {i:06d} ' + 'x' * (i % 50), flush=True)\n"
    "    time.sleep(delay)\n"
    "time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0)\n"
)


def _ops(tmp_path: Path) -> HostOps:
    return HostOps(LocalTransport(), runs_root=str(tmp_path / "runs"))


def _wait(pred, timeout=10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_launch_refuse_second_stop(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    argv = [sys.executable, "-c", WRITER, "100000", "0.01"]
    res = await ops.launch("p", "r1", argv, env={"COCKPIT_T": "1"}, cwd=str(tmp_path / "wd"), log="logs/s.log")
    assert res.get("launched"), res
    run = res["run"]
    assert run["alive"] and run["pid"] == run["pgid"]
    run_dir = Path(run["run_dir"])
    for name in ("argv.json", "env.json", "pid", "pgid", "started_at", "log_path", "log_offset"):
        assert (run_dir / name).exists(), name
    assert (tmp_path / "wd/logs/s.log").exists()
    # each run writes its own file; the profile's log path is Cockpit's link to the current one
    assert os.readlink(tmp_path / "wd/logs/s.log") == "s.r1.log"
    assert run["log_path"] == str(tmp_path / "wd/logs/s.r1.log") and run["log_offset"] == 0
    assert not Path(run["log_path"]).is_symlink()
    # the server is not our child: it was reparented away from the launcher
    with open(f"/proc/{run['pid']}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid == run["waiter_pid"]
    # a second launch is refused while the first is alive, even when two race
    a, b = await asyncio.gather(
        ops.launch("p", "r2", argv, env={}, cwd=str(tmp_path / "wd"), log="logs/s.log"),
        ops.launch("p", "r3", argv, env={}, cwd=str(tmp_path / "wd"), log="logs/s.log"),
    )
    assert a.get("refused") == "live" and b.get("refused") == "live"
    assert a["run"]["run_id"] == "r1"
    found = await ops.find("p")
    assert found is not None and found["run_id"] == "r1" and found["alive"]
    stopped = await ops.stop("p", "r1", timeout=5)
    assert stopped["stopped"] and not stopped["left"]
    assert not _alive(run["pid"])
    assert stopped["run"]["exit_code"] == 128 + signal.SIGTERM
    # a stopped run does not block the next launch; the next run writes a new file (from offset 0),
    # the link moves to it, and the first run's whole log stays where it was
    first_log = Path(run["log_path"]).read_bytes()
    res2 = await ops.launch("p", "r4", argv, env={}, cwd=str(tmp_path / "wd"), log="logs/s.log")
    assert res2.get("launched"), res2
    assert res2["run"]["log_offset"] == 0 and res2["run"]["log_path"] == str(tmp_path / "wd/logs/s.r4.log")
    assert os.readlink(tmp_path / "wd/logs/s.log") == "s.r4.log"
    assert len(first_log) > 0 and Path(run["log_path"]).read_bytes() == first_log
    await ops.stop("p", "r4", timeout=5)


async def test_stop_escalates_to_sigkill_and_catches_the_whole_session(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    stubborn = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        # a child that leaves the server's process group: only the session still ties it to the run
        "subprocess.Popen([sys.executable, '-c', 'import os,time; os.setpgid(0,0); time.sleep(600)'])\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    res = await ops.launch("q", "r1", [sys.executable, "-c", stubborn], env={}, cwd=str(tmp_path), log="q.log")
    assert res.get("launched"), res
    assert _wait(lambda: "up" in (tmp_path / "q.log").read_text())
    members: list[int] = []
    for _ in range(100):
        found = await ops.find("q")
        assert found is not None
        members = found["members"]
        if len(members) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(members) == 2
    t0 = time.monotonic()
    stopped = await ops.stop("q", None, timeout=1)
    assert stopped["killed"] and stopped["stopped"] and stopped["left"] == []
    assert time.monotonic() - t0 < 8
    assert not any(_alive(p) for p in members)
    assert stopped["run"]["exit_code"] == 128 + signal.SIGKILL


async def test_launch_failure_is_reported(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    res = await ops.launch("f", "r1", ["/nonexistent/server"], env={}, cwd=str(tmp_path), log="f.log")
    assert "error" in res and "nonexistent" in res["error"]
    # a failed launch does not block the next one
    res = await ops.launch("f", "r2", [sys.executable, "-c", "pass"], env={}, cwd=str(tmp_path), log="f.log")
    assert res.get("launched"), res


async def test_follow_survives_killed_connections_without_loss_or_repeat(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    log = tmp_path / "f.log"
    res = await ops.launch("w", "r1", [sys.executable, "-c", WRITER, "3000", "0.0005"], env={}, cwd=str(tmp_path), log="f.log")
    run = res["run"]
    fol = LogFollower(ops, str(log), offset=0, watch={"pid": run["pid"], "run_dir": run["run_dir"]}, poll_s=0.02)
    got = bytearray()
    exited: ServerExited | None = None

    async def killer() -> None:
        for _ in range(6):
            await asyncio.sleep(0.25)
            s = fol._stream
            if s is not None:
                with_pid = getattr(s, "pid", None)
                if with_pid:
                    os.killpg(with_pid, signal.SIGKILL)

    k = asyncio.create_task(killer())
    async def consume() -> None:
        nonlocal exited
        async with contextlib.aclosing(fol.items()) as items:
            async for item in items:
                if isinstance(item, LogChunk):
                    assert item.offset == len(got)
                    got.extend(item.data)
                elif isinstance(item, ServerExited):
                    exited = item
                    break

    await asyncio.wait_for(consume(), 30)
    await k
    await fol.close()
    assert exited is not None and exited.code == 0
    assert fol.reconnects >= 1
    assert bytes(got) == log.read_bytes()


async def test_follow_tail_truncation_and_rotation(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    log = tmp_path / "t.log"
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(100000)))
    fol = LogFollower(ops, str(log), offset=0, tail=3, poll_s=0.02)
    seen: list[object] = []

    async def consume() -> None:
        async with contextlib.aclosing(fol.items()) as items:
            async for item in items:
                seen.append(item)
                if isinstance(item, LogChunk) and b"after-rotate" in item.data:
                    return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)
    assert b"".join(c.data for c in seen if isinstance(c, LogChunk)) == b"old 99997\nold 99998\nold 99999\n"
    # truncation: copytruncate-style rotation
    log.write_bytes(b"")
    await asyncio.sleep(0.3)
    with open(log, "ab") as f:
        f.write(b"after-truncate\npartial")
    await asyncio.sleep(0.3)
    # rotation: rename and create anew
    with open(log, "ab") as f:
        f.write(b" line\n")
    os.rename(log, tmp_path / "t.log.1")
    log.write_bytes(b"after-rotate\n")
    await asyncio.wait_for(task, 10)
    await fol.close()
    kinds = [type(x).__name__ for x in seen]
    assert "LogReset" in kinds
    text = b"".join(c.data for c in seen if isinstance(c, LogChunk))
    assert b"after-truncate\npartial line\n" in text
    assert text.endswith(b"after-rotate\n")
    assert [x.why for x in seen if isinstance(x, LogReset)][:1] == ["truncated"]


async def test_read_and_non_follow(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    log = tmp_path / "r.log"
    log.write_bytes(b"a\nb\nc\nno newline")
    assert await ops.read(str(log), 2, 6) == b"b\nc\n"
    fol = LogFollower(ops, str(log), offset=0, tail=2, follow=False)
    data = b"".join([i.data async for i in fol.items() if isinstance(i, LogChunk)])
    assert data == b"c\nno newline"


@pytest.mark.parametrize("lines", [1, 2, 5])
def test_tail_offset(tmp_path: Path, lines: int) -> None:
    from cockpit.remote.programs import logfiles

    p = tmp_path / "x"
    p.write_bytes(b"1\n22\n333\n")
    with open(p, "rb") as f:
        off = logfiles.tail_offset(f, 9, lines)
    assert p.read_bytes()[off:] == b"".join([b"1\n", b"22\n", b"333\n"][-lines:])


async def test_orphaned_processes_of_a_dead_server_block_the_next_launch(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    parent = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    res = await ops.launch("o", "r1", [sys.executable, "-c", parent], env={}, cwd=str(tmp_path), log="o.log")
    run = res["run"]
    assert _wait(lambda: "up" in (tmp_path / "o.log").read_text())
    os.kill(run["pid"], signal.SIGKILL)  # the main process dies, its child (a "rank") lives on
    assert _wait(lambda: not _alive(run["pid"]))
    found = await ops.find("o")
    assert found is not None and not found["alive"] and len(found["members"]) == 1
    again = await ops.launch("o", "r2", [sys.executable, "-c", "pass"], env={}, cwd=str(tmp_path), log="o.log")
    assert again.get("refused") == "live"
    stopped = await ops.stop("o", None, timeout=3)
    assert stopped["stopped"] and not any(_alive(p) for p in found["members"])
    res = await ops.launch("o", "r3", [sys.executable, "-c", "pass"], env={}, cwd=str(tmp_path), log="o.log")
    assert res.get("launched"), res
