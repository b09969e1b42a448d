"""NodeLog: one owner of a node's log stream. A chunk is split into lines once; line numbers are
the file's; continuation lines inherit their record's rank; display text is cleaned and capped."""

from __future__ import annotations

from cockpit.backends import get_backend
from cockpit.core.events import ServerArgs
from cockpit.supervisor.nodelog import DISPLAY_LINE_CAP, NodeLog

SGLANG = get_backend("sglang")
LOG = (
    b"[2026-02-24 11:55:12] server_args=ServerArgs(model_path='/m', tp_size=2)\n"
    b"[2026-02-24 11:55:13 TP1] Load weight begin. avail mem=77.50 GB\n"
    b"Traceback (most recent call last):\n"
    b'  File "x.py", line 1, in forward_extend\n'
    b"\x1b[31m[2026-02-24 11:55:14 DP1 TP0] coloured\x1b[0m\n"
    b"tqdm 10%\rtqdm 50%\rtqdm 100%\n"
)


def test_lines_ranks_and_events_in_any_chunking() -> None:
    whole = NodeLog(SGLANG, "h")
    events, lines = whole.feed_lines(LOG)
    assert [ln.number for ln in lines] == [1, 2, 3, 4, 5, 6]
    assert [ln.rank for ln in lines] == [None, "TP1", "TP1", "TP1", "DP1 TP0", "DP1 TP0"]
    assert lines[4].text == "[2026-02-24 11:55:14 DP1 TP0] coloured"  # escape sequences dropped
    assert lines[5].text == "tqdm 100%"  # a redraw shows its last segment
    assert all(ln.host == "h" for ln in lines)
    assert any(isinstance(e, ServerArgs) for e in events)
    assert whole.parser is not None and whole.parser.lines_seen == 6

    byte = NodeLog(SGLANG, "h")  # a byte at a time: the same lines (a partial line shown as it comes)
    shown = []
    for i in range(len(LOG)):
        _ev, got = byte.feed_lines(LOG[i : i + 1])
        shown += got
    assert [ln.number for ln in shown] == [1, 2, 3, 4, 5, 6]
    assert byte.lines == 6 and not byte.mid_line


def test_a_giant_line_is_one_line_capped_and_counted_once() -> None:
    nl = NodeLog(SGLANG)
    _e, first = nl.feed_lines(b"[2026-02-24 11:55:13 TP3] " + b"x" * 10_000)
    _e, rest = nl.feed_lines(b"y" * 10_000 + b"\nnext\n")
    assert [ln.number for ln in first + rest] == [1, 2]
    assert len(first[0].text) == DISPLAY_LINE_CAP and first[0].rank == "TP3"
    assert rest[0].text == "next" and rest[0].rank == "TP3"  # a continuation of TP3's record


def test_raw_mode_keeps_the_files_text_in_pieces() -> None:
    nl = NodeLog(SGLANG, parse=False, raw=True, catch_up=None)
    assert nl.parser is None
    _e, a = nl.feed(b"\x1b[32mcolour\x1b[0m\r\nhalf")
    _e, b = nl.feed(b" done\n")
    assert [(p.line.text, p.continued, p.ends) for p in a + b] == [
        ("\x1b[32mcolour\x1b[0m\r", False, True), ("half", False, False), (" done", True, True)]


def test_catching_up_keeps_the_newest_lines_and_exact_numbers() -> None:
    nl = NodeLog(SGLANG, catch_up=100)
    _e, lines = nl.feed(b"".join(b"line %d\n" % i for i in range(1, 1001)))
    assert len(lines) == 100 and lines[0].line.number == 901 and lines[-1].line.text == "line 1000"
    assert nl.lines == 1000
