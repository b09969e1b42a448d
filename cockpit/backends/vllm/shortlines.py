"""Hostile short lines for the vLLM parser: a line read as nothing is not read again.

A megabyte of empty or one-byte lines (or any short line repeated) is a million lines, each of
which cost the whole classifier (~10-20 µs: `cockpit diagnose` took 10-28 s on one). The parser's
answer for a line depends on its text, on the parser's state and on a few positions (the first
line, the line after a traceback frame, the lines after a `<module>` frame). So: when a short line
repeats the one before it, its classification is watched — no event, not counted as vLLM's, the
parser's state the same after as before (`_state`) — and then the line is remembered with the
parser's epoch (`epoch` counts real classifications). While no other line has been classified
since, and away from those positions, the same line again is only counted; a run of it is
skipped at C speed (`_run_length`). Everything else is classified as before, in order.
"""

from __future__ import annotations

from typing import Any

SHORT_LINE = 64  # lines up to this long are watched when they repeat
MEMO_LINES = 4096
RUN = 8  # a line is watched inside a run of at least this many equal lines
# the parser's attributes that change with every line whatever it says (not its state)
_VOLATILE = frozenset({"_lines", "_nothing", "_epoch"})


def _state(parser: Any) -> dict[str, Any]:
    return {k: (v.copy() if isinstance(v, (list, dict, set)) else v)
            for k, v in vars(parser).items() if k not in _VOLATILE}


def _away(parser: Any, line: int) -> bool:
    """Not at a position the classifier reads differently (see the module docstring)."""
    return line > 1 and line - parser._frame_at[0] > 1 and line - parser._module_frame_line > 2


def _one(parser: Any, raw: bytes, repeats: bool, out: list[Any], clean: Any, cap: int) -> None:
    """Classify the next line, or only count it when remembered; `repeats`: it is the second of a
    run of at least RUN equal lines (then it is watched: the state compared costs ~50 µs, paid
    once per run, not for every pair of blank lines of an ordinary log)."""
    parser._lines += 1
    line = parser._lines
    memo: dict[bytes, int] = parser._nothing
    if memo.get(raw) == parser._epoch and _away(parser, line):
        return
    watch = repeats and len(raw) <= SHORT_LINE and _away(parser, line)
    before = _state(parser) if watch else None
    emitted = len(out)
    if len(raw) > cap:
        parser._count_cut(raw)
    parser.classify(line, clean(raw), out)
    parser._epoch += 1
    if before is not None and len(out) == emitted and _state(parser) == before:
        if len(memo) >= MEMO_LINES:
            memo.clear()
        memo[raw] = parser._epoch


def each(parser: Any, lines: list[bytes], out: list[Any], clean: Any, cap: int) -> None:
    """parser._each: classify the lines in order, remembered ones counted only."""
    for k, raw in enumerate(lines):
        repeats = k > 0 and len(raw) <= SHORT_LINE and lines[k - 1 : k - 1 + RUN].count(raw) == RUN
        _one(parser, raw, repeats, out, clean, cap)


def _run_length(buf: bytes, pos: int, line: bytes, end: int) -> int:
    """How many times `line` + newline repeats from buf[pos] on (up to `end`); at least 1."""
    unit = line + b"\n"
    n, step = 0, 1
    while step:
        if pos + len(unit) * (n + step) <= end and buf.startswith(unit * step, pos + len(unit) * n):
            n += step
            step *= 2
        else:
            step //= 2
    return max(n, 1)


def until_ready(parser: Any, buf: bytes, end: int, out: list[Any], clean: Any, cap: int) -> int:
    """A file's chunk read line by line until the server is ready; where the rest begins. A run
    of a remembered line is counted whole."""
    pos = 0
    prev: bytes | None = None
    memo: dict[bytes, int] = parser._nothing
    while pos < end and not parser._ready:
        nl = buf.find(b"\n", pos, end)
        raw = buf[pos:nl]
        if memo.get(raw) == parser._epoch and _away(parser, parser._lines + 1):
            n = _run_length(buf, pos, raw, end)
            parser._lines += n
            pos += n * (len(raw) + 1)
        else:
            repeats = raw == prev and len(raw) <= SHORT_LINE and _run_length(buf, pos, raw, end) >= RUN - 1
            _one(parser, raw, repeats, out, clean, cap)
            pos = nl + 1
        prev = raw
    return pos
