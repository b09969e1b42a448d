"""One interface for running things on a host, local or over SSH.

Nothing above this layer knows which one it has. Every command is an argv list; the SSH
implementation quotes each element with shlex.quote when it must build the remote command line,
the local one never involves a shell at all.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass


class TransportError(Exception):
    """The host could not be reached or the channel broke. `hint` says what the operator can do."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class HostKeyError(TransportError):
    """The host key is unknown or changed: refused, never auto-accepted."""


class Unreachable(TransportError):
    """No connection could be made within the connect timeout (no answer, refused, no route).
    Repeating at once won't help: callers report it instead of retrying, so one command takes
    one timeout, not several. `timed_out`: the host never answered (the costly case)."""

    def __init__(self, message: str, hint: str | None = None, *, timed_out: bool = False):
        super().__init__(message, hint)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


class Stream(abc.ABC):
    """A running command whose stdout is read incrementally (log follower, telemetry agent)."""

    @abc.abstractmethod
    def chunks(self) -> AsyncIterator[bytes]:
        """stdout as it arrives; ends when the command exits or the channel breaks."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the command (and its channel)."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None: ...


class Transport(abc.ABC):
    """A host. `label` is what the operator calls it ("local", "gpu-box-1")."""

    label: str

    @abc.abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 60.0,
    ) -> Completed:
        """Run to completion and collect output."""

    @abc.abstractmethod
    async def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Stream:
        """Start a command and read its stdout as a stream (stdin is written once, then closed)."""

    @abc.abstractmethod
    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        """A local TCP port that reaches remote_host:remote_port as seen from the host."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
