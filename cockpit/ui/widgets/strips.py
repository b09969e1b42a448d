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
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget


class StripCache:
    """Strips of one widget's rows by row number (a row's entry is replaced when it changes)."""

    __slots__ = ("_joined", "_rows", "_shared")

    def __init__(self) -> None:
        self._rows: dict[object, tuple[object, Strip]] = {}
        self._shared: dict[object, tuple[object, Strip]] = {}
        # by row: its head strip, and the joined rows made from it by the tail strip's identity
        self._joined: dict[int, tuple[Strip, dict[int, tuple[Strip, Strip]]]] = {}

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
            if kept is None or kept[0] is not left:
                kept = self._joined[y] = (left, {})
            # both halves strips this row was joined from before (an idle rank: the same memory, its
            # age "0 s" or "1 s"): the joined row too — joining, merging and offsetting was most of
            # a repaint's cost
            hit = kept[1].get(id(right))
            if hit is not None and hit[0] is right:
                return hit[1]
            # as one conversion would have made it: same-style neighbours merged, each segment's
            # selection offset counted from the row's start
            joined = Strip.join([left, right]).discard_meta().simplify().apply_offsets(0, 0)
            if len(kept[1]) >= 8:  # a stale rank's age counts up: keep the few recent ones
                kept[1].clear()
            kept[1][id(right)] = (right, joined)
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
