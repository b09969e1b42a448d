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

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[int, tuple[object, Strip]] = {}

    def strip(self, widget: Widget, y: int, row: Text, width: int) -> Strip:
        key = (width, widget.visual_style, row.plain, tuple(row.spans), row.style, row.overflow, row.no_wrap)
        hit = self._rows.get(y)
        if hit is not None and hit[0] == key:
            return hit[1]
        strip = Visual.to_strips(widget, visualize(widget, row, markup=False), width, 1, widget.visual_style)[0]
        self._rows[y] = (key, strip)
        return strip

    def clear(self) -> None:
        self._rows.clear()
