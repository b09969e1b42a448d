"""Log filters for the log pane: presets (memory, errors, batches, all), free regexes, a rank.

The presets and their patterns belong to the parser (cockpit.core.logfilter.LineFilter), so the
TUI, `cockpit logs --filter` and the tests agree on what "memory lines" are. LineFilter also keeps
a rank's traceback lines with that rank's record, which is why the rank goes through it too.
"""

from __future__ import annotations

from cockpit.core.logfilter import PRESET_NAMES, LineFilter

# The order `f` cycles through.
PRESETS: tuple[str, ...] = tuple(p for p in ("memory", "errors", "batches", "all") if p in PRESET_NAMES)


def make_matcher(spec: str, rank: str | None = None) -> LineFilter:
    """A matcher for a preset name or a regex. Raises ValueError for a regex that does not compile."""
    return LineFilter(spec, rank)
