"""The small pieces every part of the SGLang grammar uses: lazily compiled patterns and figures
read with physical bounds.

A figure that does not parse (`avail mem=1.2.3 GB`) or lies outside what any machine can hold (a
400-digit value, a negative size, NaN) raises `ValueError`; `classify` turns that into one skipped,
counted line (`Unparsed`), so a single bad number can neither crash the parser nor poison the
arithmetic downstream with inf or NaN.
"""

from __future__ import annotations

import math
import re

GIB_MAX = 4096.0  # GiB: no accelerator (nor a host's free RAM as SGLang prints it) holds more
HOST_GB_MAX = 1e6  # decimal GB of host memory (a petabyte)
SECONDS_MAX = 1e8  # about three years
COUNT_MAX = 10**12  # tokens, requests, sequence numbers


class lazy:  # lower case: it reads like re.compile where the patterns are defined
    """A regex compiled on first use: most patterns only meet the rare lines with news, and
    compiling ~60 of them at import would cost `cockpit diagnose` ~15 ms before any work."""

    __slots__ = ("_flags", "_rx", "_src")

    def __init__(self, src: str, flags: int = 0) -> None:
        self._src = src
        self._flags = flags
        self._rx: re.Pattern[str] | None = None

    def _get(self) -> re.Pattern[str]:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self._src, self._flags)
        return rx

    def match(self, text: str) -> re.Match[str] | None:
        rx = self._rx  # compiled: one call, not two (access lines take this path on a live tail)
        return (rx if rx is not None else self._get()).match(text)

    def search(self, text: str) -> re.Match[str] | None:
        rx = self._rx
        return (rx if rx is not None else self._get()).search(text)


def bounded(text: str, hi: float, what: str = "figure") -> float:
    """float(text) within [0, hi]; ValueError otherwise (unparsable, inf, NaN, negative, too big)."""
    v = float(text)
    if not (0.0 <= v <= hi):  # NaN fails both comparisons
        raise ValueError(f"{what} {text[:40]!r} outside 0..{hi:g}")
    return v


def gib(text: str) -> float:
    """A GPU memory figure in GiB as SGLang prints it."""
    return bounded(text, GIB_MAX, "GiB figure")


def count(text: str) -> int:
    """A token / request / sequence count."""
    if len(text) > 13 or not text.isdigit():
        raise ValueError(f"count {text[:40]!r} is not a whole number up to {COUNT_MAX:g}")
    return int(text)


def opt_float(text: str | None, hi: float = 1e12) -> float | None:
    """A figure in a batch line: None when absent, unparsable or out of range (one field of a
    routine line is not worth refusing the line for)."""
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if 0.0 <= v <= hi else None  # NaN fails both comparisons, an infinity the bound (hi is finite)


def opt_int(text: str | None, signed: bool = False) -> int | None:
    """A whole number in a line's fields: None when absent or not one. `signed`: `-1` means "off"
    for some settings (chunked_prefill_size=-1)."""
    if text is None or len(text) > 14:
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if signed or v >= 0 else None


_UNITS_GIB = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 1024.0,
              "KB": 1e3 / 2**30, "MB": 1e6 / 2**30, "GB": 1e9 / 2**30, "TB": 1e12 / 2**30}


def sized_gib(num: str, unit: str) -> float | None:
    """torch's `72.00 MiB` / `1.2 GiB` in GiB; None when it is not a plausible size."""
    try:
        v = float(num) * _UNITS_GIB.get(unit, 1.0)
    except ValueError:
        return None
    return round(v, 4) if math.isfinite(v) and 0.0 <= v <= GIB_MAX * 1024 else None


def host_gb_pair(a: str, b: str) -> tuple[float, float]:
    """Two host-memory figures in decimal GB (HiCache's `Requesting x GB but only have y GB`)."""
    return bounded(a, HOST_GB_MAX, "host GB"), bounded(b, HOST_GB_MAX, "host GB")
