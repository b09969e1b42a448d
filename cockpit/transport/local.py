"""This machine as a Transport: asyncio subprocesses, argv lists, never a shell.

Every child starts in its own session (process group) so that `close()` and a timeout can stop
the whole tree a command left behind (a `tail -F` under a wrapper, `nvidia-smi` under the agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence

from cockpit.aio import reap
from cockpit.transport.base import Completed, Stream, Transport, TransportError

# How long a stopped command gets between SIGTERM and SIGKILL.
TERM_GRACE_S = 2.0
# stderr of a stream is kept only as a tail for error messages; the rest is dropped.
STDERR_TAIL_BYTES = 8192
CHUNK_BYTES = 65536


class CommandTimeout(TransportError):
    """A command ran past its timeout and was killed (the host itself is fine)."""


def _check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, str | bytes):
        # A string here would be split into characters (or worse, read as a shell line).
        raise TypeError("argv must be a list of strings, not a string")
    out = [str(a) for a in argv]
    if not out:
        raise ValueError("argv must not be empty")
    for a in out:
        if "\x00" in a:
            raise ValueError("an argv element must not contain a NUL byte")
    return out


def _child_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if not env:
        return None  # inherit as is
    merged = dict(os.environ)
    merged.update({str(k): str(v) for k, v in env.items()})
    return merged


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is not None:
        return
    try:
        # start_new_session=True made the child a group leader: its pid is the pgid.
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


async def _stop(proc: asyncio.subprocess.Process, grace: float = TERM_GRACE_S) -> None:
    if proc.returncode is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            _signal_group(proc, signal.SIGKILL)
            await proc.wait()
    else:
        # The leader is gone; children it left in the group still get the news.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)


async def _feed_stdin(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command exited without reading everything: its exit status tells the story
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()


class LocalStream(Stream):
    def __init__(self, proc: asyncio.subprocess.Process, stdin: bytes | None):
        self._proc = proc
        self._stderr = bytearray()
        self._tasks: list[asyncio.Task[None]] = [asyncio.create_task(self._drain_stderr())]
        if stdin is not None:
            self._tasks.append(asyncio.create_task(_feed_stdin(proc, stdin)))

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def stderr_tail(self) -> str:
        """The last few KB the command wrote to stderr (for an error message when it dies)."""
        return self._stderr.decode("utf-8", "replace")

    async def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        while True:
            data = await self._proc.stderr.read(CHUNK_BYTES)
            if not data:
                return
            self._stderr += data
            if len(self._stderr) > STDERR_TAIL_BYTES:
                del self._stderr[: len(self._stderr) - STDERR_TAIL_BYTES]

    async def chunks(self) -> AsyncIterator[bytes]:
        assert self._proc.stdout is not None
        while True:
            data = await self._proc.stdout.read(CHUNK_BYTES)
            if not data:
                break
            yield data
        await self._proc.wait()

    async def wait(self) -> int:
        """Wait for the command to exit on its own; its exit status."""
        return await self._proc.wait()

    async def close(self) -> None:
        await _stop(self._proc)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            await reap(t)


class LocalTransport(Transport):
    """Commands on this machine. `env` adds to (and overrides) the inherited environment."""

    def __init__(self, label: str = "local"):
        self.label = label

    async def _spawn(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
    ) -> asyncio.subprocess.Process:
        args = _check_argv(argv)
        try:
            return await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_child_env(env),
                cwd=os.path.expanduser(cwd) if cwd else None,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            if cwd and not os.path.isdir(os.path.expanduser(cwd)):
                raise TransportError(f"local: working directory {cwd} does not exist") from exc
            raise TransportError(
                f"local: command not found: {args[0]}", hint="check the path or that it is on PATH"
            ) from exc
        except PermissionError as exc:
            raise TransportError(f"local: permission denied running {args[0]}") from exc
        except OSError as exc:
            raise TransportError(f"local: cannot start {args[0]}: {exc.strerror or exc}") from exc

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 60.0,
    ) -> Completed:
        proc = await self._spawn(argv, stdin=stdin, env=env, cwd=cwd)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            await _stop(proc, grace=0.5)
            raise CommandTimeout(
                f"local: {argv[0]} did not finish within {timeout:g} s and was stopped"
            ) from None
        except BaseException:
            # Cancelled: don't leave the child running behind the caller's back.
            await asyncio.shield(_stop(proc, grace=0.5))
            raise
        assert proc.returncode is not None
        return Completed(proc.returncode, out, err)

    async def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Stream:
        proc = await self._spawn(argv, stdin=stdin, env=env, cwd=cwd)
        return LocalStream(proc, stdin)

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        # Same machine: the port is already reachable. A non-loopback address still works as is,
        # but callers build URLs with 127.0.0.1, so only loopback-ish names are promised here.
        if remote_host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
            raise TransportError(f"local: cannot forward to {remote_host}; use its address directly")
        return remote_port

    async def close(self) -> None:
        return None


def is_local(transport: Transport) -> bool:
    """The transport runs commands on this machine (the host programs run with this Python)."""
    return isinstance(transport, LocalTransport)
