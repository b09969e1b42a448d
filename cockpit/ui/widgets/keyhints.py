"""The dashboard's footer: the keys an operator needs most, chosen by the terminal's width.

Textual's Footer lays every shown binding out in order and cuts the last one at the edge (at 80
columns it ended in a stray `Commandst`). Here each hint has a priority: the widest set of whole
hints that fits is shown, in a fixed order, and nothing is ever cut. `?` lists every key.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

# (key, label, priority: lower stays longer). `v` matters only in the compact layout.
HINTS: tuple[tuple[str, str, int], ...] = (
    ("q", "Quit", 0),
    ("?", "Help", 0),
    ("f", "Filter", 2),
    ("/", "Search", 3),
    ("z", "Zoom", 4),
    ("0-8", "Rank", 6),
    ("p", "Pause", 2),
    ("r", "Restart", 1),
    ("s", "Stop", 1),
    ("v", "Panel", 4),
    ("h", "History", 5),
    ("t", "Theme", 8),
    ("^p", "Commands", 7),
    ("g", "Other group", 1),  # a prefill/decode deployment's dashboard only
)
GAP = 2


def choose(width: int, compact: bool, groups: bool = False) -> list[tuple[str, str]]:
    """The hints shown at this width, in display order; `g` only on a group's dashboard."""
    hints = [(k, label, prio) for k, label, prio in HINTS if (compact or k != "v") and (groups or k != "g")]

    def cost(items: list[tuple[str, str, int]]) -> int:
        return sum(len(k) + 1 + len(label) for k, label, _p in items) + GAP * max(0, len(items) - 1) + 1

    keep = list(hints)
    while keep and cost(keep) > width:
        worst = max(p for _k, _l, p in keep)
        # drop the last hint of the lowest priority first
        idx = max(i for i, (_k, _l, p) in enumerate(keep) if p == worst)
        keep.pop(idx)
    return [(k, label) for k, label, _p in keep]


class KeyHints(Widget):
    DEFAULT_CSS = """
    KeyHints { height: 1; dock: bottom; }
    """

    COMPONENT_CLASSES = {"keyhints--key", "keyhints--label"}

    def __init__(self, *, groups: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.groups = groups  # a prefill/decode deployment's dashboard: `g` switches group

    def render(self) -> Text:
        width = self.size.width
        t = Text(no_wrap=True, overflow="crop")
        t.append(" ")
        for i, (key, label) in enumerate(choose(width, width < 120, self.groups)):
            if i:
                t.append(" " * GAP)
            t.append(key, style=self.get_component_rich_style("keyhints--key", partial=True) or Style(bold=True))
            t.append(" " + label, style=self.get_component_rich_style("keyhints--label", partial=True))
        return t
