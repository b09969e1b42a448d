"""SSHTransport against a real OpenSSH server on loopback (fixtures in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cockpit.transport.base import HostKeyError, TransportError
from cockpit.transport.local import CommandTimeout
from cockpit.transport.ssh import SSHTransport, remote_command_line

if TYPE_CHECKING:
    from tests.conftest import SshHome

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
    "\n",
]
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
ECHO = [PY, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


def test_remote_command_line_quotes_everything() -> None:
    line = remote_command_line(["echo", "$(x)"], {"A": "b c"}, "/tmp/it's")
    assert "'$(x)'" in line and "'A=b c'" in line and "'/tmp/it'\"'\"'s'" in line
    with pytest.raises(ValueError):
        remote_command_line(["echo"], {"A;B": "x"})
    with pytest.raises(TypeError):
        remote_command_line("echo hi")


async def test_run_argv_intact_env_cwd_stdin(ssh_env: SshHome, tmp_path: Path) -> None:
    async with SSHTransport("gpu-box-1") as t:
        res = await t.run([*ECHO, *NASTY], cwd=str(tmp_path))
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == NASTY
        assert not (tmp_path / "CANARY").exists()
        assert not list(tmp_path.iterdir())
        code = "import os, sys; print(os.getcwd()); print(os.environ['COCKPIT_X']); print(sys.stdin.read())"
        res = await t.run(
            [PY, "-c", code], env={"COCKPIT_X": "$(touch CANARY) ;x"}, cwd=str(tmp_path), stdin=b"hi"
        )
        assert res.stdout.decode().splitlines() == [str(tmp_path), "$(touch CANARY) ;x", "hi"]
        assert res.stderr == b""
        assert not (tmp_path / "CANARY").exists()
        res = await t.run([PY, "-c", "import sys; sys.stderr.write('oops'); sys.exit(4)"])
        assert (res.returncode, res.stderr) == (4, b"oops")
        assert t.connects == 1  # one pooled connection carried all of it


async def test_missing_command_and_cwd(ssh_env: SshHome, tmp_path: Path) -> None:
    async with SSHTransport("gpu-box-1") as t:
        with pytest.raises(TransportError, match="command not found"):
            await t.run(["/nonexistent/prog", "x"])
        with pytest.raises(TransportError, match="does not exist"):
            await t.run(["true"], cwd=str(tmp_path / "nope"))


async def test_timeout_stops_the_remote_command(ssh_env: SshHome, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    async with SSHTransport("gpu-box-1") as t:
        with pytest.raises(CommandTimeout):
            await t.run([PY, "-c", code], timeout=1.5)
    pid = int(pidfile.read_text())
    assert await _gone(pid), "the remote command survived its timeout"


async def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":
            return True
        await asyncio.sleep(0.05)
    return False


async def test_stream_chunks_and_close_kills(ssh_env: SshHome, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = (
        f"import os, sys, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "for line in sys.stdin: print(line.strip().upper(), flush=True)\n"
        "while True:\n    print('tick', flush=True); time.sleep(0.05)\n"
    )
    async with SSHTransport("gpu-box-1") as t:
        s = await t.stream([PY, "-u", "-c", code], stdin=b"one\ntwo\n")
        seen = b""
        async for chunk in s.chunks():
            seen += chunk
            if seen.count(b"tick") >= 3:
                break
        assert seen.startswith(b"ONE\nTWO\n")
        assert s.returncode is None
        await s.close()
        assert await _gone(int(pidfile.read_text()))


async def test_stream_ends_with_exit_status(ssh_env: SshHome) -> None:
    async with SSHTransport("gpu-box-1") as t:
        s = await t.stream([PY, "-c", "print('a'); import sys; sys.exit(3)"])
        data = b"".join([c async for c in s.chunks()])
        assert data == b"a\n"
        assert s.returncode == 3
        await s.close()


async def test_alias_user_at_host_port_and_jump(ssh_env: SshHome) -> None:
    for dest in (f"{ssh_env.user}@127.0.0.1:{ssh_env.port}", "gpu-box-2", "via-jump"):
        async with SSHTransport(dest) as t:
            res = await t.run(["echo", "ok"])
            assert res.stdout == b"ok\n", dest
    # Through the jump host the target sees a connection from the jump sshd, not from us.
    async with SSHTransport("via-jump") as t:
        res = await t.run(["sh", "-c", 'echo "$SSH_CONNECTION"'])
        assert res.stdout.split()[3] == str(ssh_env.port).encode()
        assert len(t._jumps) == 1


async def test_unknown_host_key_is_refused(ssh_env: SshHome) -> None:
    t = SSHTransport("unknown-key")
    with pytest.raises(HostKeyError) as info:
        await t.run(["true"])
    msg = str(info.value) + " " + (info.value.hint or "")
    assert "unknown" in msg and "SHA256:" in msg
    assert f"ssh-keyscan -p {ssh_env.port} 127.0.0.1 >>" in msg
    await t.close()


async def test_changed_host_key_is_refused(ssh_env: SshHome) -> None:
    t = SSHTransport("changed-key")
    with pytest.raises(HostKeyError) as info:
        await t.run(["true"])
    assert "CHANGED" in str(info.value)
    assert f"ssh-keygen -R '[127.0.0.1]:{ssh_env.port}'" in (info.value.hint or "")
    await t.close()


async def test_known_hosts_none_in_config_does_not_switch_checks_off(
    ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n  User {ssh_env.user}\n"
        f"  IdentityFile {ssh_env.user_key}\n  UserKnownHostsFile none\n  StrictHostKeyChecking no\n"
    )
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(HostKeyError):
        async with SSHTransport("box") as t:
            await t.run(["true"])


async def test_dead_jump_host_fails_fast(ssh_env: SshHome) -> None:
    t0 = time.monotonic()
    with pytest.raises(TransportError) as info:
        async with SSHTransport("dead-jump") as t:
            await t.run(["true"])
    assert time.monotonic() - t0 < 15
    assert "jump host" in str(info.value)


async def test_unreachable_host_times_out_bounded(ssh_env: SshHome) -> None:
    # A listener that accepts and never speaks SSH: the connect timeout must fire.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    try:
        t0 = time.monotonic()
        t = SSHTransport(f"{ssh_env.user}@127.0.0.1:{port}", connect_timeout=1.5)
        with pytest.raises(TransportError, match="cannot reach"):
            await t.run(["true"])
        assert time.monotonic() - t0 < 6
        await t.close()
    finally:
        srv.close()


async def test_reconnects_after_drop(ssh_env: SshHome) -> None:
    async with SSHTransport("gpu-box-1") as t:
        assert (await t.run(["echo", "1"])).stdout == b"1\n"
        assert ssh_env.kill_connections() >= 1
        await asyncio.sleep(0.3)
        assert (await t.run(["echo", "2"])).stdout == b"2\n"
        assert t.connects == 2


async def test_reconnects_after_sshd_restart_with_backoff(ssh_env: SshHome) -> None:
    async with SSHTransport("gpu-box-1", connect_timeout=3) as t:
        assert (await t.run(["echo", "1"])).stdout == b"1\n"
        assert ssh_env._main is not None
        ssh_env._main.stop()
        await asyncio.sleep(0.2)
        with pytest.raises(TransportError):
            await t.run(["echo", "2"])
        failed_at = time.monotonic()
        # the first retry's wait: 1 s jittered to between half of it and all of it
        assert 0.5 <= t.backoff_s <= 1.0
        ssh_env._main.start()
        assert (await t.run(["echo", "3"])).stdout == b"3\n"
        # The second attempt waited out the back-off counted from the failed one (not from the
        # restart: sshd's own start-up eats part of the wait). 50 ms for the raise to reach us.
        assert time.monotonic() - failed_at >= t.backoff_s - 0.05


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


async def test_forward_port(ssh_env: SshHome, http_server: int) -> None:
    async with SSHTransport("via-jump") as t:
        port = await t.forward_port(http_server)
        assert port != http_server
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5).read()
        )
        assert body == b"hello /x"
        assert await t.forward_port(http_server) == port


async def test_transport_for_pools_per_host(ssh_env: SshHome) -> None:
    from cockpit.core.profile import Host
    from cockpit.transport import LocalTransport, close_all, transport_for

    # The pool is per process; earlier tests (other event loops) may have left entries in it.
    await close_all()
    a = transport_for(Host(ssh="gpu-box-1"))
    assert a is transport_for("gpu-box-1")
    assert isinstance(transport_for(Host(ssh="local")), LocalTransport)
    assert transport_for("gpu-box-2") is not a
    results = await asyncio.gather(*(a.run(["echo", str(i)]) for i in range(10)))
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(10)]
    assert isinstance(a, SSHTransport) and a.connects == 1
    await close_all()
    assert transport_for("gpu-box-1") is not a
    await close_all()


async def test_many_commands_share_one_connection_within_max_sessions(ssh_env: SshHome) -> None:
    # The test sshd keeps OpenSSH's default MaxSessions (10): 3 long streams + 30 short commands.
    async with SSHTransport("gpu-box-1") as t:
        streams = [await t.stream(["sleep", "30"]) for _ in range(3)]
        results = await asyncio.gather(*(t.run(["echo", str(i)]) for i in range(30)))
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(30)]
        for s in streams:
            await s.close()
        assert t.connects == 1


async def test_stream_ends_when_the_link_drops_and_next_stream_reconnects(ssh_env: SshHome) -> None:
    async with SSHTransport("gpu-box-1") as t:
        s = await t.stream(
            [PY, "-u", "-c", "import time\nwhile True: print('x', flush=True); time.sleep(0.05)"]
        )
        it = s.chunks().__aiter__()
        await it.__anext__()
        ssh_env.kill_connections()

        async def drain() -> None:
            async for _ in it:
                pass

        await asyncio.wait_for(drain(), 10)
        await s.close()
        s2 = await t.stream(["echo", "back"])
        assert b"".join([c async for c in s2.chunks()]) == b"back\n"
        assert t.connects == 2


async def test_forward_survives_reconnect_on_the_same_local_port(ssh_env: SshHome, http_server: int) -> None:
    async with SSHTransport("gpu-box-1") as t:
        port = await t.forward_port(http_server)
        ssh_env.kill_connections()
        await asyncio.sleep(0.3)
        await t.run(["true"])  # any call reconnects, and the tunnels come back with it
        assert t.connects == 2
        assert await t.forward_port(http_server) == port
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/y", timeout=5).read()
        )
        assert body == b"hello /y"


async def test_key_from_ssh_agent(ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A HOME with no key files at all: the only way in is the key held by a real ssh-agent.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host agent-box\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n  User {ssh_env.user}\n"
        f"  UserKnownHostsFile {ssh_env.known_hosts}\n"
    )
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            await asyncio.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", str(ssh_env.user_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        with pytest.raises(TransportError, match="authentication refused"):
            async with SSHTransport("agent-box") as t:
                await t.run(["true"])
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        async with SSHTransport("agent-box") as t:
            assert (await t.run(["echo", "via agent"])).stdout == b"via agent\n"
    finally:
        agent.terminate()
        agent.wait()


async def test_silent_or_untrusted_jump_host(
    ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    common = f"  User {ssh_env.user}\n  IdentityFile {ssh_env.user_key}\n"
    (home / ".ssh" / "config").write_text(
        f"Host silent-jump\n  HostName 127.0.0.1\n  Port {silent.getsockname()[1]}\n{common}"
        f"Host stranger-jump\n  HostName 127.0.0.1\n  Port {ssh_env.jump_port}\n{common}"
        f"  UserKnownHostsFile {home}/.ssh/nothing\n"
        f"Host behind-silent\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n  ProxyJump silent-jump\n{common}"
        f"  UserKnownHostsFile {ssh_env.known_hosts}\n"
        f"Host behind-stranger\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n  ProxyJump stranger-jump\n{common}"
        f"  UserKnownHostsFile {ssh_env.known_hosts}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    try:
        t0 = time.monotonic()
        with pytest.raises(TransportError, match=r"jump host silent-jump.*no answer"):
            async with SSHTransport("behind-silent", connect_timeout=1.5) as t:
                await t.run(["true"])
        assert time.monotonic() - t0 < 6
        with pytest.raises(HostKeyError, match=r"jump host stranger-jump: the host key .* is unknown"):
            async with SSHTransport("behind-stranger") as t:
                await t.run(["true"])
    finally:
        silent.close()
