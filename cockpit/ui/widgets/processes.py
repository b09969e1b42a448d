"""The GPU panel: per GPU, memory, utilisation and power over the last minute (sparklines, like
nvitop), then the processes per rank; processes that are not this run's (leftovers from dead
runs, other users) called out. `K` on the dashboard kills one, after a confirm."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit.supervisor.api import GpuProcess, RunSnapshot
from cockpit.ui import format as fmt
from cockpit.ui.gpuhistory import GpuHistory, sparkline

SPARK = 20  # history cells per measure


def rank_of_gpu(snapshot: RunSnapshot, host: str, index: int) -> str | None:
    for rank, (h, i) in snapshot.rank_gpu.items():
        if i == index and (h == host or not h or not host):
            return rank
    return None


class GpuProcesses(Widget):
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
        self.refresh(layout=rows != self._rows)
        self._rows = rows

    def _gpu_lines(self) -> list[Text]:
        hist = self._history
        if hist is None or not hist.traces:
            return []
        hosts = {h for h, _i in hist.traces}
        # the three sparklines share what the numbers leave of the panel's width (3 to 20 cells)
        spark = max(3, min(SPARK, (self.size.width - 54) // 3))
        lines = []
        for (host, index), tr in sorted(hist.traces.items()):
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f"GPU{index}" + (f"@{host}" if len(hosts) > 1 else "") + " ", style=self._style("label"))
            used = tr.used[-1] if tr.used else None
            t.append("mem " + sparkline(tr.used, tr.total_gb, spark))
            t.append(f" {fmt.gb(used, 1)}/{fmt.gb(tr.total_gb, 1)} GiB  ")
            util = tr.util[-1] if tr.util else None
            t.append("util " + sparkline(tr.util, 100.0, spark))
            t.append(" " + ("?" if util is None else f"{util:.0f}%").rjust(4) + "  ")
            power = tr.power[-1] if tr.power else None
            t.append("pwr " + sparkline(tr.power, None, spark))
            t.append(" " + ("?" if power is None else f"{power:.0f} W"))
            lines.append(t)
        return lines

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"gpuprocs--{name}", partial=True)

    def render(self) -> Text:
        snap = self._snapshot
        gpu_lines = self._gpu_lines()
        if snap is None or not snap.gpu_processes:
            return Text("\n", no_wrap=True).join([*gpu_lines, Text("no GPU processes seen", style=self._style("dim"))])
        procs: list[GpuProcess] = sorted(snap.gpu_processes, key=lambda p: (p.belongs_to_run, p.host, p.gpu_index, p.pid))
        lines = []
        for p in procs:
            rank = rank_of_gpu(snap, p.host, p.gpu_index) or "—"
            t = Text(no_wrap=True, overflow="ellipsis")
            where = f"{rank:<5} GPU {p.gpu_index}"
            if p.host and len({h for h, _ in snap.rank_gpu.values()}) > 1:
                where += f"@{p.host}"
            t.append(where, style=self._style("label"))
            t.append(f"  pid {p.pid:<7} {fmt.gb(p.used_gb, 1)} GiB")
            if not p.belongs_to_run:
                t.append("  ⚠ not this run (leftover?)", style=self._style("leftover"))
            lines.append(t)
        return Text("\n", no_wrap=True, overflow="ellipsis").join([*gpu_lines, *lines])
