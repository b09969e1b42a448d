"""A run's changes to its profile's server flags, as one small typed value.

The operator spells a flag many ways (`--mem-fraction-static`, `mem_fraction_static`, a FlagChange's
`--mem-fraction-static` from a finding): `Overrides` takes any of them once, at the edge where it
comes in (`--set`, the TUI's edits, an advice's changes, a run record's meta), and holds the one
spelling the profile uses (no dashes in front, words joined by `-`). Everything past the edge
passes the value as it is: nothing downstream normalises a flag name again. It is immutable: a
restart's new overrides are a new value (`|`), never an edit of the running one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from cockpit.core.findings import FlagChange


def normalise_flag_name(name: str) -> str:
    """`--mem_fraction_static`, `mem-fraction-static` → `mem-fraction-static`: the one spelling
    (this module owns it; the profile and the backends ask here, and it loads no pydantic)."""
    return name.lstrip("-").replace("_", "-")


class Overrides(Mapping[str, Any]):
    """Flag → value, every name in the profile's spelling. Make one with `Overrides.of(…)`."""

    __slots__ = ("_flags",)
    _flags: dict[str, Any]

    def __init__(self, given: Mapping[str, Any] | Iterable[FlagChange] | None = None):
        flags: dict[str, Any] = {}
        if isinstance(given, Mapping):
            items: Iterable[tuple[str, Any]] = given.items()
        else:
            items = ((c.flag, c.to_value) for c in given or ())
        for name, value in items:
            flags[normalise_flag_name(str(name))] = value  # a later spelling of the same flag wins
        object.__setattr__(self, "_flags", flags)

    @classmethod
    def of(cls, given: Overrides | Mapping[str, Any] | Iterable[FlagChange] | None) -> Overrides:
        """The value for `given`: itself when it is one already (nothing is normalised twice)."""
        return given if isinstance(given, Overrides) else cls(given)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Overrides is immutable: make a new one (`|`)")

    def __getitem__(self, flag: str) -> Any:
        return self._flags[flag]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flags)

    def __len__(self) -> int:
        return len(self._flags)

    def __repr__(self) -> str:
        return f"Overrides({self._flags!r})"

    def __or__(self, other: Overrides | Mapping[str, Any] | Iterable[FlagChange]) -> Overrides:
        """These with `other` on top (a restart's changes over the run's own)."""
        out = Overrides()
        object.__setattr__(out, "_flags", {**self._flags, **Overrides.of(other)._flags})
        return out

    def without(self, flags: Iterable[str]) -> Overrides:
        """These less `flags` (names in the profile's spelling, as this value gives them)."""
        gone = set(flags)
        out = Overrides()
        object.__setattr__(out, "_flags", {k: v for k, v in self._flags.items() if k not in gone})
        return out

    def applied_to(self, server: Mapping[str, Any]) -> dict[str, Any]:
        """The server flags of a run: `server` (a profile's, any spelling) with these on top, each
        overridden flag under this value's name whatever the profile called it."""
        flags = {k: v for k, v in server.items() if normalise_flag_name(k) not in self._flags}
        flags.update(self._flags)
        return flags

    def as_dict(self) -> dict[str, Any]:
        """A plain copy (a run record's meta, JSON)."""
        return dict(self._flags)
