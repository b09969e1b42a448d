"""Reading server logs into one run state and its findings: what `cockpit diagnose` prints and
`cockpit report LOG` puts in its report. Which server wrote the logs is told from the opening of
the first (every backend scores how much it reads as its own); standard input (`-`) is read as
bytes, its opening read ahead for that.
"""

from __future__ import annotations

import io
import sys
from typing import Any, BinaryIO

from cockpit.face_light import (
    DEFAULT_BACKEND,
    BadInput,
    Finding,
    HostFacts,
    RunState,
    detect_backend,
    engine_name,
    engine_names,
    foreign_lines,
    get_backend,
    refusal,
)

CLASSIFY_CAP = 16 * 1024  # what both grammars read of one line (their CLASSIFY_CAP; the note quotes it)
SNIFF_BYTES = 64 * 1024  # the opening of a log that decides which server wrote it
# Below this share of recognised lines the report says how little of the file it could read.
PARTIAL_SHARE = 0.5


class FileRead:
    """How much of one file the parser could read. A plain class: a dataclass costs ~0.6 ms to
    create, 1 % of `cockpit diagnose`'s start-up, for an __eq__ and a __repr__ nobody uses."""

    __slots__ = ("cut", "foreign", "lines", "path", "recognised")

    def __init__(self, path: str, lines: int, recognised: int, foreign: int = 0, cut: int = 0) -> None:
        self.path = path
        self.lines = lines
        self.recognised = recognised
        self.foreign = foreign  # lines of another engine's log (vLLM)
        self.cut = cut  # lines longer than the grammar's cap, classified on their first 16 KiB


class _Replayed(io.RawIOBase):
    """Standard input with its opening read ahead: the opening first, then the rest of the pipe."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read1(len(b)) if hasattr(self._rest, "read1") else self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


_stdin_head: bytes | None = None


def _stdin_opening() -> bytes:
    """Standard input's first SNIFF_BYTES, read once (waiting for them, as a file's are there at
    once): a pipe's peek gives only what it happens to hold, so the same bytes piped and read
    from a file would be judged on different samples."""
    global _stdin_head
    if _stdin_head is None:
        _stdin_head = sys.stdin.buffer.read(SNIFF_BYTES)
    return _stdin_head


def _stdin() -> BinaryIO:
    """Standard input for the parser: the opening read ahead, then the rest."""
    head = _stdin_opening()
    return io.BufferedReader(_Replayed(head, sys.stdin.buffer), buffer_size=1 << 16)


def _sniff(path: str) -> bytes:
    """The opening bytes of a log, the same SNIFF_BYTES for a file and for standard input (read
    ahead and handed to the parser before the rest)."""
    try:
        if path == "-":
            return _stdin_opening()
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except (OSError, AttributeError, ValueError):
        return b""  # the read reports an unreadable file


def backend_of(paths: list[str]) -> str:
    return detected_backend(paths) or DEFAULT_BACKEND


def detected_backend(paths: list[str]) -> str:
    """The backend whose lines the first log's opening reads as; "" when it reads as no server's
    (the default backend then reads it, but nothing about the file chose that engine)."""
    return detect_backend(_sniff(paths[0]), default="") if paths else ""


def refuse_foreign(paths: list[str]) -> None:
    """BadInput for a log of another program (llama.cpp, TGI, a benchmark client, …): enough of its
    opening's lines carry that program's marks and the rest reads as no engine of ours."""
    for path in paths:
        found = foreign_lines(_sniff(path))
        if found.label is None:
            continue
        reason = refusal(found, detect_backend(found.rest, default="") != "")
        if reason:
            raise BadInput(f"{'standard input' if path == '-' else path}: {reason}")


def read_logs(paths: list[str], reads: list[FileRead] | None = None, backend_name: str | None = None) -> RunState:
    backend = get_backend(backend_name or backend_of(paths))
    state: RunState | None = None
    if paths.count("-") > 1:
        raise BadInput("standard input (-) can be read only once")
    for path in paths:
        stats: dict[str, int] = {}
        try:
            src = _stdin() if path == "-" else path
            state = backend.logs.read(src, state, stats)
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file") from None
        except IsADirectoryError:
            raise BadInput(f"{path}: is a directory, expected a log file") from None
        except PermissionError:
            raise BadInput(f"{path}: permission denied") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if reads is not None:
            reads.append(FileRead("standard input" if path == "-" else path, stats["lines"], stats["recognised"],
                                  stats.get("foreign", 0), stats.get("cut", 0)))
    assert state is not None  # argparse requires at least one LOG
    return state


def diagnose_logs(
    paths: list[str],
    *,
    target_headroom_gb: float | None = None,
    hosts: list[HostFacts] | None = None,
) -> tuple[RunState, list[Finding], list[FileRead]]:
    """What `cockpit diagnose` computes (the CLI prints it; the corpus tests call this directly).
    Raises BadInput for a file with no line of the server's log in it."""
    reads: list[FileRead] = []
    refuse_foreign(paths)
    detected = detected_backend(paths)
    name = detected or DEFAULT_BACKEND
    state = read_logs(paths, reads, name)
    for r in reads:
        if r.recognised == 0:
            # Name the engine whose log it was read as; when nothing read as any engine's (an empty,
            # binary or prose first file) the default one was only a fallback: say that none matched.
            engines = engine_name(name) if detected or any(x.recognised for x in reads) else engine_names()
            raise BadInput(f"no {engines} log lines recognised in {r.path} ({r.lines:,} lines read)")
    backend = get_backend(name)
    doctor = backend.doctor
    if doctor is None:  # an engine without advice: its log is still read and shown, and this said
        return state, [Finding("advice_unavailable", "info", f"advice unavailable for this engine "
                               f"({backend.words().display}): the log is read, no rule of the engine judges it")], reads
    findings = doctor.diagnose(state, hosts=hosts or (), target_headroom_gb=target_headroom_gb)
    return state, findings, reads
