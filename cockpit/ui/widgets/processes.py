"""The GPU panel: per GPU, memory, utilisation and power over the last minute (sparklines, like
nvitop), then the processes per rank; processes that are not this run's (leftovers from dead
runs, other users) called out. `K` on the dashboard kills one, after a confirm."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from cockpit.face import GpuProcess, RunSnapshot
from cockpit.ui import format as fmt
from cockpit.ui.gpuhistory import GpuHistory, sparkline
from cockpit.ui.widgets.strips import RowRepaint, StripCache

SPARK = 20  # history cells per measure


# A GPU row is labelled ("GPU7 mem ▃▃▃ 94.2/95.0 GiB  util ▃▃▃  100%  pwr ▃▃▃ 600 W": 48 cells
# besides its sparklines) from LABELLED_MIN cells, its sparklines sized from what FULL_FIXED leaves;
# narrower, the units alone say which is which ("GPU7 ▃ 94.2/95.0 GiB ▃ 100% ▃ 600 W": 35 + sparklines)
LABELLED_MIN = 48 + 3 * 3
FULL_FIXED = 54
COMPACT_FIXED = 38


def rank_of_gpu(snapshot: RunSnapshot, host: str, index: int) -> str | None:
    for rank, (h, i) in snapshot.rank_gpu.items():
        if i == index and (h == host or not h or not host):
            return rank
    return None


class GpuProcesses(RowRepaint, Widget):
    DEFAULT_CSS = """
    GpuProcesses { height: auto; }
    """
    COMPONENT_CLASSES = {"gpuprocs--leftover", "gpuprocs--dim", "gpuprocs--label"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._snapshot: RunSnapshot | None = None
        self._history: GpuHistory | None = None
        self._key: object = None
        self._rows = -1  # rows last laid out
        self._keys_of: object = None
        self._gpu_order: list[tuple[str, int]] = []
        self._procs_of: object = None
        self._sorted: list[GpuProcess] = []
        self._strips = StripCache()  # rows that read as a second ago are not converted again
        self._init_rows()

    def show(self, snapshot: RunSnapshot, history: GpuHistory | None = None, history_changed: bool = False) -> None:
        key = (snapshot.gpu_processes, tuple(snapshot.rank_gpu.items()))
        if key == self._key and not history_changed:
            return
        self._key = key
        self._snapshot = snapshot
        self._history = history
        # Height is one row per GPU plus one per process (or the "none" line). The sparklines
        # move every telemetry sample (1 Hz); a layout pass for that re-arranged the whole
        # dashboard each second (idle CPU at 64 ranks 3.8 -> 3.2 %), so only a new row count asks for one.
        rows = (len(history.traces) if history is not None else 0) + max(1, len(snapshot.gpu_processes))
        if rows != self._rows:
            self.refresh(layout=True)
        else:
            self.repaint_changed_rows(rows)  # a sparkline moved: its row, not the panel
        self._rows = rows

    def _gpu_keys(self) -> list[tuple[str, int]]:
        hist = self._history
        if hist is None or not hist.traces:
            return []
        if self._keys_of is not hist.traces or len(self._gpu_order) != len(hist.traces):
            self._keys_of, self._gpu_order = hist.traces, sorted(hist.traces)
        return self._gpu_order

    def _gpu_line(self, key: tuple[str, int]) -> Text:
        hist = self._history
        assert hist is not None
        host, index = key
        tr = hist.traces[key]
        multi_host = len({h for h, _i in hist.traces}) > 1
        util = tr.util[-1] if tr.util else None
        power = tr.power[-1] if tr.power else None
        used = tr.used[-1] if tr.used else None
        width = self.size.width
        # labelled (`mem ▃ … util ▅ … pwr ▂ …`) where the panel is wide enough for three 3-cell
        # sparklines; else the units alone say which is which (GiB, %, W): a 46-cell column at
        # 120×40 cut the power figure to "pw…"
        labelled = width >= LABELLED_MIN
        # the three sparklines share what the numbers leave of the panel's width (3 to 20 cells
        # labelled, 1 to 20 compact)
        spark = max(3, min(SPARK, (width - FULL_FIXED) // 3)) if labelled else \
            max(1, min(SPARK, (width - COMPACT_FIXED) // 3))
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"GPU{index}" + (f"@{host}" if multi_host else "") + " ", style=self._style("label"))
        t.append(("mem " if labelled else "") + sparkline(tr.used, tr.total_gb, spark))
        t.append(f" {fmt.gb(used, 1)}/{fmt.gb(tr.total_gb, 1)} GiB" + ("  " if labelled else " "))
        t.append(("util " if labelled else "") + sparkline(tr.util, 100.0, spark))
        t.append(" " + ("?" if util is None else f"{util:.0f}%").rjust(4) + ("  " if labelled else " "))
        t.append(("pwr " if labelled else "") + sparkline(tr.power, None, spark))
        t.append(" " + ("?" if power is None else f"{power:.0f} W"))
        return t

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"gpuprocs--{name}", partial=True)

    def _procs(self) -> list[GpuProcess]:
        snap = self._snapshot
        if snap is None:
            return []
        if self._procs_of is not snap.gpu_processes:  # sorted once per snapshot, not once per row
            self._procs_of = snap.gpu_processes
            self._sorted = sorted(snap.gpu_processes, key=lambda p: (p.belongs_to_run, p.host, p.gpu_index, p.pid))
        return self._sorted

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._gpu_keys()) + max(1, len(self._procs()))

    def render_line(self, y: int) -> Strip:
        """One row (the Line API): Textual asks only for the rows on screen, so at 64 GPUs in a box
        that shows a dozen the sparklines of the others are not built each second (they were: the
        rest of the idle TUI's CPU at 64 ranks). Each row goes through the same conversion Textual
        applies to a whole `render()`."""
        width = self.size.width
        row = self._row(y)
        if row is None:
            self.painted(y, None)
            return Strip.blank(width, self.visual_style.rich_style)
        strip = self._strips.strip(self, y, row, width)
        self.painted(y, strip)
        return strip

    def _row(self, y: int) -> Text | None:
        keys = self._gpu_keys()
        if y < len(keys):
            return self._gpu_line(keys[y])
        y -= len(keys)
        snap = self._snapshot
        procs = self._procs()
        if not procs:
            return Text("no GPU processes seen", style=self._style("dim"), no_wrap=True) if y == 0 else None
        if y >= len(procs) or snap is None:
            return None
        p = procs[y]
        rank = rank_of_gpu(snap, p.host, p.gpu_index) or "—"
        t = Text(no_wrap=True, overflow="ellipsis")
        where = f"{rank:<5} GPU {p.gpu_index}"
        if p.host and len({h for h, _ in snap.rank_gpu.values()}) > 1:
            where += f"@{p.host}"
        t.append(where, style=self._style("label"))
        t.append(f"  pid {p.pid:<7} {fmt.gb(p.used_gb, 1)} GiB")
        if not p.belongs_to_run:
            t.append("  ⚠ not this run (leftover?)", style=self._style("leftover"))
        return t
