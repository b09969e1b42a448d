"""Log filters for the log pane: presets (memory, errors, batches, all) and free regexes.

The presets and their patterns belong to the parser (cockpit.core.logfilter.LineFilter), so the
TUI, `cockpit logs --filter` and the tests agree on what "memory lines" are. The rank is filtered
by the pane itself from each LogLine's rank, so LineFilter gets rank=None here.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

PRESETS: tuple[str, ...] = ("memory", "errors", "batches", "all")


class RegexMatcher:
    """A free regular expression typed after `/` (case-insensitive), with its match spans."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern, re.IGNORECASE)

    def matches(self, text: str) -> bool:
        return self.pattern.search(text) is not None

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self.pattern.finditer(text) if m.end() > m.start()]


class _AllLines:
    def matches(self, text: str) -> bool:
        return True

    def spans(self, text: str) -> list[tuple[int, int]]:
        return []


def make_matcher(spec: str) -> object:
    """A matcher for a preset name or a regex. Raises ValueError for a regex that does not compile."""
    line_filter: Any = None
    try:
        line_filter = importlib.import_module("cockpit.core.logfilter").LineFilter
    except (ImportError, AttributeError):  # not in this build: regexes still work, presets show all
        line_filter = None
    if line_filter is not None:
        try:
            return line_filter(spec, None)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    if spec == "all" or spec in PRESETS:
        return _AllLines()
    try:
        return RegexMatcher(spec)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
