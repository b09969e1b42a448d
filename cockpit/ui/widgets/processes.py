"""GPU processes per rank; processes that are not this run's (leftovers from dead runs) called out."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit.supervisor.api import GpuProcess, RunSnapshot
from cockpit.ui import format as fmt


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
        self._key: object = None

    def show(self, snapshot: RunSnapshot) -> None:
        key = (snapshot.gpu_processes, tuple(snapshot.rank_gpu.items()))
        if key == self._key:
            return
        self._key = key
        self._snapshot = snapshot
        self.refresh(layout=True)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"gpuprocs--{name}", partial=True)

    def render(self) -> Text:
        snap = self._snapshot
        if snap is None or not snap.gpu_processes:
            return Text("no GPU processes seen", style=self._style("dim"))
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
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
