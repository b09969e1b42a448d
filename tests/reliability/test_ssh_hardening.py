"""Issue 18 items 4 and 10, against real sshd processes on loopback.

4. A host key that changes mid-session (the server is re-keyed and restarted under a running
   `cockpit logs -f` and a supervisor) is shown as "host key CHANGED" with the new fingerprint
   and the command that accepts it, and reconnecting stops; it never reads as a network drop.
10. A host that never answers costs one connect timeout per command (ConnectTimeout from the
   ssh config, else 10 s), not several; a link frozen after login (sshd SIGSTOPped) is noticed
   within ServerAliveInterval x (ServerAliveCountMax + 1), and the message says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cockpit.core.profile import parse_profile
from cockpit.supervisor.supervisor import Supervisor
from tests.conftest import _keygen, _Sshd
from tests.reliability.helpers import PY, Drained, make_env, wait_for, writer_profile, writer_script


class OwnHost:
    """An sshd of this test's own (its key can change), and a HOME whose ~/.ssh/config reaches
    it as `own` (its known_hosts holds the key it starts with)."""

    def __init__(self, ssh_home, root: Path, extra: str = "", sshd_extra: str = ""):
        root.mkdir(parents=True)
        self.sshd = _Sshd(root, "own", ssh_home.home.parent / "authorized_keys")
        self.sshd.extra_config = sshd_extra
        self.sshd.start_on_free_port()
        self.home = root / "home"
        (self.home / ".ssh").mkdir(parents=True)
        os.chmod(self.home / ".ssh", 0o700)
        self.known = self.home / ".ssh" / "known_hosts"
        self.known.write_text(f"[127.0.0.1]:{self.sshd.port} ssh-ed25519 {self.sshd.host_key_b64}\n")
        (self.home / ".ssh" / "config").write_text(
            f"Host own\n  HostName 127.0.0.1\n  Port {self.sshd.port}\n  User {ssh_home.user}\n"
            f"  IdentityFile {ssh_home.user_key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
            f"  UserKnownHostsFile {self.known}\n{extra}")
        os.chmod(self.home / ".ssh" / "config", 0o600)
        self.env = {**ssh_home.env, "HOME": str(self.home)}

    def rekey(self) -> str:
        """Restart the server with a new host key; its SHA256 fingerprint."""
        self.sshd.stop()
        for p in (self.sshd.host_key, self.sshd.host_key.with_suffix(".pub")):
            p.unlink()
        self.sshd.host_key_b64 = _keygen(self.sshd.host_key, "own-rekeyed")
        self.sshd.start()
        out = subprocess.run(["ssh-keygen", "-lf", str(self.sshd.host_key.with_suffix(".pub"))],
                             capture_output=True, text=True, check=True).stdout
        return out.split()[1]

    def sshd_processes(self) -> list[int]:
        """The per-connection sshd processes (not the listener, not the commands they run)."""
        out: list[int] = []
        todo = list(self.sshd.children())
        while todo:
            pid = todo.pop()
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("sshd"):
                out.append(pid)
                todo += [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                                        text=True).stdout.split()]
        return out

    def close(self) -> None:
        for pid in self.sshd_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.sshd.stop()


@pytest.fixture
def own_host(ssh_home, tmp_path: Path):
    hosts: list[OwnHost] = []

    def make(extra: str = "") -> OwnHost:
        h = OwnHost(ssh_home, tmp_path / f"own{len(hosts)}", extra)
        hosts.append(h)
        return h

    yield make
    for h in hosts:
        h.close()


def test_host_key_changed_mid_follow_is_named_and_stops(own_host, tmp_path: Path, ledger) -> None:
    host = own_host()
    env = make_env(tmp_path, host.env)
    stop = tmp_path / "stop"
    env.write_profile("rk", writer_profile("rk", "own", tmp_path, stop, delay=0.05))
    up = env.cockpit("up", "rk", "--wait", "started")
    assert up.returncode == 0, up.stdout + up.stderr
    follower = Drained(env.popen("logs", "rk", "-f"))
    try:
        assert wait_for(lambda: len(follower.out) > 0, 30)
        ledger.fault("ssh")
        fingerprint = host.rekey()
        t0 = time.monotonic()
        rc = follower.wait(60)
        took = time.monotonic() - t0
    finally:
        stop.touch()
    err = bytes(follower.err).decode()
    assert rc == 1, err
    assert "CHANGED" in err and fingerprint in err, err
    assert "ssh-keygen -R" in err and "not reconnecting" in err, err
    assert err.count("reconnecting…") <= 1, err  # the drop itself, at most: never a minute of it
    assert took < 20, took
    ledger.note(f"host key changed under `logs -f`: named with its fingerprint after {took:.1f} s")
    ledger.survive("ssh")


async def test_host_key_changed_mid_session_reaches_the_dashboard(own_host, tmp_path: Path, ledger, monkeypatch) -> None:
    """What the TUI shows comes from the supervisor's snapshots: a critical finding (advice pane,
    `status`) and the header's progress line."""
    host = own_host()
    monkeypatch.setenv("HOME", str(host.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    stop = tmp_path / "stop"
    profile = parse_profile({"name": "rktui", "hosts": [{"ssh": "own"}],
                             "program": [PY, str(writer_script(tmp_path)), str(stop), "0.05"],
                             "workdir": str(tmp_path / "work"), "log": "logs/rktui.log"}, "rktui.yaml")
    sup = Supervisor(profile, runs_root=str(tmp_path / "runs"))
    await sup.launch(attach=False)
    runner = asyncio.create_task(sup.run())
    try:
        assert await sup.wait_until(lambda s: s.recent_lines(), 30)
        ledger.fault("ssh")
        fingerprint = await asyncio.to_thread(host.rekey)

        def changed(s: Supervisor) -> bool:
            return any(f.id == "host_key_changed" for f in s.snapshot().findings)

        assert await sup.wait_until(changed, 30)
        snap = sup.snapshot()
        f = next(f for f in snap.findings if f.id == "host_key_changed")
        assert f.severity == "critical" and "CHANGED" in f.message and fingerprint in f.message
        assert "ssh-keygen -R" in f.message
        assert "CHANGED" in snap.progress and "reconnecting" not in snap.progress.replace("not reconnecting", "")
        # the dashboard fed this snapshot shows it in its advice pane
        from cockpit.ui.widgets.advice import AdvicePanel
        from tests.ui.test_dashboard_snapshots import make_app

        app = make_app()
        async with app.run_test(size=(140, 45)) as pilot:
            app.screen.apply_snapshot(snap)
            await pilot.pause()
            shown = str(app.screen.query_one(AdvicePanel).render())
        assert "CHANGED" in shown and fingerprint in shown and "ssh-keygen -R" in shown, shown
        ledger.survive("ssh")
    finally:
        stop.touch()
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner


@pytest.fixture
def silent_port():
    """A TCP port that accepts connections and never says a word (a hung box)."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        lsock.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(lsock.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield lsock.getsockname()[1]
    done.set()
    th.join(2)
    for c in held:
        c.close()
    lsock.close()


@pytest.mark.parametrize("timeout", [2, None])
def test_host_that_never_answers_costs_one_timeout(ssh_home, silent_port: int, tmp_path: Path, timeout, ledger) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host hung\n  HostName 127.0.0.1\n  Port {silent_port}\n  User {ssh_home.user}\n  BatchMode yes\n"
        + (f"  ConnectTimeout {timeout}\n" if timeout else ""))
    env = make_env(tmp_path, {**ssh_home.env, "HOME": str(home)})
    env.write_profile("hung", writer_profile("hung", "hung", tmp_path, tmp_path / "stop"))
    stated = timeout or 10
    commands = (("status", "hung"), ("up", "hung"), ("logs", "hung"), ("down", "hung")) if timeout else (("status", "hung"),)
    for args in commands:
        # the same command's cost without any host (a profile that does not exist: exit 2 after the
        # same imports), measured beside it: on a loaded 2-core machine start-up alone took ~3 s
        t0 = time.monotonic()
        assert env.cockpit(args[0], "no-such-profile", timeout=120).returncode == 2
        start_up = time.monotonic() - t0
        ledger.fault("ssh")
        t0 = time.monotonic()
        done = env.cockpit(*args, timeout=120)
        took = time.monotonic() - t0
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"no answer within {stated} s" in done.stderr, done.stderr
        # one timeout, not one per retry or per step: a second would add `stated` again
        assert took < stated * 1.5 + start_up + 2, \
            f"{' '.join(args)}: {took:.1f} s for a stated {stated} s (start-up alone {start_up:.1f} s)"
        ledger.note(f"host that never answers: `cockpit {' '.join(args)}` gave up after {took:.1f} s "
                    f"(stated {stated} s)")
        ledger.survive("ssh")


def test_frozen_link_is_noticed_within_the_stated_time(own_host, tmp_path: Path, ledger) -> None:
    host = own_host("  ServerAliveInterval 1\n  ServerAliveCountMax 2\n")
    env = make_env(tmp_path, host.env)
    stop = tmp_path / "stop"
    env.write_profile("fz", writer_profile("fz", "own", tmp_path, stop, delay=0.05))
    up = env.cockpit("up", "fz", "--wait", "started")
    assert up.returncode == 0, up.stdout + up.stderr
    follower = Drained(env.popen("logs", "fz", "-f"))
    frozen: list[int] = []
    try:
        assert wait_for(lambda: len(follower.out) > 0, 30)
        ledger.fault("ssh")
        frozen = host.sshd_processes()
        assert frozen
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        assert wait_for(lambda: b"connection lost" in follower.err, 30), bytes(follower.err)
        took = time.monotonic() - t0
        err = bytes(follower.err).decode()
        assert "no answer to keepalives for 3 s" in err, err
        assert took < 3 + 3, took  # stated 1 s x (2 + 1), plus the follower's own turn
        seen = len(follower.out)
        assert wait_for(lambda: len(follower.out) > seen, 30), "did not resume on a new connection"
        ledger.note(f"frozen link noticed after {took:.1f} s (stated 3 s: ServerAliveInterval 1, CountMax 2)")
        ledger.survive("ssh")
    finally:
        stop.touch()
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
        follower.wait(60)


@pytest.fixture
def two_session_host(ssh_home, tmp_path: Path, monkeypatch):
    """An sshd of its own that allows 2 sessions on a connection (MaxSessions 2), HOME pointing at it."""
    host = OwnHost(ssh_home, tmp_path / "own", sshd_extra="MaxSessions 2\n")
    monkeypatch.setenv("HOME", str(host.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    try:
        yield host
    finally:
        host.close()


async def test_a_refused_session_is_asked_again_until_one_frees(two_session_host) -> None:
    # sshd refuses a session while its MaxSessions are in use ("open failed"), and counts one whose
    # command has ended until it has reaped it — what a command opened right after another meets
    # (seen once in 24 runs of the 3-stream, 30-command test alone). Here the two sessions are held
    # by streams; the command's channel is refused until the short one's command ends by itself.
    from cockpit.transport.ssh import SSHTransport

    async with SSHTransport("own") as t:
        short = await t.stream(["sleep", "0.5"])
        long = await t.stream(["sleep", "30"])
        command = asyncio.create_task(t.run(["echo", "through"], timeout=10))
        await asyncio.sleep(0.2)
        assert not command.done()  # refused, and being asked again
        done = await asyncio.wait_for(command, 10)
        assert done.stdout == b"through\n" and done.returncode == 0
        assert t.connects == 1  # the same connection: a refusal is not a dead link
        await short.close()
        await long.close()  # its kill has a session to go through again


async def test_sessions_that_never_free_end_in_an_error_that_names_maxsessions(two_session_host) -> None:
    from cockpit.transport.base import TransportError
    from cockpit.transport.ssh import SSHTransport

    async with SSHTransport("own") as t:
        for _ in range(2):
            await t.stream(["sleep", "30"])  # ended with the connection when the transport closes
        with pytest.raises(TransportError) as err:
            await t.run(["echo", "never"], timeout=10)
        assert "refused a new session 6 times" in str(err.value)
        assert "MaxSessions" in (err.value.hint or "")
        assert t.connects == 1
