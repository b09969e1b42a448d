"""A remote host over SSH (asyncssh), the way the operator's own `ssh` would reach it.

- ~/.ssh/config is honoured (Host aliases, HostName, User, Port, IdentityFile, ProxyJump, ...).
  Jump hosts are opened here, hop by hop, so each hop gets the same connect timeout and the
  same host-key check, and an error names the hop that failed.
- Host keys are ALWAYS verified against known_hosts (UserKnownHostsFile from the config, else
  ~/.ssh/known_hosts). An unknown or changed key is refused with HostKeyError and a message
  that says how to accept it after checking the fingerprint. Nothing is ever auto-accepted.
- One connection per host carries every channel (commands, log followers, the telemetry agent,
  port forwards). After a drop the next call reconnects; failed attempts back off 1, 2, 4 … s
  (each drawn between half and all of that: jitter), and a call during the back-off gets the last
  failure at once (one command waits one timeout).
- Timeouts: ConnectTimeout from ~/.ssh/config (else 10 s) bounds each hop's TCP connect, key
  exchange and login together. ServerAliveInterval / ServerAliveCountMax (else 5 s and 3) send
  keepalives: a frozen link is declared dead after interval × (count + 1) of silence (20 s).
- The remote command line is built from the argv list with shlex quoting only. Environment
  variables travel as a quoted `export 'K=V'` before `exec` (sshd's AcceptEnv usually refuses
  SSH env requests); the working directory as a quoted `cd --` before `exec`. This assumes a POSIX
  login shell on the host (sh, bash, zsh, dash), which is what GPU hosts run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncssh

from cockpit.aio import reap
from cockpit.core.backoff import exponential
from cockpit.transport.base import Completed, HostKeyError, Stream, Transport, TransportError, Unreachable
from cockpit.transport.local import CommandTimeout

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_INTERVAL_S = 5.0
KEEPALIVE_COUNT_MAX = 3  # a silent link is declared dead after 5 × (3 + 1) = 20 s
BACKOFF_CAP_S = 30.0
TERM_GRACE_S = 2.0
CHUNK_BYTES = 65536
STDERR_TAIL_BYTES = 8192
RUN_STDERR_BYTES = 4 << 20  # run() returns stderr whole, up to this much
MAX_SHORT_COMMANDS = 4  # concurrent run() channels per connection
# A session refused on a live connection is asked again this many times, 0.05 s, 0.1 s, … apart
# (1.55 s in all): sshd counts a closed session against MaxSessions until it has reaped its command,
# so a channel opened right after another closed can find the count still full.
SESSION_RETRIES = 5
SESSION_RETRY_S = 0.05
# how a server says no to a session: OpenSSH answers one over MaxSessions "open failed" with
# SSH2_OPEN_CONNECT_FAILED (serverloop.c); others say prohibited or short of resources
_REFUSED_SESSION = (asyncssh.OPEN_CONNECT_FAILED, asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                    asyncssh.OPEN_RESOURCE_SHORTAGE)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # fullmatch, \Z: `$` takes "X\n"
_DEST = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:@\s]+)(?::(?P<port>\d{1,5}))?\Z")
# The wrapper prints the remote shell's pid (which `exec` hands to the command) on stderr first,
# so that close() and timeouts can stop the command itself, not only its channel.
_PID_MARK = b"cockpit-pid:"
_CWD_MARK = b"cockpit-cwd-missing"
_CWD_EXIT = 126


@dataclass(frozen=True)
class Destination:
    """What the profile says: an alias, user@host, host:port or user@host:port."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, dest: str) -> Destination:
        m = _DEST.fullmatch(dest.strip())
        if not m or dest.startswith("-"):
            raise TransportError(f"{dest!r} is not an ssh destination (alias, user@host or user@host:port)")
        host = m.group("host")
        if host.startswith("["):
            host = host[1:-1]
        port = int(m.group("port")) if m.group("port") else None
        return cls(host=host, user=m.group("user"), port=port)


