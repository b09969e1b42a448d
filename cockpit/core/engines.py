"""The engine names a profile's `backend:` may hold, as the backends' registry set them.

The core sits below the backends and cannot ask their registry; `cockpit.backends` hands its names
down here when it is imported (and again when an engine registers). Before that no name is known
and none is refused: `get_backend` refuses an unknown one when it is used.
"""

from __future__ import annotations

DEFAULT_ENGINE = "sglang"  # the engine of a profile without `backend:` (and of a state before its log says)
_NAMES: tuple[str, ...] = ()


def set_engine_names(names: tuple[str, ...]) -> None:
    global _NAMES
    _NAMES = tuple(names)


def engine_names_known() -> tuple[str, ...]:
    """The registered engines' names (empty until `cockpit.backends` is imported)."""
    return _NAMES
