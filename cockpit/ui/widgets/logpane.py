"""The live log: its model's lines on screen, rendering only the lines in view.

The ring buffer, the filtered selection and the search are `ui/logmodel.py`'s `LogModel` (no
Textual there); this widget scrolls, pauses, wraps and paints, and runs a new filter's selection of
older lines in slices between other events. Scrolling up pauses following; new lines are counted,
not shown, until the operator returns to the end.

Reading aids: `←`/`→` scroll sideways (long lines are not cut, the view moves), `wrap` folds each
line into screen rows instead, and a search (less-style: newest match first, then older/newer)
jumps to matching lines in their context, unlike a filter, which hides the others.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

from rich.cells import get_character_cell_size
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from cockpit.face import GENERIC_ERROR_WORDS, LogLine
from cockpit.ui.logmodel import DEFAULT_CAPACITY, SELECT_SLICE, LogModel, Matcher

# What the "errors" preset looks for is also what the pane paints as an error line: the screen sets
# the server's own words (`error_words`, from the backend); these serve until it does.
ERROR_WORDS = GENERIC_ERROR_WORDS


def rank_column(line: LogLine) -> int:
    """Cells the pane adds before a line: a rank column when the text does not name its rank."""
    return 5 if line.rank and line.text.find(line.rank, 0, 48) < 0 else 0


def row_spans(line: LogLine, width: int) -> list[tuple[int, int]]:
    """The rows of one line wrapped at `width` cells, as (first cell, end cell) of what the pane
    paints (the rank column included): every row at most `width` cells, and a wide character is
    never cut in two (it starts the next row instead)."""
    prefix = rank_column(line)
    if line.text.isascii():  # one cell per character: cut every `width`
        total = prefix + len(line.text)
        return [(k * width, min(total, (k + 1) * width)) for k in range(max(1, math.ceil(total / width)))]
    spans: list[tuple[int, int]] = []
    start = used = 0
    for w in itertools.chain(itertools.repeat(1, prefix), map(get_character_cell_size, line.text)):
        if used + w > width and used > 0:
            spans.append((start, start + used))
            start, used = start + used, 0
        used += w
    spans.append((start, start + used))
    return spans


class LogPane(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogPane { height: 1fr; }
    """

    BINDINGS = [
        Binding("up", "scroll_lines(-1)", "Scroll up", show=False, id="log.up"),
        Binding("down", "scroll_lines(1)", "Scroll down", show=False, id="log.down"),
        Binding("pageup", "scroll_pages(-1)", "Page up", show=False, id="log.pageup"),
        Binding("pagedown", "scroll_pages(1)", "Page down", show=False, id="log.pagedown"),
        Binding("home", "log_home", "Oldest line", show=False, id="log.home"),
        Binding("end", "follow", "Follow", show=False, id="log.end"),
        Binding("enter", "screen.toggle_zoom", "Maximise the log", show=False, id="log.zoom"),
        Binding("left", "scroll_sideways(-8)", "Scroll left", show=False, id="log.left"),
        Binding("right", "scroll_sideways(8)", "Scroll right", show=False, id="log.right"),
    ]

    COMPONENT_CLASSES = {"logpane--rank", "logpane--match", "logpane--error", "logpane--dim", "logpane--marker"}
    error_words: tuple[str, ...] = ERROR_WORDS

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = LogModel(capacity)
        self._shown = self.model.shown  # the model's selection (one deque for its life), read to paint
        self.paused = False
        self.new_lines = 0  # lines that matched while paused
        self._title = "Log"
        self.wrap = False
        self._rows_key: tuple[object, ...] = ()
        self._rows: list[tuple[int, int, int]] = []  # wrapped: (index into _shown, first cell, end cell)

    @property
    def dropped(self) -> int:
        """Lines the supervisor could not deliver (it tells us how many)."""
        return self.model.dropped

    @property
    def total_seen(self) -> int:
        return self.model.total_seen

    @property
    def search_rx(self) -> re.Pattern[str] | None:
        return self.model.search_rx

    @property
    def hit(self) -> int | None:
        """Index into the shown lines of the current search match."""
        return self.model.hit

    # ---- data in ----
    def add_lines(self, lines: Iterable[LogLine], dropped: int = 0) -> None:
        full = self.model.shown_full
        added = self.model.add(lines, dropped)
        if not added and not dropped:
            return
        if self.paused:
            self.new_lines += added
            if full and added:
                # Old lines fell off the top: keep the operator's view on the same lines.
                self.scroll_to(y=max(0, self.scroll_y - added), animate=False, immediate=True)
        self._resize()
        if not self.paused:
            self._follow_end()
        self.refresh()
        self._update_subtitle()

    def _follow_end(self) -> None:
        self.scroll_end(animate=False, immediate=True)
        # The new virtual size is applied on the next refresh: follow again once it is.
        self.call_after_refresh(self._scroll_end_if_following)

    def _scroll_end_if_following(self) -> None:
        if not self.paused:
            self.scroll_end(animate=False, immediate=True)

    def set_filter(self, matcher: Matcher | None, rank: str | None, title: str | Text) -> None:
        """Re-select from the ring buffer: the filter applies to the past as well.

        The screen's worth of newest matching lines is selected now; older lines follow in slices
        of SELECT_SLICE between other events (see `_select_older`), so the key is answered at once.
        """
        self.model.set_filter(matcher, rank, want=max(self.size.height, 1) * 2)
        if self.model.unselected:
            self.call_later(self._select_older, self.model.selection)
        self._title = title.plain if isinstance(title, Text) else title
        self.new_lines = 0
        self._resize()
        if not self.paused:
            self._follow_end()
        self.refresh()
        self._update_subtitle()

    def _select_older(self, selection: int) -> None:
        """One slice of a pending selection: the next older SELECT_SLICE lines, then yield."""
        if selection != self.model.selection or not self.model.unselected:
            return
        self._show_selected(self.model.select_slice(SELECT_SLICE))
        if self.model.unselected:
            self.call_later(self._select_older, selection)

    def _show_selected(self, found: int) -> None:
        """`found` lines were put above the shown ones: resize, and keep a paused view in place."""
        if not found:
            if not self.model.unselected:
                self._update_subtitle()
            return
        self._resize()
        if self.paused:
            # Lines came in above the view: keep the operator's view on the same lines.
            self.scroll_to(y=self.scroll_y + found, animate=False, immediate=True)
        else:
            self._follow_end()
        self.refresh()
        self._update_subtitle()

    def _finish_selection(self) -> None:
        if self.model.unselected:
            self._show_selected(self.model.finish_selection())

    def clear(self) -> None:
        self.model.clear()
        self.new_lines = 0
        self._resize()
        self.refresh()

    @property
    def all_lines(self) -> list[LogLine]:
        """The ring buffer, unfiltered (the crash dialog reads the log's last lines from it)."""
        return list(self.model.lines)

    @property
    def shown_lines(self) -> list[LogLine]:
        self._finish_selection()
        return list(self._shown)

    def _resize(self) -> None:
        box = self.scrollable_content_region.size
        if self.wrap:
            new = Size(box.width, len(self._wrapped_rows()))
        else:
            new = Size(max(self.model.width, box.width), len(self._shown))
        old = self.virtual_size
        if new == old:
            return
        if old.area and (old.height > box.height) == (new.height > box.height) and (old.width > box.width) == (new.width > box.width):
            # The pane's box and its scrollbars stay as they are: only the scroll range moves.
            # Assigning the reactive lays out the whole screen (virtual_size is a layout reactive),
            # and a running server adds lines all the time (its access line for each /health
            # probe and /metrics scrape; thousands a second under load): one layout pass of the
            # whole dashboard per batch of lines, for nothing (docs/PERFORMANCE.md).
            self.set_reactive(LogPane.virtual_size, new)
            self._scroll_update(new)
            return
        self.virtual_size = new

    # ---- wrapping ----
    def _wrapped_rows(self) -> list[tuple[int, int, int]]:
        """Each shown line as screen rows of the pane's width, (line index, first cell, end cell)
        (rebuilt when the lines or the width change: at 20,000 lines ~10 ms, once per batch, only
        while wrapping)."""
        width = max(1, self.scrollable_content_region.width)
        shown = self._shown
        key = (len(shown), id(shown[0]) if shown else None, id(shown[-1]) if shown else None, width)
        if key != self._rows_key:
            rows: list[tuple[int, int, int]] = []
            for i, line in enumerate(shown):
                rows.extend((i, a, b) for a, b in row_spans(line, width))
            self._rows, self._rows_key = rows, key
        return self._rows

    def _row_of(self, index: int) -> int:
        """The first screen row of shown line `index`."""
        if not self.wrap:
            return index
        for row, (i, _start, _end) in enumerate(self._wrapped_rows()):
            if i == index:
                return row
        return 0

    def toggle_wrap(self) -> None:
        y = int(self.scroll_y)
        rows = self._wrapped_rows() if self.wrap else []
        top = rows[min(y, len(rows) - 1)][0] if rows else y
        self.wrap = not self.wrap
        self._rows_key = ()
        self._resize()
        self.refresh()
        if self.paused:
            self.call_after_refresh(lambda: self.scroll_to(y=self._row_of(min(top, max(0, len(self._shown) - 1))),
                                                           animate=False, immediate=True))
        else:
            self.call_after_refresh(self._scroll_end_if_following)
        self._update_subtitle()

    def action_scroll_sideways(self, n: int) -> None:
        if not self.wrap:
            self.scroll_to(x=max(0, self.scroll_x + n), animate=False)

    # ---- search (less-style: jump, do not hide) ----
    def search(self, pattern: str) -> int:
        """Jump to the newest match at or above the bottom of the view; the number of matching
        lines (0: nothing moves). Lower-case patterns ignore case, as `less -i` does."""
        self.model.set_search(pattern)  # re.error is the caller's to report
        self._finish_selection()
        count = self.model.first_hit(self._bottom_index())
        if self.model.hit is not None:
            self._jump(self.model.hit)
        self._update_subtitle()
        self.refresh()
        return count

    def search_next(self, older: bool) -> bool:
        """`n` (older) / `N` (newer) from the current match; False when there is none that way."""
        if self.model.search_rx is None:
            return False
        index = self.model.search_next(older, None if self.model.hit is not None else self._bottom_index())
        if index is None:
            return False
        self._jump(index)
        return True

    def clear_search(self) -> None:
        self.model.clear_search()
        self._update_subtitle()
        self.refresh()

    def _bottom_index(self) -> int:
        row = int(self.scroll_y) + max(1, self.size.height) - 1
        if self.wrap:
            rows = self._wrapped_rows()
            return rows[min(row, len(rows) - 1)][0] if rows else 0
        return min(row, len(self._shown) - 1)

    def _jump(self, index: int) -> None:
        self.pause()
        # the match a third from the top: context above and below it, as less shows it
        self.scroll_to(y=max(0, self._row_of(index) - max(1, self.size.height) // 3), animate=False, immediate=True)
        self.refresh()

    def on_resize(self) -> None:
        # A panel switch or a terminal resize changes the height: stay at the end when following.
        self._resize()
        if not self.paused:
            self.call_after_refresh(self._scroll_end_if_following)

    # ---- following / pausing ----
    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self._update_subtitle()

    def action_follow(self) -> None:
        self.paused = False
        self.new_lines = 0
        self.scroll_end(animate=False, immediate=True)
        self._update_subtitle()

    def action_toggle_pause(self) -> None:
        if self.paused:
            self.action_follow()
        else:
            self.pause()

    def action_scroll_lines(self, n: int) -> None:
        if n < 0:
            self.pause()
        self.scroll_to(y=self.scroll_y + n, animate=False)
        self._resume_at_end()

    def action_scroll_pages(self, n: int) -> None:
        if n < 0:
            self.pause()
        self.scroll_to(y=self.scroll_y + n * max(1, self.size.height - 1), animate=False)
        self._resume_at_end()

    def action_log_home(self) -> None:
        self.pause()
        self.scroll_home(animate=False)

    def _on_mouse_scroll_up(self, event: object) -> None:
        self.pause()

    def _resume_at_end(self) -> None:
        if self.paused and self.scroll_y >= self.max_scroll_y and self.new_lines == 0:
            # Scrolled back to the bottom by hand: follow again.
            self.paused = False
            self._update_subtitle()

    def _update_subtitle(self) -> None:
        parts = []
        if self.paused:
            parts.append(f"paused · {self.new_lines} new lines · End to follow" if self.new_lines else "paused · End to follow")
        if self.dropped:
            parts.append(f"{self.dropped} lines dropped")
        if self.search_rx is not None:
            parts.append(f"search /{self.search_rx.pattern}/ n older · N newer")
        if self.wrap:
            parts.append("wrapped")
        parts.append(f"{len(self._shown)}/{len(self.model.lines)} lines")
        # Everything goes in the top border: the compact layout has no bottom border to spare.
        title = Text(self._title + " · ")
        status = Text(" · ".join(parts), style=self._style("marker") if self.paused else "")
        self.border_title = title + status

    # ---- painting: only the visible lines ----
    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"logpane--{name}", partial=True)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if self.wrap:
            rows = self._wrapped_rows()
            if not 0 <= scroll_y + y < len(rows):
                return Strip.blank(width, base)
            index, scroll_x, row_end = rows[scroll_y + y]
        else:
            index, row_end = scroll_y + y, scroll_x + width
        if index >= len(self._shown) or index < 0:
            return Strip.blank(width, base)
        line = self._shown[index]
        text = Text(no_wrap=True, end="")
        body = Text(line.text)
        if line.rank:
            # SGLang's prefix already names the rank ("[ts TP3]"): colour it there, else add it.
            at = line.text.find(line.rank, 0, 48)
            if at >= 0:
                body.stylize(self._style("rank"), at, at + len(line.rank))
            else:
                text.append(f"{line.rank:<4} ", style=self._style("rank"))
        if any(w in line.text for w in self.error_words):
            body.stylize(self._style("error"))
        if self.model.matcher is not None:
            for a, b in self.model.matcher.spans(line.text):
                body.stylize(self._style("match"), a, b)
        if self.search_rx is not None:
            current = index == self.hit
            for m in self.search_rx.finditer(line.text):
                if m.end() > m.start():
                    body.stylize(self._style("marker" if current else "match"), m.start(), m.end())
        text.append_text(body)
        segments = list(text.render(self.app.console))
        strip = Strip(segments).crop(scroll_x, row_end)  # wrapped: the row's cells, never half a wide character
        return strip.extend_cell_length(width, base).apply_style(base)
