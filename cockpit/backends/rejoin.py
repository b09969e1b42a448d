"""A message re-wrapped over several lines, joined before it is matched (issue 35, item 5).

Terminals and pastes hard-wrap long lines at their width, cutting anywhere (mid-word, mid-number):
`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total
capacity of 79.10 GiB of which 1.2` / `5 GiB is free. …`. The pieces are consecutive lines, every
one but the last as long as the terminal is wide, and no piece after the first starts as a line of
the log does (a record head, a traceback's header or frame).

The parsers' classifiers already hold every decisive message of the engines' catalogue; joining is
asking them again with the pieces put back together (`step`). So that the common path pays
nothing, a line is held as a possible first piece only when it read as nothing or only as an
exception's text (its message may go on) and is at least `MIN_WIDTH` long (a terminal of 60
columns or more), and the join is tried only on the very next line, when that line decides
nothing of its own (or an exception's text is held above it) and can continue it. The joined text
is read as the first piece's line: taken when it decides (a failure, a lifecycle line); an
exception's text is told once its pieces end (up to `MAX_PIECES`, `MAX_JOINED` characters), so
that the reducer judges its whole message. A piece under a collector's prefix the parser has not
learnt (the prefix it shares with the first piece) is joined without it, and then only a join
that decides is taken. A parser keeps what it holds in one tuple attribute (`Held`), so that its
state compares by value (vLLM's repeated-line memo, SGLang's classification context).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cockpit.core import events as ev

MIN_WIDTH = 59  # the narrowest terminal read: 60 columns (a trailing space may be lost in a paste)
MAX_PIECES = 8  # a 400-character message at 60 columns is 7 pieces
MAX_JOINED = 2000

# (line number of the last piece, the text joined so far, the first piece's line number, pieces,
# the joined reading not told yet: an exception's text that may still go on)
Held = tuple[int, str, int, int, tuple[Any, ...]] | None
Classify = Callable[[int, str], list[Any]]

# what a reading must hold to end a join: more than an exception's text or a frame
_OPEN = (ev.ExceptionLine, ev.TracebackFrame, ev.PhaseEvidence, ev.FormatSeen, ev.EngineAdvice, ev.DeviceSeen,
         ev.FlagStated, ev.CollectiveSeq, ev.Unparsed)
# what a line that may be a first piece can have said and still wait for the next line (a frame is
# told at once: the parsers read the lines after it by it)
_WAITS = (ev.ExceptionLine, ev.PhaseEvidence, ev.FormatSeen, ev.EngineAdvice)
_DEFERRED = (ev.ExceptionLine, ev.EngineAdvice)  # of those, what waits to be told

# what starts a line of its own, never a piece of the line above: a record head of either engine
# (`[2025-…`), vLLM's `LEVEL MM-DD ` and process groups, uvicorn's `INFO:` lines, a traceback's
# header, frame or chained-exception line, a blank line
_HEAD = re.compile(
    r"\[\d{4}-\d\d-\d\d[ T\]]|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d"
    r"|\([\w.]+(?: [\w.]+)* pid=\d+|Traceback \(most recent call last\)|  File \"|\s*$"
    r"|During handling of the above exception|The above exception was the direct cause"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s"
)


def decisive(events: list[Any] | tuple[Any, ...]) -> bool:
    """Whether a reading says something of its own (more than an exception's text or a frame)."""
    return any(type(e) not in _OPEN for e in events)


def continues(text: str) -> bool:
    """Whether `text` can be a later piece of a wrapped line (not a line of its own)."""
    return _HEAD.match(text) is None


def step(line: int, text: str, alone: list[Any], held: Held, classify: Classify) -> tuple[list[Any], Held]:
    """After line `line` (its text, the wrapper off) was read on its own as `alone`: the events to
    tell for it (in order: a held joined reading first) and what to hold after it. `classify`
    reads a joined text as the first piece's line."""
    # (a piece that decides on its own is still joined to an exception's text held above it: the
    # message's head and rank are there)
    if held is not None and held[0] == line - 1 and continues(text) and (held[4] or not decisive(alone)):
        shared = _shared_prefix(text, held[1])
        if shared:
            # the pieces under a collector's prefix the parser has not learnt (or two lines of one
            # format): only a join that decides is taken
            piece = text[shared:]
            if continues(piece) and len(piece) < len(text):
                joined = classify(held[2], held[1] + piece)
                if decisive(joined):
                    return joined, None
        else:
            joined = classify(held[2], held[1] + text)
            if decisive(joined):
                return joined, None  # the message put back together says what it is
            if joined or not alone:
                # still open (an exception's text that may go on): told when the pieces end
                reading = tuple(joined) or held[4]
                nxt = _extend(line, text, held, reading)
                return ([] if nxt is not None else list(reading)), nxt
    told = list(held[4]) if held is not None else []
    if len(text) >= MIN_WIDTH and all(type(e) in _WAITS for e in alone):
        # maybe a first piece: an exception's text waits for the next line (its message may go on);
        # the rest is told now (the joined reading may tell it again: the reducer takes it twice)
        now = [e for e in alone if type(e) not in _DEFERRED]
        return [*told, *now], (line, text, line, 1, tuple(e for e in alone if type(e) in _DEFERRED))
    return [*told, *alone] if told else alone, None


def _shared_prefix(text: str, first: str) -> int:
    """How much of `text` is the prefix it shares with the held first piece, up to the last space
    inside it (a collector's `[pod/x/c] `, `> `, `(pid=N, ip=…) `, a stamp); 0 when they share
    no word."""
    n = 0
    for a, b in zip(text, first, strict=False):
        if a != b:
            break
        n += 1
    if n < 2:
        return 0
    cut = text.rfind(" ", 0, n) + 1
    return cut if cut >= 2 else 0


def flush(held: Held) -> list[Any]:
    """The held joined reading, at the end of the input."""
    return list(held[4]) if held is not None else []


def _extend(line: int, text: str, held: tuple[int, str, int, int, tuple[Any, ...]], reading: tuple[Any, ...]) -> Held:
    joined = held[1] + text
    if held[3] + 1 >= MAX_PIECES or len(joined) >= MAX_JOINED or len(text) < MIN_WIDTH:
        return None  # a short piece is the last one
    return (line, joined, held[2], held[3] + 1, reading)
