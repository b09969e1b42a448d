"""Numbers from values of uncertain type (JSON from a host, YAML profiles, `--set` text): a value
that is not a number is unknown (None), never 0, and a bool is not a number here."""

from __future__ import annotations

from typing import Any


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 change`, `2 changes`, `1 piece of advice` / `3 pieces of advice`: counts in words, never `(s)`."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


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
