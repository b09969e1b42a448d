"""One row of a Line-API widget as a Strip, converted once per distinct content.

The rank bars and the GPU panel rebuild their visible rows on every telemetry sample (1 Hz), and
Textual's Text -> Content -> Strip conversion is most of a row's cost (~0.5 ms). On an idle server
almost every row reads the same as a second ago (same memory, 0 % utilisation, the sample 0 s old),
so the strip of a row is kept with what it was made from (the text, its styles, the width and the
widget's own style) and reused while they are equal. The conversion is the one `render()` uses, so a
row looks exactly as before.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget


class StripCache:
    """Strips of one widget's rows by row number (a row's entry is replaced when it changes)."""

    __slots__ = ("_joined", "_rows", "_shared")

    def __init__(self) -> None:
        self._rows: dict[object, tuple[object, Strip]] = {}
        self._shared: dict[object, tuple[object, Strip]] = {}
        # by row: the head and tail strips it was last joined from, and the joined strip
        self._joined: dict[int, tuple[Strip, Strip, Strip]] = {}

    def strip(self, widget: Widget, y: int, row: Text, width: int, tail: int = 0) -> Strip:
        """Row `y` as a strip `width` cells wide. `tail`: that many characters at the row's end change
        often (a sample's age): they are converted on their own, so the rest is still reused."""
        if 0 < tail < len(row.plain):
            head, end = row.divide([len(row.plain) - tail])
            head_w = min(width, head.cell_len)
            left = self._get((y, 0), widget, head, head_w)
            if width <= head_w:
                return left
            right = self._get(None, widget, end, width - head_w)
            kept = self._joined.get(y)
            # both halves the very strips of the last join (an idle rank: the same memory, its age
            # "<2s"): the joined row too — and the same strip object, which is how RowRepaint
            # sees that the row has not changed
            if kept is not None and kept[0] is left and kept[1] is right:
                return kept[2]
            # as one conversion would have made it: same-style neighbours merged, each segment's
            # selection offset counted from the row's start
            joined = Strip.join([left, right]).discard_meta().simplify().apply_offsets(0, 0)
            self._joined[y] = (left, right, joined)
            return joined
        return self._get(y, widget, row, width)

    def _get(self, slot: object, widget: Widget, row: Text, width: int) -> Strip:
        """A row's strip, kept in its slot; `slot` None: kept by content (a tail reads the same on
        every row: one telemetry sample, one age)."""
        key = (width, widget.visual_style, row.plain, tuple(row.spans), row.style, row.overflow, row.no_wrap)
        hit = self._rows.get(slot) if slot is not None else self._shared.get(key)
        if hit is not None and hit[0] == key:
            return hit[1]
        strip = Visual.to_strips(widget, visualize(widget, row, markup=False), width, 1, widget.visual_style)[0]
        if slot is not None:
            self._rows[slot] = (key, strip)
        else:
            if len(self._shared) >= 256:
                self._shared.clear()
            self._shared[key] = (key, strip)
        return strip

    def clear(self) -> None:
        self._rows.clear()
        self._shared.clear()
        self._joined.clear()


class RowRepaint:
    """For a Line-API widget whose rows change little between snapshots: `painted(y, strip)` in
    its render_line records what Textual was handed; `repaint_changed_rows(rows)` then repaints
    only the rows on screen whose strip is no longer that one (the widget's render_line builds
    them again, cheaply when they read the same: StripCache), and marks the rows off screen, which
    costs nothing until they are scrolled to. A whole-widget refresh instead made Textual render
    and composite every visible row each second — most of the idle dashboard's CPU at 64 ranks."""

    def _init_rows(self) -> None:
        self._painted: dict[int, Strip] = {}  # by row: the strip last handed to Textual

    def painted(self, y: int, strip: Strip | None) -> None:
        if strip is None:
            self._painted.pop(y, None)
        else:
            self._painted[y] = strip

    def repaint_changed_rows(self, rows: int) -> None:
        widget = self
        assert isinstance(widget, Widget)
        seen = self._rows_on_screen(rows)
        if seen is None or not self._painted:
            widget.refresh()
            return
        first, end = seen
        width = widget.size.width
        painted = self._painted
        # every row built before the first refresh: a refresh empties the widget's cache of its
        # component styles, and rebuilding them for each row was most of the cost of a snapshot
        changed = [y for y in range(first, end) if (p := painted.get(y)) is None or widget.render_line(y) is not p]
        for y in changed:
            widget.refresh(Region(0, y, width, 1))
        if first > 0:
            widget.refresh(Region(0, 0, width, first))
        if end < rows:
            widget.refresh(Region(0, end, width, rows - end))

    def _rows_on_screen(self, rows: int) -> tuple[int, int] | None:
        """The rows [first, end) the screen shows now (the box scrolls); None: not on the screen's map."""
        widget = self
        assert isinstance(widget, Widget)
        try:
            where = widget.screen.find_widget(widget)
        except Exception:  # not mounted, hidden (the log maximised), or between layouts: paint it all
            return None
        top = where.region.y + widget.content_offset.y
        visible = where.visible_region
        if not visible:
            return (0, 0)
        return (max(0, min(rows, visible.y - top)), max(0, min(rows, visible.bottom - top)))
