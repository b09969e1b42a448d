"""One call of a program sent to a remote python: the request on stdin after the program's text,
one JSON answer line back, and a retry when the connection drops under an operation that is safe
to repeat. HostOps (host.py) and SlurmLogin (login.py) are this with their own program and words.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, ClassVar

from cockpit.core.backoff import jittered
from cockpit.transport.base import HostKeyError, Transport, TransportError, Unreachable
from cockpit.transport.local import CommandTimeout, is_local

# Tests (and operators with an unusual layout) point every host's run directories elsewhere; the
# host program and the login-node program honour the same override.
RUNS_ROOT_ENV = "COCKPIT_RUNS_ROOT"
RETRIES = 3  # repeatable operations survive a connection dropped under them
RETRY_DELAY_S = 0.5


class ProgramClient:
    """Runs one stdlib program's operations over a Transport. A subclass names its program's text
    (`source`), the operations that must not run twice (`once_only`: a second launch or submit
    would start a second server or job), the error it raises when the program fails and the words
    for it."""

    source: ClassVar[bytes]
    once_only: ClassVar[frozenset[str]]
    error: ClassVar[type[TransportError]]
    program_words: ClassVar[str]  # "the host program"
    answer_words: ClassVar[str]  # "the host program", "the login node": "unreadable answer from …"

    def __init__(self, transport: Transport, *, python: str | None = None, runs_root: str | None = None):
        self.transport = transport
        self.python = python or (sys.executable if is_local(transport) else "python3")
        self.runs_root = runs_root if runs_root is not None else os.environ.get(RUNS_ROOT_ENV)

    @property
    def label(self) -> str:
        return self.transport.label

    def _program(self, req: dict[str, Any]) -> tuple[list[str], bytes]:
        """argv and stdin of one operation. The request travels on stdin, after the program's
        text, never in argv: any local user can read argv (`ps`), a launch's waiter keeps its argv
        for the whole run, and the request holds the profile's env and the batch script (HF_TOKEN,
        --api-key)."""
        if self.runs_root and "runs_root" not in req:
            req = {**req, "runs_root": self.runs_root}
        text = json.dumps(req, separators=(",", ":"))
        # a JSON string (ASCII, escaped) is also a Python string literal
        call = b"\nsys.exit(main(['-', " + json.dumps(text).encode() + b"]))\n"
        return [self.python, "-"], self.source + call

    async def _call(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Run one operation. Operations that are safe to repeat are retried when the connection
        drops under them, the way the log follower reconnects."""
        attempts = 1 if req["op"] in self.once_only else RETRIES + 1
        for attempt in range(attempts):
            try:
                return await self._call_once(req, timeout)
            except (HostKeyError, self.error, CommandTimeout):
                raise  # a refused key, a failed operation or a hung host: repeating won't help
            except Unreachable as exc:
                if exc.timed_out or attempt + 1 >= attempts:
                    raise  # no answer within the connect timeout: one timeout per command, not four
                await asyncio.sleep(jittered(RETRY_DELAY_S * (2**attempt)))  # refused: sshd may be restarting
            except TransportError:
                if attempt + 1 >= attempts:
                    raise
                await asyncio.sleep(jittered(RETRY_DELAY_S * (2**attempt)))
        raise AssertionError("unreachable")

    async def _call_once(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        argv, stdin = self._program(req)
        done = await self.transport.run(argv, stdin=stdin, timeout=timeout)
        text = done.stdout.decode("utf-8", "replace").strip().splitlines()
        if done.returncode != 0 or not text:
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise self.error(
                f"{self.label}: {self.program_words} failed ({req['op']}): {err[-1] if err else f'exit {done.returncode}'}",
                hint=f"is {self.python} a working Python 3 on {self.label}?",
            )
        try:
            answer: dict[str, Any] = json.loads(text[-1])
        except ValueError:
            raise self.error(f"{self.label}: unreadable answer from {self.answer_words}: {text[-1][:200]}") from None
        return self._checked(req, answer)

    def _checked(self, req: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        """The answer, or the program's refusal raised as the client's error."""
        return answer
