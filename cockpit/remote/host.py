"""The cockpit-side half of the host program: run hostside.py's operations over any Transport.

`HostOps` sends hostside.py's text, then the request, on stdin to `python3 -` on the host (this very
interpreter when the host is local), so launch, attach, stop and log follow work the same over
LocalTransport and SSHTransport. `LogFollower` turns the follow program's frames into data
chunks with their byte offsets, and reconnects after a dropped connection exactly after the last
complete line it delivered: no line is lost or repeated.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.core.backoff import jittered
from cockpit.remote import programs
from cockpit.remote.calls import ProgramClient
from cockpit.remote.hostresults import StackRequest
from cockpit.transport.base import HostKeyError, Stream, TransportError

if TYPE_CHECKING:
    from cockpit.core.profile import Host, Profile

# One program for the host's python: the base (run files, log checks, /proc), then the operations.
HOSTSIDE_SOURCE: bytes = programs.assemble(programs.HOST_PROGRAM)


def program_python(profile: Profile, host: Host) -> str | None:
    """The python the host program runs on: the profile's own when it names one by path (it is
    there: the server needs it), else the host's python3; None here (this very interpreter)."""
    if host.is_local:
        return None
    return profile.python if profile.python.startswith("/") else "python3"


class HostOpError(TransportError):
    """The host program ran but reported a failure (its message is for the operator)."""


