"""LocalTransport: real subprocesses, argv passed intact, no shell anywhere."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from cockpit.transport.base import TransportError
from cockpit.transport.local import CommandTimeout, LocalTransport

# Every one of these would do something if a shell saw it.
NASTY = [
    "a b",
    "$(touch CANARY)",
    "`touch CANARY`",
    "; touch CANARY",
    "'\"",
    "*",
    "~",
    "$HOME",
    "a\\b",
    "|&><",
    "",
]
ECHO_ARGS = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


async def test_run_passes_argv_intact_and_no_shell(tmp_path: Path) -> None:
    t = LocalTransport()
    res = await t.run([*ECHO_ARGS, *NASTY], cwd=str(tmp_path))
    import json

    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == NASTY
    assert not (tmp_path / "CANARY").exists()


async def test_env_cwd_stdin(tmp_path: Path) -> None:
    t = LocalTransport()
    code = "import os, sys; print(os.getcwd()); print(os.environ['COCKPIT_X']); print(sys.stdin.read())"
    res = await t.run(
        [sys.executable, "-c", code], env={"COCKPIT_X": "$(x) y"}, cwd=str(tmp_path), stdin=b"hello"
    )
    lines = res.stdout.decode().splitlines()
    assert lines == [str(tmp_path), "$(x) y", "hello"]
    # The inherited environment is still there.
    res = await t.run([sys.executable, "-c", "import os; print(os.environ['PATH'])"], env={"A": "1"})
    assert res.stdout.decode().strip() == os.environ["PATH"]


async def test_exit_status_and_stderr() -> None:
    res = await LocalTransport().run(
        [sys.executable, "-c", "import sys; sys.stderr.write('bad'); sys.exit(3)"]
    )
    assert res.returncode == 3
    assert res.stderr == b"bad"


async def test_missing_program_and_cwd(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="command not found"):
        await LocalTransport().run(["/nonexistent/program"])
    with pytest.raises(TransportError, match="does not exist"):
        await LocalTransport().run(["true"], cwd=str(tmp_path / "nope"))
    with pytest.raises(TypeError):
        await LocalTransport().run("echo hi")


async def test_timeout_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '60']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)\n"
    )
    with pytest.raises(CommandTimeout):
        await LocalTransport().run([sys.executable, "-c", code], timeout=1.0)
    child = int(pidfile.read_text())
    for _ in range(50):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the grandchild survived the timeout")


async def test_stream_chunks_stdin_and_close(tmp_path: Path) -> None:
    t = LocalTransport()
    code = "import sys, time\nfor line in sys.stdin: print(line.strip().upper(), flush=True)\nwhile True: print('tick', flush=True); time.sleep(0.05)\n"
    s = await t.stream([sys.executable, "-u", "-c", code], stdin=b"one\ntwo\n")
    seen = b""
    async for chunk in s.chunks():
        seen += chunk
        if seen.count(b"tick") >= 3:
            break
    assert seen.startswith(b"ONE\nTWO\n")
    assert s.returncode is None
    await s.close()
    assert s.returncode is not None


async def test_stream_ends_when_command_exits() -> None:
    s = await LocalTransport().stream([sys.executable, "-c", "print('a'); print('b')"])
    data = b"".join([c async for c in s.chunks()])
    assert data == b"a\nb\n"
    assert s.returncode == 0
    await s.close()


async def test_forward_port_is_identity() -> None:
    assert await LocalTransport().forward_port(8000) == 8000
