"""A live tail's feed is decoded at once, not line by line (scanner._block): the text of every
line must be exactly what decoding it alone gives, for any bytes (bad UTF-8 at a line's end, in its
middle, control bytes), and the events the same as with the per-line path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.sglang.scanner import SGLangLogParser

_PIECES = st.sampled_from([b"\xe2\x82", b"\xff", b"\xc3", b"\xf0\x9f\x98", b"\x1b[31m", b"\xc2\x9b", b"\x00", b"\t",
                           "é".encode(), "█".encode(), b"[2026-02-24 11:55:44 TP0] ", b"Decode batch, #running-req: 3",
                           b"CUDA out of memory. ", b" ", b"x"])
_LINE = st.lists(_PIECES, max_size=12).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=40))
def test_a_feed_decoded_at_once_reads_as_its_lines_alone(lines: list[bytes]) -> None:
    feed = b"\n".join(lines) + b"\n"
    assert feed.decode("utf-8", "replace").split("\n")[:-1] == [raw.decode("utf-8", "replace") for raw in lines]
    whole = SGLangLogParser()
    got = whole.feed(feed) + whole.finish()
    # the per-line path: the same lines with a `\r` at their end (cut off by _clean), so the feed
    # is not decoded at once
    ref = SGLangLogParser()
    want = ref.feed(b"\r\n".join(lines) + b"\r\n") + ref.finish()
    assert [type(e).__name__ for e in got] == [type(e).__name__ for e in want]
    assert got == want