class HostOps(ProgramClient):
    """hostside.py's operations on one host."""

    source = HOSTSIDE_SOURCE
    once_only = frozenset({"launch"})
    error = HostOpError
    program_words = answer_words = "the host program"

    async def call(self, req: dict[str, Any], timeout: float | None = 60.0) -> dict[str, Any]:
        """Run one operation; all but launch are retried when the connection drops under them."""
        return await self._call(req, timeout)

    def _checked(self, req: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        if "error" in answer and req["op"] != "launch":
            raise HostOpError(f"{self.label}: {req['op']}: {answer['error']}")
        return answer

    async def launch(
        self,
        profile: str,
        run_id: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        log: str,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """{"launched": True, "run": {...}} or {"refused": "live", "run": {...}} or {"error": ...}."""
        req = {
            "op": "launch",
            "profile": profile,
            "run_id": run_id,
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "log": log,
            "meta": meta or {},
        }
        return await self.call(req, timeout=90)

    async def find(self, profile: str, run_id: str | None = None) -> dict[str, Any] | None:
        res = await self.call({"op": "find", "profile": profile, "run_id": run_id})
        run: dict[str, Any] | None = res.get("run")
        return run

    async def stop(self, profile: str, run_id: str | None, timeout: float, by: str = "cockpit") -> dict[str, Any]:
        """`by`: who asked (`operator`: `down`, the TUI's stop; `cockpit`: a restart), kept as the
        run's `stopped_by`."""
        req = {"op": "stop", "profile": profile, "run_id": run_id, "timeout": timeout, "by": by}
        return await self.call(req, timeout=timeout + 60)

    async def kill(self, pids: list[int], sig: int = 9) -> dict[str, Any]:
        return await self.call({"op": "kill", "pids": [int(p) for p in pids], "signal": sig})

    async def tree(self, where: dict[str, Any], stacks: StackRequest | None = None) -> dict[str, Any]:
        """The run's processes on this host (hoststacks.py `tree`). `where`: {"profile", "run_id"} of
        a run launched here, or {"slurm_job", "step_name"} of a Slurm job's step on this node;
        `stacks`: each process's py-spy dump too."""
        req: dict[str, Any] = {"op": "tree", **where}
        if stacks is not None:
            req["stacks"] = {"native": stacks.native, "timeout": stacks.timeout}
        return await self.call(req, timeout=60.0 if stacks is None else max(60.0, stacks.timeout * 16))

    async def alive(self, pids: list[int]) -> list[int]:
        res = await self.call({"op": "alive", "pids": [int(p) for p in pids]}, timeout=20)
        return [int(p) for p in res.get("alive", [])]

    async def free_port(self) -> tuple[str, int]:
        res = await self.call({"op": "free_port"})
        return str(res["addr"]), int(res["port"])

    async def launch_check(self, paths: list[str], cwd: str, host: str | None, port: int | None, *,
                           ports: Sequence[tuple[str | None, int]] = (), dist: str | None = None,
                           pythons: Sequence[str] = ()) -> dict[str, Any]:
        """{"missing": [paths not on the host], "port_bound"/"port_unusable": why or None, "ports_bound": [why…],
        "engine_version"/"engine_python" when `dist` is asked} (hostside op_launch_check)."""
        req: dict[str, Any] = {"op": "launch_check", "paths": paths, "cwd": cwd, "host": host, "port": port}
        if ports:
            req["ports"] = [list(p) for p in ports]
        if dist:
            req.update(dist=dist, pythons=list(pythons))
        return await self.call(req)

    async def scan(self, path: str, offset: int, ino: int | None, *, head_bytes: int, tail_lines: int) -> dict[str, Any]:
        req = {"op": "scan", "path": path, "offset": offset, "ino": ino, "head_bytes": head_bytes,
               "tail_lines": tail_lines}
        return await self.call(req, timeout=600)

    async def read(self, path: str, start: int, end: int | None) -> bytes:
        res = await self.call({"op": "read", "path": path, "start": start, "end": end})
        return base64.b64decode(res.get("data", ""))

    async def follow_stream(self, req: dict[str, Any]) -> Stream:
        argv, stdin = self._program({"op": "follow", **req})
        return await self.transport.stream(argv, stdin=stdin)


@dataclass(frozen=True)
class LogChunk:
    """Complete lines of the log, starting at byte `offset` of the file with inode `ino`."""

    offset: int
    data: bytes
    ino: int | None


@dataclass(frozen=True)
class LogReset:
    """The file was truncated or rotated: what follows is a new file from byte 0."""

    why: str


@dataclass(frozen=True)
class ServerExited:
    pid: int
    code: int | None
    stopped_by: str | None = None  # set when a stop (from any cockpit) ended it: not a crash
    oom_evidence: str | None = None  # what the host saw that proves an OOM kill (its waiter's words)


@dataclass(frozen=True)
class LinkState:
    """The follow connection dropped (up=False, with the reason) or came back (up=True).

    `fatal`: it will not come back by itself (the host key CHANGED): following stopped, and
    `hint` says how the operator accepts the new key after checking its fingerprint."""

    up: bool
    reason: str = ""
    fatal: bool = False
    hint: str | None = None


FollowItem = LogChunk | LogReset | ServerExited | LinkState


class FrameDecoder:
    """Incremental decoder of the follow program's `F <json>\\n<payload>` frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[dict[str, Any], bytes]]:
        self._buf += data
        out: list[tuple[dict[str, Any], bytes]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            line = bytes(self._buf[:nl])
            if not line.startswith(b"F "):
                # the program's final JSON answer (an error) or noise: skip the line
                del self._buf[: nl + 1]
                with contextlib.suppress(ValueError):
                    obj = json.loads(line)
                    if isinstance(obj, dict) and "error" in obj:
                        out.append(({"t": "error", "msg": obj["error"]}, b""))
                continue
            head = json.loads(line[2:])
            length = int(head.get("len", 0)) if head.get("t") == "data" else 0
            if len(self._buf) < nl + 1 + length:
                return out  # the payload has not fully arrived
            payload = bytes(self._buf[nl + 1 : nl + 1 + length])
            del self._buf[: nl + 1 + length]
            out.append((head, payload))


class LogFollower:
    """Follow one host's log from a byte offset, across dropped connections.

    The cursor (`offset`, `ino`) always sits right after the last complete line delivered, so a
    reconnect resumes there. `watch` = {"pid", "run_dir"} makes the host report the server's exit.
    """

    def __init__(
        self,
        ops: HostOps,
        path: str,
        *,
        offset: int = 0,
        ino: int | None = None,
        tail: int | None = None,
        follow: bool = True,
        watch: dict[str, Any] | None = None,
        retry_max_s: float = 5.0,
        poll_s: float = 0.1,
        max_chunk: int = 4 << 20,
        end: int | None = None,
    ):
        self.ops = ops
        self.path = path
        self.offset = offset
        self.ino = ino
        self.tail = tail
        self.follow = follow
        self.watch = watch
        self.retry_max_s = retry_max_s
        self.poll_s = poll_s
        self.max_chunk = max_chunk  # big reads while catching up on a long log; live chunks are small
        self.end = end  # with follow=False: stop at this byte
        self.exited: ServerExited | None = None
        self._stream: Stream | None = None
        self._closed = False
        self.reconnects = 0

    async def close(self) -> None:
        self._closed = True
        s, self._stream = self._stream, None
        if s is not None:
            with contextlib.suppress(Exception):
                await s.close()

    async def items(self) -> AsyncIterator[FollowItem]:
        delay = 0.2
        first = True
        link_down = False
        while not self._closed:
            req: dict[str, Any] = {
                "path": self.path,
                "offset": self.offset,
                "ino": self.ino,
                "follow": self.follow,
                "poll": self.poll_s,
                "max_chunk": self.max_chunk,
            }
            if self.end is not None:
                req["end"] = self.end
            if first and self.tail is not None:
                req["tail"] = self.tail
            if self.watch and self.exited is None:
                req["watch"] = self.watch
            try:
                self._stream = await self.ops.follow_stream(req)
            except HostKeyError as exc:
                if not self.follow:
                    raise
                # never "reconnecting" to a host that now shows another key: say what it is, stop
                yield LinkState(False, str(exc), fatal=True, hint=exc.hint)
                return
            except TransportError as exc:
                if not self.follow:
                    raise
                if not link_down:
                    link_down = True
                    yield LinkState(False, str(exc))
                await asyncio.sleep(delay)
                delay = min(self.retry_max_s, delay * 2)
                continue
            decoder = FrameDecoder()
            error: str | None = None
            try:
                async for data in self._stream.chunks():
                    for head, payload in decoder.feed(data):
                        kind = head.get("t")
                        if kind == "start":
                            first = False
                            self.offset = int(head.get("off", self.offset))
                            self.ino = head.get("ino", self.ino)
                            if link_down:
                                link_down = False
                                delay = 0.2
                                yield LinkState(True)
                        elif kind == "data":
                            self.ino = head.get("ino", self.ino)
                            off = int(head["off"])
                            self.offset = off + len(payload)
                            yield LogChunk(off, payload, self.ino)
                        elif kind == "reset":
                            self.offset = 0
                            self.ino = head.get("ino")
                            yield LogReset(str(head.get("why", "")))
                        elif kind == "exit":
                            if self.exited is None:
                                code = head.get("code")
                                oom = head.get("oom_evidence")
                                self.exited = ServerExited(int(head.get("pid") or 0), None if code is None else int(code),
                                                           head.get("stopped_by"), oom if isinstance(oom, str) else None)
                                yield self.exited
                        elif kind == "error":
                            error = str(head.get("msg"))
            except TransportError as exc:
                error = str(exc)
            finally:
                s, self._stream = self._stream, None
                if s is not None:
                    error = error or getattr(s, "end_reason", None)  # e.g. keepalives unanswered
                    with contextlib.suppress(Exception):
                        await s.close()
            if self._closed:
                return
            if not self.follow and error is None:
                return
            if error is not None and not self.follow:
                raise HostOpError(f"{self.ops.label}: log follow failed: {error}")
            # the connection dropped (or the program died): resume after the last full line
            self.reconnects += 1
            if not link_down:
                link_down = True
                yield LinkState(False, error or "connection closed")
            await asyncio.sleep(jittered(delay))  # not in step with the other followers of one jump host
            delay = min(self.retry_max_s, delay * 2)