def remote_command_line(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    *,
    mark_pid: bool = True,
) -> str:
    """The line the remote login shell runs. Every piece from the caller is shlex-quoted."""
    args = [str(a) for a in argv]
    if isinstance(argv, str | bytes) or not args:
        raise TypeError("argv must be a non-empty list of strings")
    for a in args:
        if "\x00" in a:
            raise ValueError("an argv element must not contain a NUL byte")
    parts: list[str] = []
    if mark_pid:
        parts.append("echo cockpit-pid:$$ >&2;")
    if cwd:
        if cwd == "~" or cwd.startswith("~/"):
            # `~` does not expand inside quotes; "$HOME" does, and nothing else in it can.
            rest = cwd[2:]
            target = '"$HOME"' + ("/" + shlex.quote(rest) if rest else "")
        else:
            target = shlex.quote(cwd)
        parts.append(f"cd -- {target} 2>/dev/null || {{ echo {_CWD_MARK.decode()} >&2; exit {_CWD_EXIT}; }};")
    if env:
        # `export 'K=V'`, not `exec env K=V cmd`: env(1) would read a command named like `X=1`
        # as one more assignment and run the next argv element in its place.
        assigns = []
        for k, v in env.items():
            if not _ENV_NAME.fullmatch(str(k)):
                raise ValueError(f"environment variable name {k!r} is not valid")
            if "\x00" in str(v):
                raise ValueError(f"environment variable {k} must not contain a NUL byte")
            assigns.append(shlex.quote(f"{k}={v}"))
        parts.append("export " + " ".join(assigns) + ";")
    parts.append(shlex.join(["exec", *args]))
    return " ".join(parts)


def _ssh_config_paths() -> list[str]:
    # Looked up at connect time: HOME may differ between processes (and tests point it elsewhere).
    path = os.path.expanduser("~/.ssh/config")
    return [path] if os.access(path, os.R_OK) else []


def _known_hosts_files(opts: asyncssh.SSHClientConnectionOptions) -> list[str]:
    """Where the host keys for this hop are trusted from. Never empty, never 'don't check'."""
    kh = opts.known_hosts
    files: list[str] = []
    if isinstance(kh, list | tuple):
        files = [os.path.expanduser(str(p)) for p in kh if isinstance(p, str | os.PathLike)]
    elif isinstance(kh, str):
        files = [os.path.expanduser(kh)]
    # `UserKnownHostsFile none` (kh is None) would switch verification off in asyncssh: we ignore
    # that and fall back to the standard file, like a careful operator would.
    files = [f for f in files if f.lower() != "none"]
    if not files:
        files = [os.path.expanduser("~/.ssh/known_hosts")]
    return files


def _readable(files: list[str]) -> list[str]:
    return [f for f in files if os.path.isfile(f) and os.access(f, os.R_OK)]


