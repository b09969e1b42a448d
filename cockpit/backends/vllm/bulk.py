"""The bulk path of the vLLM parser: a busy log's uvicorn access lines counted, not read one by one.

Why: once vLLM is serving, ~99 % of its log is uvicorn's access lines (`INFO:     10.0.0.5:41234 -
"POST /v1/completions HTTP/1.1" 200 OK`), and `VLLMLogParser._classify` does nothing with one but
count it as vLLM's (the /health 200 it looks for matters only before the server is ready). Read line
by line they cost ~1.5 µs each: `cockpit diagnose` of a 1M-line busy log took 1.5 s, ~25 times the
operator's `grep`. Here a block of complete lines is cut into 8 KiB pieces, and a piece is proved to
be access lines only by counts at memory speed (core/bytecount.py): as many lines as lines that
start as the piece's first line does — `INFO:     ` (uvicorn's level and its padding), or vLLM's
process prefix and that (`(APIServer pid=41877) INFO:     `, vLLM >= 0.11, the same pid) — and as
many ` HTTP/1.` marks, with no byte that would make `_clean` change the text (a control, a
non-ASCII byte, the `[` of its pasted-colour rule) and no line over the classify cap (a piece of at
most CLASSIFY_CAP bytes). Such a line is exactly what `_classify`'s first test takes for an access
line (`INFO:  ` within its first 30 characters, so in its first 80). A piece that fails is cut in
eight and each part asked again; below 1 KiB its lines are told apart one by one with
`_classify`'s own test, and the others classified as before, in order.

What the counts cannot see: a piece whose lines all start with `INFO:     ` but where one holds
two ` HTTP/1.` marks and another none (uvicorn's own lines without a request, such as `Shutting
down`, beside a line with two request lines in it). uvicorn prints one request per line and quotes
its path, so the case needs a line no server of this kind writes; docs/DECISIONS.md ("Reading a log") says so.

Access lines of several API servers interleaved (`--api-server-count`) are proved in the smaller
pieces where one pid runs, or told apart line by line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cockpit.core import bytecount

if TYPE_CHECKING:
    from cockpit.core.events import Event

PIECE = 8 * 1024  # bytes asked at once; one that fails is cut in eight
SMALLEST = 1024  # below this a piece's lines are read one by one
SPOILT_RUN = 8  # after so many spoilt lines in a row, the rest of the piece is re-proved line by line
# bytes that make `_clean` change a line (controls, DEL, non-ASCII) or may (`[`: pasted colour codes)
_NOT_PLAIN = bytes([*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0x100), ord("[")])
_NOT_PLAIN_BUT_BRACKET = _NOT_PLAIN[:-1]
_UVICORN = b"INFO:     "  # uvicorn's level and its padding: an access line's start
_PREFIX = b"(APIServer pid="  # vLLM >= 0.11 puts the API server's process in front of each line
_ACCESS_MARK = b" HTTP/1."


def _head(buf: bytes, a: int, b: int) -> bytes | None:
    """The newline and the start every access line of the piece shares with its first line
    (`\nINFO:     ` or `\n(APIServer pid=N) INFO:     `), or None if the first line has neither."""
    if buf.startswith(_UVICORN, a):
        return b"\n" + _UVICORN
    if buf.startswith(_PREFIX, a):
        close = buf.find(b") " + _UVICORN, a + len(_PREFIX), min(a + 40, b))
        if close != -1 and buf[a + len(_PREFIX) : close].isdigit():
            return b"\n" + buf[a : close + 2 + len(_UVICORN)]
    return None


def scan(buf: bytes, s: int, e: int, classify_cap: int, each: Callable[[list[bytes], list[Event]], None],
         access: Callable[[int], bool], out: list[Event], clean: Callable[[bytes], str] | None = None) -> None:
    """buf[s:e] is whole lines (buf[e - 1] is a newline, s is 0 or follows one). `access(n)`: n access
    lines went by — False when the parser cannot take them so (it learnt a wrapper from a line before
    them: they are read one by one then); `each(lines, out)`: classify these lines one by one;
    `clean`: the parser's own text of a line, to prove a spoilt line (one byte that is not plain
    ASCII) an access line by its text instead of classifying it (`spoilt`)."""
    count = bytecount.counter()
    first_of = bytecount.first_of()
    piece = min(PIECE, classify_cap)

    def proved(a: int, b: int) -> tuple[int, int]:
        """(the number of lines of buf[a:b] when all are plain access lines, else -1; where the
        first byte that makes a line not plain sits, else -1)."""
        if b - a > classify_cap:
            return -1, -1
        bad = first_of(buf, _NOT_PLAIN, a, b)
        if bad != -1:
            return -1, bad
        # every line must start as the piece's first line does: `INFO:     `, or vLLM's process prefix
        # then `INFO:     ` (`(APIServer pid=41877) INFO:     `, the same pid), so `INFO:  ` is in
        # each line's first 80 characters
        head = _head(buf, a, b)
        if head is None:
            return -1, -1
        n = count(buf, b"\n", a, b)
        starts = count(buf, head, a - 1, b) if a else count(buf, head, 0, b) + 1
        return (n if starts == n and count(buf, _ACCESS_MARK, a, b) == n else -1), -1

    def walk(a: int, b: int, size: int) -> None:
        pos = a
        while pos < b:
            end = buf.find(b"\n", min(pos + size, b) - 1, b) + 1 or b
            settle(pos, end, size)
            pos = end

    def settle(a: int, b: int, size: int) -> None:
        """buf[a:b], whole lines: counted, or the line holding the byte that spoils it read alone and
        the lines around it settled the same way (a stats line's `[` costs one line, not its piece),
        or cut smaller, or read line by line."""
        spoilt_run = 0
        while a < b:
            if spoilt_run >= SPOILT_RUN and clean is not None:
                # line after line spoilt (a byte on every line): no more proofs by piece, each
                # line re-proved by itself
                by_line(a, b)
                return
            n, bad = proved(a, b)
            if n >= 0:
                if not access(n):
                    each(buf[a:b].split(b"\n")[:-1], out)
                return
            if bad == -1:
                break
            ls = buf.rfind(b"\n", a, bad) + 1 or a
            le = buf.find(b"\n", bad, b) + 1
            if ls > a:
                settle(a, ls, size)
                spoilt_run = 0
            spoilt(buf[ls : le - 1])
            spoilt_run += 1
            a = le
        else:
            return
        if size > SMALLEST and b - a > SMALLEST:
            walk(a, b, size // 8)
        elif first_of(buf, _NOT_PLAIN_BUT_BRACKET, a, b) != -1 or b - a > classify_cap:
            each(buf[a:b].split(b"\n")[:-1], out)
        else:
            lines(buf[a:b].split(b"\n")[:-1])

    def spoilt(raw: bytes) -> None:
        """A line with a byte that is not plain (bad UTF-8, a control, a `[`): re-proved by its own
        clean text with `_classify`'s access test, not sent through the classifier. A log with one
        such byte on every line is then read at ~1 µs a line, not ~30."""
        if clean is not None and len(raw) <= classify_cap:
            text = clean(raw)
            if " HTTP/1." in text and "INFO:  " in text[:80] and text[:1] != "{" and access(1):
                return
        each([raw], out)

    def is_plain_access(raw: bytes) -> bool:
        """A line of plain ASCII that `_classify`'s own test takes for an access line."""
        return _ACCESS_MARK in raw and b"INFO:  " in raw[:80] and b"[" not in raw and raw[:1] != b"{"

    def by_line(a: int, b: int) -> None:
        """Each line of buf[a:b] re-proved by itself, counted in runs; the others classified in
        order. A plain line by its bytes (as lines() tells them); a spoilt one by its text: the
        piece is decoded at once (a newline never sits inside a UTF-8 sequence, so each line's
        text is its own decoding), and a line whose text needs no cleaning (printable, no `\r`,
        no `[`) is its clean text as it is; the rest go through `clean`."""
        raws = buf[a:b].split(b"\n")[:-1]
        texts = buf[a:b].decode("utf-8", "replace").split("\n")
        assert clean is not None
        at = iter(range(len(raws)))

        def is_access(raw: bytes) -> bool:
            i = next(at)
            if len(raw) > classify_cap or raw[:1] == b"{":
                return False
            if raw.isascii() and len(raw.translate(None, _NOT_PLAIN)) == len(raw):
                return is_plain_access(raw)
            text = texts[i]
            if b"\r" in raw or "[" in text or not text.isprintable():
                text = clean(raw)
            return " HTTP/1." in text and "INFO:  " in text[:80] and text[:1] != "{"

        runs(raws, is_access)

    def lines(raw_lines: list[bytes]) -> None:
        """A small piece of plain ASCII: its access lines told apart one by one (`_classify`'s own
        test), counted in runs, the others classified in order."""
        runs(raw_lines, is_plain_access)

    def runs(raw_lines: list[bytes], test: Callable[[bytes], bool]) -> None:
        run: list[bytes] = []
        for raw in raw_lines:
            if test(raw):
                run.append(raw)
                continue
            if run and not access(len(run)):
                each(run, out)
            run = []
            each([raw], out)
        if run and not access(len(run)):
            each(run, out)

    walk(s, e, piece)
