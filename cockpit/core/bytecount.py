"""How many times a needle occurs in a range of a bytes object: the bulk log scanners' one primitive.

Why a dependency for a `count`: proving a block of a busy log routine takes three counts over every
byte (newlines, batch marks, access marks). CPython's `bytes.count` runs a byte loop for a one-byte
needle and the two-way search for longer ones: on the 134 MB busy log of bench/log_pipeline.py the
three cost ~125 ms, as much as the operator's whole `grep -E` over the file. StringZilla's `count`
(SIMD, a binary wheel on PyPI for every platform CPython ships wheels for) counts each in ~15 ms and
takes the range without a copy of it. Where it cannot be imported (no wheel for the platform), the
same counts come from `bytes`, at the old speed; the scanners' results do not depend on which
(tests/core/test_bytecount.py holds the two to the same answers, and the scanner tests run on both).

Non-overlapping occurrences, as `bytes.count` counts them (the scanners' needles cannot overlap
themselves anyway).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable

Count = Callable[[bytes, bytes, int, int], int]


def _bytes_count(buf: bytes, needle: bytes, start: int, end: int) -> int:
    return buf.count(needle, start, end)


@functools.cache
def counter() -> Count:
    """The fastest count this interpreter has. COCKPIT_BYTECOUNT=python forces `bytes.count` (tests
    run the scanners on both; an operator can rule the wheel out if it ever misbehaves)."""
    if os.environ.get("COCKPIT_BYTECOUNT") == "python":
        return _bytes_count
    try:
        from stringzilla import count
    except ImportError:
        return _bytes_count
    simd: Count = count  # the module ships no stubs: typed here, at the one place it enters
    return simd


@functools.lru_cache(maxsize=8)
def _byteset_pattern(byteset: bytes) -> re.Pattern[bytes]:
    return re.compile(b"[" + b"".join(b"\\x%02x" % c for c in sorted(set(byteset))) + b"]")


def _bytes_first_of(buf: bytes, byteset: bytes, start: int, end: int) -> int:
    m = _byteset_pattern(byteset).search(buf, start, end)
    return -1 if m is None else m.start()


@functools.cache
def first_of() -> Callable[[bytes, bytes, int, int], int]:
    """Where buf[start:end] first holds a byte of a set (an index into buf), or -1: StringZilla's SIMD
    `find_first_of` (~7 ms over a 94 MB log), else a compiled character class (~10 times as long)."""
    if not is_fast():
        return _bytes_first_of
    from stringzilla import find_first_of

    def first(buf: bytes, byteset: bytes, start: int, end: int) -> int:
        return int(find_first_of(buf, byteset, start, end))

    return first


def is_fast() -> bool:
    """Whether counter() is the SIMD one (the pure-Python scanners keep their own tricks for `bytes`)."""
    return counter() is not _bytes_count
