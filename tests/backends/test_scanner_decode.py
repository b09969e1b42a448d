"""A live tail's feed is decoded at once, not line by line (scanner._block): the text of every
line must be exactly what decoding it alone gives, for any bytes (bad UTF-8 at a line's end, in its
middle, control bytes), and the events the same as with the per-line path. A feed of printable
ASCII is taken as its lines' clean text without a per-line check: any control byte (tab and DEL
among them) or non-ASCII byte sends it through the check, and the cap on a line is in bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.sglang.scanner import CLASSIFY_CAP, SGLangLogParser, _clean
from cockpit.core.linesplit import ByteReader
from cockpit.core.sanitize import clean_text

_PIECES = st.sampled_from([b"\xe2\x82", b"\xff", b"\xc3", b"\xf0\x9f\x98", b"\x1b[31m", b"\xc2\x9b", b"\x00", b"\t",
                           "é".encode(), "█".encode(), b"[2026-02-24 11:55:44 TP0] ", b"Decode batch, #running-req: 3",
                           b"CUDA out of memory. ", b" ", b"x"])
_LINE = st.lists(_PIECES, max_size=12).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=40))
def test_a_feed_decoded_at_once_reads_as_its_lines_alone(lines: list[bytes]) -> None:
    feed = b"\n".join(lines) + b"\n"
    assert feed.decode("utf-8", "replace").split("\n")[:-1] == [raw.decode("utf-8", "replace") for raw in lines]
    whole = ByteReader(SGLangLogParser())
    got = whole.feed(feed) + whole.finish()
    # the per-line path: the same lines with a `\r` at their end (cut off by _clean), so the feed
    # is not decoded at once
    ref = ByteReader(SGLangLogParser())
    want = ref.feed(b"\r\n".join(lines) + b"\r\n") + ref.finish()
    assert [type(e).__name__ for e in got] == [type(e).__name__ for e in want]
    assert got == want


def _both_paths(lines: list[bytes]) -> tuple[SGLangLogParser, list[object], SGLangLogParser, list[object]]:
    """The feed as a live tail sends it, and the same lines through the per-line path (a `\r` at
    each line's end, cut off by _clean, keeps the feed from being decoded at once)."""
    whole = ByteReader(SGLangLogParser())
    got = whole.feed(b"\n".join(lines) + b"\n") + whole.finish()
    ref = ByteReader(SGLangLogParser())
    want = ref.feed(b"\r\n".join(lines) + b"\r\n") + ref.finish()
    return whole, got, ref, want


_ASCII = st.sampled_from([b"[2026-02-24 11:55:44 TP0] ", b"[2026-02-24 11:55:44] ", b"Decode batch, #running-req: 3, ",
                          b"#token: 12, token usage: 0.05, cuda graph: True", b'INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK',
                          b"KV cache pool is full. Retract requests. #retracted_reqs: 2", b"Killed", b"  File \"x.py\", line 3, in f",
                          b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB.", b" ", b"x", b"~"])
_CONTROL = st.sampled_from([b"\t", b"\x7f", b"\x00", b"\x0b", b"\x0c", b"\x1b[0m", b"\x1f"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_ASCII, max_size=8).map(b"".join), min_size=1, max_size=40),
       st.one_of(st.none(), st.tuples(st.integers(0, 39), _CONTROL)))
def test_a_printable_ascii_feed_is_its_lines_clean_text(lines: list[bytes], control: tuple[int, bytes] | None) -> None:
    if control is not None:  # one control byte somewhere: the feed is checked line by line
        i, byte = control
        i %= len(lines)
        lines[i] = lines[i][: len(lines[i]) // 2] + byte + lines[i][len(lines[i]) // 2 :]
    whole, got, ref, want = _both_paths(lines)
    assert got == want
    assert (whole.lines_seen, whole.lines_recognised, whole.generic, whole.lines_cut) == (
        ref.lines_seen, ref.lines_recognised, ref.generic, ref.lines_cut)


def test_the_cap_on_a_line_is_in_bytes_not_characters() -> None:
    """A line under the cap in characters but over it in bytes (two-byte letters) is cut as the
    per-line path cuts it, in a feed that is read at once otherwise."""
    long = b"[2026-02-24 11:55:44 TP0] Load weight begin. avail mem=75.00 GB " + "\u00e9".encode() * (CLASSIFY_CAP // 2 + 100)
    assert len(long.decode()) < CLASSIFY_CAP < len(long)
    lines = [b"[2026-02-24 11:55:44 TP0] Decode batch, #running-req: 3, #token: 12", long, b"Killed"]
    whole, got, ref, want = _both_paths(lines)
    assert got == want
    assert whole.lines_cut == ref.lines_cut == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_ASCII, _CONTROL, _PIECES, st.binary(max_size=3)), max_size=10).map(b"".join))
def test_a_line_is_cleaned_as_its_text_says(raw: bytes) -> None:
    """_clean asks an ASCII line's bytes whether it holds a control character: the same answer as
    `str.isprintable` on its text, for every byte."""
    raw = raw.replace(b"\r", b"").replace(b"\n", b"")
    text = raw.decode("utf-8", "replace")
    assert _clean(raw) == (text if text.isprintable() else clean_text(text, keep_newlines=False))


def test_every_ascii_byte_is_cleaned_as_its_text_says() -> None:
    for b in range(0x80):
        raw = b"x" + bytes([b]) + b"y"
        if b in (0x0a, 0x0d):  # a line holds no newline; a `\r` is a tqdm redraw, cut before
            continue
        text = raw.decode()
        assert _clean(raw) == (text if text.isprintable() else clean_text(text, keep_newlines=False)), b
