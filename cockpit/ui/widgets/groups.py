"""The groups of a prefill/decode deployment on its dashboard (issue 25): one line per group —
its phase, its ranks and its headroom — the group this dashboard follows marked `▶`, `g` to the
other group's dashboard. The widget only renders what the screen hands it (GroupsArrived)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import Static


@dataclass(frozen=True)
class GroupSummary:
    """What one group's line says, from its latest snapshot (None: not read yet)."""

    role: str  # "prefill" | "decode"
    profile: str  # NAME.ROLE
    phase: str  # the run's phase, "unknown" with no run
    ranks: int  # ranks the log has shown
    headroom_gb: float | None  # the least free GiB over the ranks (see headroom_words)
    headroom_after: str  # "capture" (CUDA graphs captured) or "KV pool" (no graphs: a prefill server)
    run_id: str | None = None
    error: str | None = None  # why the group could not be read


def summarise(role: str, profile: str, snap: Any | None, error: str | None = None) -> GroupSummary:
    """A group's summary from its snapshot: phase, ranks, and the least free memory over its ranks
    after CUDA-graph capture, or after the KV pool where no rank captured (a prefill server)."""
    if snap is None:
        return GroupSummary(role, profile, "unknown", 0, None, "capture", None, error)
    ranks = list(snap.state.ranks.values())
    after_capture = [r.avail_after_capture_gb for r in ranks if r.avail_after_capture_gb is not None]
    after_pool = [r.avail_before_capture_gb for r in ranks if r.avail_before_capture_gb is not None]
    if after_capture:
        headroom, after = min(after_capture), "capture"
    elif after_pool:
        headroom, after = min(after_pool), "KV pool"
    else:
        headroom, after = None, "capture"
    run_id = snap.run.id if snap.run is not None else None
    return GroupSummary(role, profile, snap.state.phase, len(ranks), headroom, after, run_id, error)


def headroom_words(s: GroupSummary) -> str:
    if s.headroom_gb is None:
        return "headroom not measured yet" if s.run_id else "headroom unknown: no run"
    return f"headroom {s.headroom_gb:.1f} GiB after {s.headroom_after} (least of {s.ranks} ranks)"


def group_line(s: GroupSummary, current: bool) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("▶ " if current else "  ", style="bold")
    t.append(f"{s.role} group", style="bold" if current else "")
    t.append(f" {s.profile} · ")
    phase = s.phase.upper().replace("_", " ")
    t.append(f"phase {phase}", style="bold red" if s.phase == "crashed" else "bold" if s.phase == "ready" else "")
    if s.error:
        t.append(f" · not read: {s.error}", style="red")
        return t
    if s.run_id is None:
        t.append(" · no run", style="dim")
        return t
    t.append(f" · {s.ranks} ranks · {headroom_words(s)}")
    return t


class GroupsStrip(Static):
    """Both groups, prefill first; `current` is the role this dashboard follows."""

    DEFAULT_CSS = """
    GroupsStrip { height: auto; max-height: 3; padding: 0 1; }
    """

    def __init__(self, current: str, summaries: list[GroupSummary], **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.current = current
        self.summaries = {s.role: s for s in summaries}
        self._text: Text | None = None

    def on_mount(self) -> None:
        self._paint()

    def show(self, summary: GroupSummary) -> None:
        self.summaries[summary.role] = summary
        self._paint()

    def _paint(self) -> None:
        lines = [group_line(s, s.role == self.current) for s in self.summaries.values()]
        lines.append(Text("  g: the other group's dashboard", style="dim"))
        text = Text("\n").join(lines)
        if text == self._text:
            return
        # Only a change in the number of lines can move the panels below: same height, no layout pass.
        layout = self._text is None or len(text.plain.splitlines()) != len(self._text.plain.splitlines())
        self._text = text
        self.update(text, layout=layout)

    def text(self) -> str:
        """The strip as plain text (tests, screen dumps)."""
        return "\n".join(group_line(s, s.role == self.current).plain for s in self.summaries.values())
