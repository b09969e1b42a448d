"""Startup timeline per rank: how long each stage took (init, weights, KV pool, capture, ready)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit.face import RankMemory, RunState, rank_sort_key
from cockpit.ui import format as fmt

# (label, from milestone, to milestone) — milestone names are RankMemory.timeline keys.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("init", "init", "weights_begin"),
    ("weights", "weights_begin", "weights_end"),
    ("KV pool", "weights_end", "kv_pool"),
    ("capture", "capture_begin", "capture_end"),
    ("ready", "capture_end", "ready"),
)


# vLLM's CPU build: no graphs to capture; its warm-up (torch.compile) runs before the KV cache is
# sized (`Warming up model for the compilation…` … `… set (X/Y) GiB for KV cache`).
CPU_STAGES: tuple[tuple[str, str, str], ...] = (
    ("init", "init", "weights_begin"),
    ("weights", "weights_begin", "weights_end"),
    ("warm-up + KV", "weights_end", "kv_pool"),
    ("ready", "kv_pool", "ready"),
)


def stage_durations(rank: RankMemory, stages: tuple[tuple[str, str, str], ...] = STAGES) -> list[tuple[str, float | None, bool]]:
    """(label, seconds or None, started) for each stage of one rank."""
    out = []
    tl = rank.timeline
    for label, a, b in stages:
        start = tl.get(a)
        if label == "capture" and start is None:
            start = tl.get("kv_pool")
        end = tl.get(b)
        out.append((label, fmt.seconds_between(start, end) if end else None, start is not None))
    return out


class StartupTimeline(Widget):
    DEFAULT_CSS = """
    StartupTimeline { height: auto; }
    """
    COMPONENT_CLASSES = {"timeline--done", "timeline--running", "timeline--dim", "timeline--label"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._state: RunState | None = None
        self._key: object = None

    def show(self, state: RunState) -> None:
        key = (state.device, tuple((r.rank, tuple(r.timeline.items())) for r in state.ranks.values()))
        if key == self._key:
            return
        self._key = key
        self._state = state
        self.refresh(layout=True)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"timeline--{name}", partial=True)

    def render(self) -> Text:
        state = self._state
        if state is None or not state.ranks:
            return Text("no startup milestones yet", style=self._style("dim"))
        label_w = max(4, *(len(r) for r in state.ranks))
        lines = []
        for rank in sorted(state.ranks.values(), key=lambda r: rank_sort_key(r.rank)):
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(rank.rank.ljust(label_w), style=self._style("label"))
            for label, secs, started in stage_durations(rank, CPU_STAGES if state.device == "cpu" else STAGES):
                t.append(" ")
                if secs is not None:
                    t.append(f"{label} {fmt.short_duration(secs)}", style=self._style("done"))
                elif started:
                    t.append(f"{label} …", style=self._style("running"))
                else:
                    t.append(f"{label} –", style=self._style("dim"))
            lines.append(t)
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