def _positive(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def _hostport(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _tilde(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "~" and path.startswith(home + "/") else path


class _Hop:
    """One resolved hop (the target or a jump host) with its options from ~/.ssh/config."""

    def __init__(self, dest: Destination, label: str):
        self.dest = dest
        self.label = label
        try:
            self.options = asyncssh.SSHClientConnectionOptions(
                config=_ssh_config_paths(),
                host=dest.host,
                port=dest.port if dest.port is not None else (),
                username=dest.user if dest.user is not None else (),
            )
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise TransportError(
                f"{label}: cannot read ssh settings for {dest.host}: {exc}",
                hint="check ~/.ssh/config",
            ) from exc
        host = getattr(self.options, "host", None) or dest.host
        self.hostname: str = str(host)
        self.port: int = int(getattr(self.options, "port", None) or 22)
        tunnel = getattr(self.options, "tunnel", None)
        self.proxy_jump: str | None = tunnel if isinstance(tunnel, str) and tunnel.lower() != "none" else None
        self.known_hosts = _known_hosts_files(self.options)
        # what ~/.ssh/config says (ConnectTimeout, ServerAliveInterval, ServerAliveCountMax), if anything
        self.connect_timeout = _positive(getattr(self.options, "connect_timeout", None))
        self.keepalive_interval = _positive(getattr(self.options, "keepalive_interval", None))
        count = getattr(self.options, "keepalive_count_max", None)
        self.keepalive_count_max = int(count) if isinstance(count, int) and count > 0 else None

    @property
    def where(self) -> str:
        return (
            f"{self.dest.host} ({self.hostname}:{self.port})"
            if self.dest.host != self.hostname
            else (f"{self.hostname}:{self.port}")
        )


class SSHStream(Stream):
    """A remote command on its own channel; stdout as chunks, stderr kept as a tail."""

    def __init__(
        self,
        transport: SSHTransport,
        process: Any,
        stdin: bytes | None,
        stderr_cap: int = STDERR_TAIL_BYTES,
    ):
        self._t = transport
        self._stderr_cap = stderr_cap
        self._p = process
        self._pid: int | None = None
        self._pid_seen = asyncio.Event()
        self._stderr = bytearray()
        self._cwd_missing = False
        self._closed = False
        self.end_reason: str | None = None  # why the channel broke, in the operator's words
        self._tasks: list[asyncio.Task[None]] = [asyncio.create_task(self._drain_stderr())]
        self._tasks.append(asyncio.create_task(self._feed(stdin)))

    @property
    def returncode(self) -> int | None:
        rc = self._p.returncode
        return int(rc) if rc is not None else None

    @property
    def pid(self) -> int | None:
        """The command's pid on the remote host (known once it has started)."""
        return self._pid

    @property
    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    @property
    def stderr_bytes(self) -> bytes:
        return bytes(self._stderr)

    @property
    def cwd_missing(self) -> bool:
        return self._cwd_missing

    async def _feed(self, data: bytes | None) -> None:
        try:
            if data:
                self._p.stdin.write(data)
                await self._p.stdin.drain()
            self._p.stdin.write_eof()
        except (OSError, asyncssh.Error, BrokenPipeError):
            pass  # the command exited early; its status tells the story

    async def _drain_stderr(self) -> None:
        # Our wrapper's marker lines come first, but a login shell's startup files may print
        # before them: scan lines until the pid mark (and the line right after it, where a
        # missing working directory is reported), keeping everything else as the command's stderr.
        pending = b""
        lines_after_pid = -1  # -1: pid not seen yet
        scanned = 0
        try:
            while True:
                data = await self._p.stderr.read(CHUNK_BYTES)
                if not data:
                    break
                if lines_after_pid < 1 and scanned < 256:
                    pending += data
                    data = b""
                    while lines_after_pid < 1 and scanned < 256 and b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        scanned += 1
                        if lines_after_pid < 0 and line.startswith(_PID_MARK):
                            with contextlib.suppress(ValueError):
                                self._pid = int(line[len(_PID_MARK) :])
                            self._pid_seen.set()
                            lines_after_pid = 0
                            continue
                        if lines_after_pid == 0:
                            lines_after_pid = 1
                            if line == _CWD_MARK:
                                self._cwd_missing = True
                                continue
                        self._keep(line + b"\n")
                    if lines_after_pid < 1 and scanned < 256:
                        continue
                    data, pending = pending, b""
                self._keep(data)
        except (OSError, asyncssh.Error):
            pass
        finally:
            if pending:
                self._keep(pending)
            self._pid_seen.set()

    def _keep(self, data: bytes) -> None:
        self._stderr += data
        if len(self._stderr) > self._stderr_cap:
            del self._stderr[: len(self._stderr) - self._stderr_cap]

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                data = await self._p.stdout.read(CHUNK_BYTES)
                if not data:
                    break
                yield data
        except (OSError, asyncssh.Error) as exc:
            self.end_reason = self._t._note_broken(exc)
            return
        with contextlib.suppress(Exception):
            await self._p.wait_closed()

    async def wait(self) -> int | None:
        with contextlib.suppress(OSError, asyncssh.Error):
            await self._p.wait_closed()
        for t in self._tasks:
            await reap(t)
        return self.returncode

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._p.returncode is None:
            await self._stop()
        with contextlib.suppress(Exception):
            self._p.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            await reap(t)

    async def _stop(self) -> None:
        # 1. The SSH "signal" request (honoured by recent OpenSSH servers).
        with contextlib.suppress(Exception):
            self._p.send_signal("TERM")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._pid_seen.wait(), 1.0)
        # 2. Kill by pid (its process group first: sshd made it a session leader) over a second
        #    channel, because many servers ignore signal requests.
        if self._pid is not None:
            await self._t._kill_remote(self._pid, "TERM")
        try:
            await asyncio.wait_for(self._p.wait_closed(), TERM_GRACE_S)
            return
        except (TimeoutError, OSError, asyncssh.Error):
            pass
        if self._pid is not None:
            await self._t._kill_remote(self._pid, "KILL")


class SSHTransport(Transport):
    """One host reached over SSH, with one pooled connection for all channels."""

    def __init__(
        self,
        dest: str,
        *,
        connect_timeout: float | None = None,
        keepalive_interval: float | None = None,
        backoff_cap: float = BACKOFF_CAP_S,
    ):
        self.label = dest
        self.dest = Destination.parse(dest)
        # None: ~/.ssh/config's value for each hop, else the defaults above
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self._last_error: TransportError | None = None
        self._keepalive_used = (keepalive_interval or KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT_MAX)
        self.backoff_cap = backoff_cap
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jumps: list[asyncssh.SSHClientConnection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._run_slots: asyncio.Semaphore | None = None
        self._failures = 0
        self._retry_at = 0.0
        self.backoff_s = 0.0  # the back-off chosen after the last failed connect (jittered)
        self._forwards: dict[tuple[str, int], tuple[int, Any]] = {}
        self._closed = False
        self.connects = 0  # how many times a connection was (re)established; tests and the UI read it

    async def __aenter__(self) -> SSHTransport:
        return self

    # ------------------------------------------------------------ connection

    def _same_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A connection belongs to the loop that made it; another loop starts afresh.
            self._loop = loop
            self._lock = asyncio.Lock()
            self._run_slots = asyncio.Semaphore(MAX_SHORT_COMMANDS)
            self._conn = None
            self._jumps = []
            self._forwards = {}

    def _alive(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def _note_broken(self, exc: BaseException | None = None) -> str | None:
        """Drop a dead connection; returns why it broke, in the operator's words."""
        why = None
        if exc is not None:
            text = str(getattr(exc, "reason", "") or exc)
            if "keepalive" in text.lower():
                interval, count = self._keepalive_used
                why = f"no answer to keepalives for {interval * (count + 1):g} s: the link froze"
            else:
                why = text or type(exc).__name__
        if self._conn is None:
            return why
        if self._conn.is_closed() or isinstance(exc, asyncssh.ConnectionLost | ConnectionError):
            self._drop()
        return why

    def _timeout(self, hop: _Hop) -> float:
        return self.connect_timeout or hop.connect_timeout or CONNECT_TIMEOUT_S

    def _keepalive(self, hop: _Hop) -> tuple[float, int]:
        return (self.keepalive_interval or hop.keepalive_interval or KEEPALIVE_INTERVAL_S,
                hop.keepalive_count_max or KEEPALIVE_COUNT_MAX)

    def _drop(self) -> None:
        conn, jumps = self._conn, self._jumps
        self._conn, self._jumps = None, []
        for c in [conn, *jumps]:
            if c is not None:
                with contextlib.suppress(Exception):
                    c.abort()
        # Forwards died with the connection; they are re-created (same local ports if free).

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, (re)connecting first if needed."""
        if self._closed:
            raise TransportError(f"{self.label}: transport is closed")
        self._same_loop()
        if self._alive():
            assert self._conn is not None
            return self._conn
        assert self._lock is not None
        async with self._lock:
            if self._alive():
                assert self._conn is not None
                return self._conn
            self._drop()
            wait = self._retry_at - time.monotonic()
            err = self._last_error
            if self._failures and wait > 0 and isinstance(err, Unreachable) and err.timed_out:
                # within the back-off after a connect that got no answer: the same answer now,
                # not another full timeout (a command asking five things of a dead host waits once)
                raise Unreachable(str(err), hint=err.hint, timed_out=True)
            if self._failures and wait > 0:
                await asyncio.sleep(wait)  # a quick failure (refused): try again after the back-off
            try:
                conn, jumps = await self._connect_chain(self.dest, self.label, depth=0)
            except TransportError as exc:
                self._failures += 1
                # jittered: transports that lost one jump host together do not retry in lockstep
                self.backoff_s = exponential(self._failures, 1.0, self.backoff_cap)
                self._retry_at = time.monotonic() + self.backoff_s
                self._last_error = exc
                raise
            self._last_error = None
            self._failures = 0
            self._conn, self._jumps = conn, jumps
            self.connects += 1
            await self._restore_forwards()
            return conn

    async def _connect_chain(
        self, dest: Destination, label: str, depth: int
    ) -> tuple[asyncssh.SSHClientConnection, list[asyncssh.SSHClientConnection]]:
        if depth > 8:
            raise TransportError(f"{label}: ProxyJump chain is too long (a loop in ~/.ssh/config?)")
        hop = _Hop(dest, label)
        tunnel: asyncssh.SSHClientConnection | None = None
        jumps: list[asyncssh.SSHClientConnection] = []
        if hop.proxy_jump:
            # "a,b,c": connect to a, through it to b, through b to c, then to the target.
            for i, spec in enumerate(hop.proxy_jump.split(",")):
                jdest = Destination.parse(spec.strip())
                jlabel = f"{label}: jump host {jdest.host}"
                if i == 0:
                    conn, inner = await self._connect_chain(jdest, jlabel, depth + 1)
                    jumps.extend(inner)
                else:
                    conn = await self._open_hop(_Hop(jdest, jlabel), tunnel)
                jumps.append(conn)
                tunnel = conn
        try:
            conn = await self._open_hop(hop, tunnel)
        except BaseException:
            for j in jumps:
                with contextlib.suppress(Exception):
                    j.abort()
            raise
        return conn, jumps

    async def _open_hop(
        self, hop: _Hop, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        known = _readable(hop.known_hosts)
        timeout = self._timeout(hop)
        interval, count = self._keepalive(hop)
        self._keepalive_used = (interval, count)  # the target hop opens last: its values are the ones stated
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    hop.dest.host,
                    hop.dest.port if hop.dest.port is not None else (),
                    options=hop.options,
                    tunnel=tunnel if tunnel is not None else None,
                    known_hosts=known if known else b"",
                    connect_timeout=timeout,
                    login_timeout=timeout,
                    keepalive_interval=interval,
                    keepalive_count_max=count,
                ),
                # one deadline for TCP connect, key exchange and login (and a jump hop's channel
                # open), the one the message states
                timeout,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_error(hop, tunnel) from None
        except asyncssh.PermissionDenied as exc:
            raise TransportError(
                f"{hop.label}: authentication refused by {hop.where}: {exc.reason}",
                hint="check that ssh-agent holds your key (ssh-add -l) or IdentityFile in ~/.ssh/config; "
                f"`ssh {hop.dest.host}` must work without a password prompt",
            ) from None
        except (TimeoutError, asyncssh.misc.ConnectionLost) as exc:
            if isinstance(exc, TimeoutError):
                why = f"no answer within {timeout:g} s"
            else:
                why = f"connection lost during login ({exc})"
            raise Unreachable(
                f"{hop.label}: cannot reach {hop.where}: {why}",
                hint="is the host up and the address/port in ~/.ssh/config right?",
                timed_out=isinstance(exc, TimeoutError),
            ) from None
        except asyncssh.ChannelOpenError as exc:
            raise TransportError(
                f"{hop.label}: the jump host could not open a connection to {hop.where}: {exc.reason}",
                hint="check HostName/Port of the target as seen from the jump host",
            ) from None
        except asyncssh.Error as exc:
            raise TransportError(f"{hop.label}: ssh to {hop.where} failed: {exc.reason}") from None
        except OSError as exc:
            raise Unreachable(
                f"{hop.label}: cannot reach {hop.where}: {exc.strerror or exc}",
                hint="is the host up and the address/port in ~/.ssh/config right?",
            ) from None
        except ValueError as exc:
            raise TransportError(
                f"{hop.label}: bad ssh settings: {exc}", hint="check ~/.ssh/config"
            ) from None

    async def _host_key_error(self, hop: _Hop, tunnel: asyncssh.SSHClientConnection | None) -> HostKeyError:
        """Say whether the key is unknown or changed, show the offered fingerprint, and how to accept."""
        known = _readable(hop.known_hosts)
        key_name = _hostport(hop.hostname, hop.port)
        pinned = False
        if known:
            with contextlib.suppress(Exception):
                trusted = asyncssh.match_known_hosts(
                    known, hop.hostname, "", hop.port if hop.port != 22 else None
                )
                pinned = bool(trusted[0] or trusted[1])
        offered = ""
        with contextlib.suppress(Exception):
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(
                    hop.hostname, hop.port, tunnel=tunnel if tunnel is not None else (), config=None
                ),
                self._timeout(hop),
            )
            if key is not None:
                offered = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
        kh_name = _tilde(hop.known_hosts[0])
        default_kh = os.path.expanduser("~/.ssh/known_hosts")
        kh_opt = "" if hop.known_hosts[0] == default_kh else f" -f {shlex.quote(kh_name)}"
        keyscan = (
            f"ssh-keyscan -p {hop.port} {hop.hostname}" if hop.port != 22 else f"ssh-keyscan {hop.hostname}"
        )
        if pinned:
            msg = (
                f"{hop.label}: the host key of {hop.where} has CHANGED"
                + (f" (now {offered})" if offered else "")
                + f"; refusing to connect. {kh_name} holds a different key for {key_name}: "
                "the host was reinstalled or someone is intercepting the connection"
            )
            hint = (
                "if the new key is expected (check the fingerprint with the host's admin), remove the old one "
                f"with `ssh-keygen -R '{key_name}'{kh_opt}` and accept the new one by connecting once with "
                f"`ssh {hop.dest.host}` (or `{keyscan} >> {kh_name}`)"
            )
        else:
            msg = (
                f"{hop.label}: the host key of {hop.where} is unknown"
                + (f" ({offered})" if offered else "")
                + f"; refusing to connect: it is not in {kh_name}"
            )
            hint = (
                "after checking the fingerprint, accept it by connecting once with "
                f"`ssh {hop.dest.host}`, or run `{keyscan} >> {kh_name}`"
            )
        return HostKeyError(msg, hint=hint)

    # ------------------------------------------------------------ channels

    async def _open_process(self, line: str) -> Any:
        """Open a session channel, reconnecting once if the pooled connection turned out dead, and
        asking again a few times when the server refuses a session on a live one (SESSION_RETRIES)."""
        reconnected = False
        refused = 0
        while True:
            conn = await self.connection()
            try:
                return await conn.create_process(line, encoding=None)
            except (asyncssh.ChannelOpenError, asyncssh.DisconnectError, OSError) as exc:
                if conn.is_closed() or isinstance(exc, asyncssh.DisconnectError | OSError):
                    self._drop()
                    if not reconnected:
                        reconnected = True
                        continue
                    raise TransportError(f"{self.label}: connection lost: {exc}") from None
                reason = getattr(exc, "reason", str(exc))
                if getattr(exc, "code", None) not in _REFUSED_SESSION:
                    raise TransportError(f"{self.label}: cannot start a command: {reason}") from None
                if refused == SESSION_RETRIES:
                    raise TransportError(
                        f"{self.label}: cannot start a command: {reason} (the server refused a new session "
                        f"{refused + 1} times over {SESSION_RETRY_S * (2 ** refused - 1):.2f} s)",
                        hint="sshd limits the sessions of one connection (MaxSessions in sshd_config, 10 by "
                        "default); Cockpit keeps at most a few streams and 4 commands open on each",
                    ) from None
                await asyncio.sleep(SESSION_RETRY_S * 2**refused)
                refused += 1

    async def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> SSHStream:
        line = remote_command_line(argv, env, cwd)
        process = await self._open_process(line)
        return SSHStream(self, process, stdin)

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 60.0,
    ) -> Completed:
        self._same_loop()
        assert self._run_slots is not None
        # sshd allows 10 sessions per connection by default (MaxSessions); long-lived streams
        # (log followers, the agent) hold a few, so short commands queue for the rest.
        async with self._run_slots:
            return await self._run(argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout)

    async def _run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        timeout: float | None,
    ) -> Completed:
        line = remote_command_line(argv, env, cwd)
        s = SSHStream(self, await self._open_process(line), stdin, stderr_cap=RUN_STDERR_BYTES)
        out = bytearray()

        async def collect() -> None:
            async for chunk in s.chunks():
                out.extend(chunk)
            await s.wait()

        try:
            await asyncio.wait_for(collect(), timeout)
        except TimeoutError:
            await s.close()
            raise CommandTimeout(
                f"{self.label}: {argv[0]} did not finish within {timeout:g} s and was stopped"
            ) from None
        except BaseException:
            await asyncio.shield(s.close())
            raise
        rc = s.returncode
        if rc is None:
            # The channel closed without an exit status: the connection broke under it.
            self._note_broken()
            raise TransportError(f"{self.label}: connection lost while running {argv[0]}")
        if s.cwd_missing and rc == _CWD_EXIT:
            raise TransportError(f"{self.label}: working directory {cwd} does not exist")
        err = s.stderr_bytes
        if rc == 127 and (b"not found" in err or b"No such file or directory" in err) and len(out) == 0:
            raise TransportError(
                f"{self.label}: command not found: {argv[0]}",
                hint="check the path (remote commands do not see your interactive shell's PATH)",
            )
        return Completed(rc, bytes(out), err)

    async def _kill_remote(self, pid: int, sig: str) -> None:
        # Integers only reach this line; still built as an argv and quoted like everything else.
        line = remote_command_line(
            [
                "sh",
                "-c",
                'kill -s "$1" -- "-$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null; true',
                "kill",
                sig,
                str(int(pid)),
            ],
            mark_pid=False,
        )
        with contextlib.suppress(Exception):
            conn = await self.connection()
            await asyncio.wait_for(conn.run(line, check=False), 5.0)

    # ------------------------------------------------------------ ports

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        """A local port tunnelled to remote_host:remote_port. Call it again before each use after a
        possible drop: it returns the same port once the tunnel is back."""
        key = (remote_host, int(remote_port))
        await self.connection()  # restores existing forwards after a reconnect
        if key in self._forwards:
            return self._forwards[key][0]
        listener = await self._listen(key, 0)
        port = int(listener.get_port())
        self._forwards[key] = (port, listener)
        return port

    async def _listen(self, key: tuple[str, int], local_port: int) -> Any:
        assert self._conn is not None
        try:
            return await self._conn.forward_local_port("127.0.0.1", local_port, key[0], key[1])
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(
                f"{self.label}: cannot forward a local port to {key[0]}:{key[1]}: {exc}"
            ) from None

    async def _restore_forwards(self) -> None:
        for key, (port, old) in list(self._forwards.items()):
            with contextlib.suppress(Exception):
                old.close()
            try:
                listener = await self._listen(key, port)
            except TransportError:
                listener = await self._listen(key, 0)  # the old port was taken meanwhile
            self._forwards[key] = (int(listener.get_port()), listener)

    async def close(self) -> None:
        self._closed = True
        for _port, listener in self._forwards.values():
            with contextlib.suppress(Exception):
                listener.close()
        self._forwards = {}
        conns = [c for c in [self._conn, *reversed(self._jumps)] if c is not None]
        self._conn, self._jumps = None, []
        for c in conns:
            with contextlib.suppress(Exception):
                c.close()
                await asyncio.wait_for(c.wait_closed(), 5.0)
