"""The live log's model: a bounded ring buffer, the filtered selection from it, and a search.

No Textual here (tests/ui/test_logmodel.py runs it without Textual loaded): the LogPane widget
(`ui/widgets/logpane.py`) owns one and does what a screen does with it: scrolling, pausing,
wrapping into screen rows, painting and scheduling the selection's slices between other events.

Lines arrive in batches (10-20 Hz) from the supervisor. Filtering is done by a matcher the screen
hands in (`LineFilter` from the core, or anything with `matches`/`spans`) and a rank. A new filter
applies to the past too: it selects from the ring newest-first, the lines for the screen at once
(`set_filter`), the older ones in slices (`select_slice`) that the widget runs between other events.
A search (less-style) does not hide lines: it finds the match to jump to, the widget scrolls there.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from cockpit.face import PRESET_NAMES, LineFilter, LogLine, clean_text, has_control


def line_cells(text: str) -> int:
    """Terminal cells of a log line for the sideways extent: a CJK character or an emoji (East
    Asian Wide or Fullwidth) takes two. The model runs without the terminal libraries, so this is
    the standard library's reading; the pane wraps and paints by Rich's own cell widths."""
    if text.isascii():
        return len(text)
    import unicodedata

    return len(text) + sum(1 for ch in text if unicodedata.east_asian_width(ch) in "WF")


DEFAULT_CAPACITY = 20_000
# A new filter selects from the ring newest-first: the lines for the screen at once (the key's
# answer), the older ones in slices between other events. A slice of the presets costs ~1.5 µs
# a line, so 3,000 lines is ~5 ms: the full 20,000-line ring in one go was ~30 ms behind the key.
SELECT_FIRST_MAX = 3_000
SELECT_SLICE = 3_000


class Matcher(Protocol):
    def matches(self, text: str, rank: str | None = None) -> bool: ...

    def spans(self, text: str) -> list[tuple[int, int]]: ...


class LogModel:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.lines: deque[LogLine] = deque(maxlen=capacity)  # the ring: every line, newest last
        self.shown: deque[LogLine] = deque(maxlen=capacity)  # the lines the filter accepts
        self.matcher: Matcher | None = None
        self.rank: str | None = None
        self.dropped = 0  # lines the supervisor could not deliver (it tells us how many)
        self.total_seen = 0
        self.width = 0  # the widest shown line, in cells, with room for a rank column
        # The oldest `unselected` lines of the ring have not been checked against the filter yet
        # (a filter change selects them in slices, newest first); `selection` counts filter
        # changes, so that a slice scheduled for an older filter stands down.
        self.unselected = 0
        self.selection = 0
        self.search_rx: re.Pattern[str] | None = None
        self.hit: int | None = None  # index into `shown` of the current search match

    # ---- data in ----
    def add(self, lines: Iterable[LogLine], dropped: int = 0) -> int:
        """Append a batch to the ring; the number of them the filter shows."""
        self.dropped += dropped
        added = 0
        ring_before = len(self.lines)
        seen_before = self.total_seen
        for line in lines:
            if has_control(line.text):  # the supervisor cleans; any other feeder is cleaned here
                line = LogLine(line.number, line.rank, clean_text(line.text, keep_newlines=False), line.host)
            self.total_seen += 1
            self.lines.append(line)
            if self.accepts(line):
                self.shown.append(line)
                added += 1
                self.width = max(self.width, line_cells(line.text) + 8)
        if self.unselected:
            # lines that fell off the top of the ring were never selected: nothing left to do there
            fell = ring_before + (self.total_seen - seen_before) - len(self.lines)
            self.unselected = max(0, self.unselected - fell)
        return added

    @property
    def shown_full(self) -> bool:
        return self.shown.maxlen is not None and len(self.shown) == self.shown.maxlen

    def clear(self) -> None:
        self.lines.clear()
        self.shown.clear()
        self.unselected = 0

    # ---- filtering ----
    def accepts(self, line: LogLine) -> bool:
        if self.rank is not None and line.rank != self.rank:
            return False
        return self.matcher is None or self.matcher.matches(line.text, line.rank)

    def set_filter(self, matcher: Matcher | None, rank: str | None, want: int) -> None:
        """Re-select from the ring: the newest `want` matching lines now (checking at most
        SELECT_FIRST_MAX), the older ones left `unselected` for `select_slice`."""
        self.matcher, self.rank = matcher, rank
        self.selection += 1
        self.shown.clear()
        self.unselected = 0
        if matcher is None and rank is None:
            self.shown.extend(self.lines)  # everything: a C-speed copy
            return
        # each line carries its rank: judged on its own, so newest first
        found: list[LogLine] = []
        checked = 0
        for line in reversed(self.lines):
            if checked >= SELECT_FIRST_MAX or len(found) >= want:
                break
            checked += 1
            if self.accepts(line):
                found.append(line)
        found.reverse()
        self.shown.extend(found)
        self.unselected = len(self.lines) - checked

    def select_slice(self, count: int = SELECT_SLICE) -> int:
        """Check the next older `count` unselected lines; the number put above the shown ones."""
        start = max(0, self.unselected - count)
        found = [line for line in islice(self.lines, start, self.unselected) if self.accepts(line)]
        room = (self.shown.maxlen or len(self.lines)) - len(self.shown)
        if len(found) >= room:
            # The selection is full (it may hold lines the ring no longer has): keep the newest.
            found = found[len(found) - room :] if room > 0 else []
            start = 0
        self.unselected = start
        self.shown.extendleft(reversed(found))
        return len(found)

    def finish_selection(self) -> int:
        """Select every line still unselected; the number put above the shown ones."""
        added = 0
        while self.unselected:
            added += self.select_slice(len(self.lines))
        return added

    # ---- search (less-style: find, do not hide) ----
    def set_search(self, pattern: str) -> None:
        """Search for `pattern` (a regex; re.error is the caller's to report, and leaves the search
        as it was). Lower-case patterns ignore case, as `less -i` does."""
        flags = 0 if any(c.isupper() for c in pattern) else re.IGNORECASE
        self.search_rx = re.compile(pattern, flags)
        self.hit = None

    def first_hit(self, bottom: int) -> int:
        """Make `hit` the newest match at or above shown line `bottom` (else the newest match, else
        None), once every line is selected; the number of matching lines."""
        rx = self.search_rx
        if rx is None:
            return 0
        self.finish_selection()
        hits = [i for i, line in enumerate(self.shown) if rx.search(line.text)]
        self.hit = None
        if hits:
            above = [i for i in hits if i <= bottom]
            self.hit = above[-1] if above else hits[-1]
        return len(hits)

    def search_next(self, older: bool, bottom: int | None) -> int | None:
        """The next match older (or newer) than `hit`, or than shown line `bottom` when there is no
        hit (the caller may pass None when there is one); it becomes `hit`. None when there is no
        match that way."""
        if self.search_rx is None:
            return None
        if self.hit is not None:
            start = self.hit
        elif bottom is not None:
            start = bottom + (1 if older else 0)
        else:
            return None
        rng = range(start - 1, -1, -1) if older else range(start + 1, len(self.shown))
        for i in rng:
            if self.search_rx.search(self.shown[i].text):
                self.hit = i
                return i
        return None

    def clear_search(self) -> None:
        self.search_rx, self.hit = None, None


@dataclass(frozen=True)
class LogView:
    """What the log pane shows after a filter change: the matcher (None: every line), the filter
    actually in force, the pane's title, and why the asked one was refused (None: it was not)."""

    matcher: LineFilter | None
    spec: str
    title: str
    error: str | None = None


def log_view(spec: str, rank: str | None, presets: Mapping[str, tuple[str, ...]], probes_hidden: bool) -> LogView:
    """A preset name or a regex, for one rank or all; a regex that does not compile falls back to
    every line, with the compiler's words for the operator."""
    error = None
    try:
        matcher = LineFilter(spec, rank, presets)
    except ValueError as exc:
        error, spec = str(exc), "all"
        matcher = LineFilter("all", rank)
    name = f"[{spec}]" if spec in PRESET_NAMES else f"/{spec}/"
    title = f"Log {name} · {rank or 'all ranks'}"
    if probes_hidden:
        title += " · Cockpit's own requests hidden"
    return LogView(None if matcher.is_all else matcher, spec, title, error)
