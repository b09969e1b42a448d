"""The bulk scanners' count (core/bytecount.py): the SIMD one gives what `bytes.count` gives, for any
bytes, needle and range; the declared dependency loads; the switch back to `bytes` works."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.core import bytecount

# needles drawn from a small alphabet so that they occur, overlap themselves (b"aa" in b"aaaa") and
# sit across the range's edges; the scanners' own needles among them
_ALPHABET = b"ab\n #"
_NEEDLES = st.one_of(
    st.binary(min_size=1, max_size=20),
    st.text(alphabet=_ALPHABET.decode(), min_size=1, max_size=6).map(str.encode),
    st.sampled_from([b"\n", b"#running-req: ", b" HTTP/1.", b' HTTP/1.1" 200 OK\n']),
)


@settings(max_examples=400, deadline=None)
@given(
    hay=st.one_of(st.binary(max_size=3000), st.text(alphabet=_ALPHABET.decode(), max_size=3000).map(str.encode)),
    needle=_NEEDLES,
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_the_simd_count_is_bytes_count(hay: bytes, needle: bytes, cut: tuple[float, float]) -> None:
    a, b = sorted(int(x * len(hay)) for x in cut)
    assert bytecount.counter()(hay, needle, a, b) == hay.count(needle, a, b)
    assert bytecount.counter()(hay, needle, 0, len(hay)) == hay.count(needle)


def test_a_busy_megabyte_counts_the_same() -> None:
    line_a = b'[2026-02-24 11:52:00] INFO:     10.0.1.85:41466 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    line_b = b"[2026-02-24 11:52:00 TP0] Decode batch, #running-req: 270, #token: 56423, token usage: 0.41\n"
    hay = (line_a * 3 + line_b * 2) * 2500
    count = bytecount.counter()
    for needle in (b"\n", b"#running-req: ", b" HTTP/1."):
        for a, b in ((0, len(hay)), (17, len(hay) - 5), (65_536, 98_304)):
            assert count(hay, needle, a, b) == hay.count(needle, a, b)


def test_the_declared_dependency_is_the_one_used() -> None:
    # stringzilla is in pyproject's dependencies: the suite runs on the SIMD path unless told not to
    assert os.environ.get("COCKPIT_BYTECOUNT") != "python"
    assert bytecount.is_fast()


def test_cockpit_bytecount_python_rules_the_wheel_out() -> None:
    code = "from cockpit.core import bytecount; print(bytecount.is_fast(), bytecount.counter()(b'a\\nb\\n', b'\\n', 0, 4))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "COCKPIT_BYTECOUNT": "python"},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "2"]


@settings(max_examples=300, deadline=None)
@given(hay=st.binary(max_size=2000), byteset=st.binary(min_size=1, max_size=40), cut=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_first_of_is_the_first_byte_of_the_set(hay: bytes, byteset: bytes, cut: tuple[float, float]) -> None:
    a, b = sorted(int(x * len(hay)) for x in cut)
    want = next((i for i in range(a, b) if hay[i] in byteset), -1)
    assert bytecount.first_of()(hay, byteset, a, b) == want
    assert bytecount._bytes_first_of(hay, byteset, a, b) == want
