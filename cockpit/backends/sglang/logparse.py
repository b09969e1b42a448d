"""Reading a whole SGLang log into a RunState, and the parser's public names.

The parser is three modules, one job each: `grammar` (one line's text -> events), `scanner` (the
whole lines the splitter hands it, cockpit/core/linesplit.py -> the lines worth classifying, at GB/s
on routine lines) and this one, the bulk reader (a file or stream -> a RunState, a big file cut into
ranges parsed by forked workers).
Callers import the public names from here.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from cockpit.backends.sglang.grammar import Peek, classify, parse_server_args, split_record
from cockpit.backends.sglang.scanner import (
    CLASSIFY_CAP,
    FULL_FEED_LINES,
    LINE_CAP,
    READ_CHUNK,
    SAMPLE_EVERY,
    SUB_WINDOW,
    TAIL_SAMPLE,
    WINDOW,
    SGLangLogParser,
)
from cockpit.core.events import Event
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CLASSIFY_CAP", "FULL_FEED_LINES", "LINE_CAP", "READ_CHUNK", "SAMPLE_EVERY", "SUB_WINDOW", "TAIL_SAMPLE", "WINDOW",
    "Peek", "SGLangLogParser", "classify", "iter_chunks", "parse_server_args", "read_log", "split_record",
]


def iter_chunks(source: BinaryIO, size: int = READ_CHUNK) -> Iterator[bytes]:
    while True:
        chunk = source.read(size)
        if not chunk:
            return
        yield chunk


PARALLEL_MIN_BYTES = 48 << 20  # a file at least this big is cut into ranges parsed by forked workers
MAX_WORKERS = 4


Counts = tuple[int, int, int, int]  # (strong, generic, foreign, cut) lines: SGLangLogParser's tally


def _tally(parser: SGLangLogParser) -> Counts:
    return parser.strong, parser.generic, parser.foreign, parser.lines_cut


def _recognised(strong: int, generic: int, foreign: int) -> int:
    """SGLangLogParser.lines_recognised over several parsers' tallies (none without a line of SGLang's own)."""
    return 0 if strong == 0 else strong + generic


def _parse_range(fd: int, start: int, end: int) -> tuple[int, list[Event], Counts]:
    """Events of the lines in bytes [start, end) of a file, numbered from 1. `pread` keeps the
    shared file offset out of it (forked workers share it with the parent)."""
    parser = SGLangLogParser()
    reader = ByteReader(parser)
    out: list[Event] = []
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        out += reader.feed(chunk)
    out += reader.finish()
    return parser.lines_seen, out, _tally(parser)


def _line_starts(f: BinaryIO, size: int, parts: int) -> list[int]:
    """`parts` + 1 offsets cutting the file at line starts, in order (ranges may be empty)."""
    cuts = [0]
    for i in range(1, parts):
        pos = max(size * i // parts, cuts[-1])
        f.seek(pos)
        while True:
            block = f.read(65536)
            if not block:
                pos = size
                break
            nl = block.find(b"\n")
            if nl != -1:
                pos += nl + 1
                break
            pos += len(block)
        cuts.append(min(pos, size))
    cuts.append(size)
    return cuts


def _workers(size: int) -> int:
    if size < PARALLEL_MIN_BYTES or not hasattr(os, "fork"):
        return 1
    env = os.environ.get("COCKPIT_LOG_WORKERS")
    if env is not None:
        return max(1, int(env)) if env.isdigit() else 1
    # forking a threaded process is not safe; a process that never imported threading started no
    # thread through it (the CLI's case: importing it only to ask costs ~1 ms of diagnose's start-up)
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() != 1:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        idle = cpus - os.getloadavg()[0]  # on a saturated host more processes only add overhead
    except OSError:
        idle = cpus
    return max(1, min(MAX_WORKERS, cpus, int(idle + 0.5), size // (PARALLEL_MIN_BYTES // 2)))


def _parallel_events(f: BinaryIO, size: int, n: int, total: list[int], tallies: list[Counts]) -> Iterator[Event]:
    """Parse a big regular file in n ranges at once (fork; this process takes the first range).

    Each range yields its events numbered from 1; they are renumbered here, in order, from the line
    counts of the ranges before. A worker that fails is replaced by parsing its range here.
    """
    import pickle

    cuts = _line_starts(f, size, n)
    children: list[tuple[int, int, int, int]] = []  # (pid, read fd, start, end)
    for i in range(1, n):
        start, end = cuts[i], cuts[i + 1]
        try:
            rfd, wfd = os.pipe()
            pid = os.fork()
        except OSError:
            children.append((-1, -1, start, end))
            continue
        if pid == 0:  # the worker: parse, send, leave without running any of the parent's cleanup
            code = 0
            try:
                os.close(rfd)
                data = pickle.dumps(_parse_range(f.fileno(), start, end), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(wfd, "wb") as w:
                    w.write(data)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        children.append((pid, rfd, start, end))
    try:
        lines, events, counts = _parse_range(f.fileno(), cuts[0], cuts[1])
        yield from events
        base = lines
        total.append(lines)
        tallies.append(counts)
        for pid, rfd, start, end in children:
            got: tuple[int, list[Event], Counts] | None = None
            if pid > 0:
                with os.fdopen(rfd, "rb") as r:
                    data = r.read()
                _, status = os.waitpid(pid, 0)
                if os.waitstatus_to_exitcode(status) == 0 and data:
                    try:
                        got = pickle.loads(data)
                    except Exception:
                        got = None
            count, evs, counts = got if got is not None else _parse_range(f.fileno(), start, end)
            tallies.append(counts)
            for e in evs:
                # the worker's events are fresh objects nobody else holds yet: renumber in place
                object.__setattr__(e, "line", e.line + base)
                yield e
            base += count
            total.append(count)
    finally:
        for pid, rfd, _, _ in children:  # on an early exit, reap what is left
            if pid > 0:
                try:
                    os.close(rfd)
                except OSError:
                    pass
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def read_log(source: str | Path | BinaryIO, state: RunState | None = None,
             stats: dict[str, int] | None = None) -> RunState:
    """Parse a whole log (a path, or an open binary stream such as sys.stdin.buffer) into a RunState.

    A big regular file is parsed in ranges by forked workers (see _parallel_events); the result is
    the same as a sequential parse except for which routine batch lines are sampled into the series.
    """

    st = state if state is not None else RunState(backend="sglang", memory_flag="mem_fraction_static")
    parser = SGLangLogParser()
    reader = ByteReader(parser)

    def consume(f: BinaryIO) -> None:
        for chunk in iter_chunks(f):
            for e in reader.feed(chunk):
                apply(st, e)
        for e in reader.finish():
            apply(st, e)

    if isinstance(source, (str, os.PathLike)):  # not pathlib: ~3 ms of diagnose's start-up
        if str(source) == "-":
            consume(sys.stdin.buffer)
        else:
            with open(source, "rb") as f:
                info = os.fstat(f.fileno())
                n = _workers(info.st_size) if stat.S_ISREG(info.st_mode) else 1
                if n > 1:
                    total: list[int] = []
                    tallies: list[Counts] = []
                    for e in _parallel_events(f, info.st_size, n, total, tallies):
                        apply(st, e)
                    strong, generic, foreign, cut = (sum(c[i] for c in tallies) for i in range(4))
                    return _done(st, sum(total), _recognised(strong, generic, foreign), foreign, stats, cut)
                consume(f)
    else:
        consume(source)
    return _done(st, parser.lines_seen, parser.lines_recognised, parser.foreign, stats, parser.lines_cut)


def _done(st: RunState, lines: int, recognised: int, foreign: int, stats: dict[str, int] | None,
          cut: int = 0) -> RunState:
    """The input has ended: a traceback nothing came after is the crash (reducer.end_of_input).
    Record how much of the input was read; `stats` (the caller's) gets this input's counts."""

    end_of_input(st)
    st.lines_seen = max(st.lines_seen, lines)
    st.lines_recognised += recognised
    if stats is not None:
        stats.update(lines=lines, recognised=recognised, foreign=foreign, cut=cut)
    return st
