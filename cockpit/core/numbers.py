"""Numbers from values of uncertain type (JSON from a host, YAML profiles, `--set` text): a value
that is not a number is unknown (None), never 0, and a bool is not a number here."""

from __future__ import annotations

from typing import Any


def as_int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def as_float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def is_number(s: str) -> bool:
    """`0.88`, `-1`, `1e3` are numbers; `--tp` is not (it would read as a flag)."""
    try:
        float(s)
    except ValueError:
        return False
    return True
