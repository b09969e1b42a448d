"""The dashboard's top lines: profile, hosts, phase and its age, readiness, flags that differ."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from cockpit.supervisor.api import RunSnapshot
from cockpit.ui import format as fmt


class RunHeader(Widget):
    DEFAULT_CSS = """
    RunHeader { height: auto; }
    """

    COMPONENT_CLASSES = {
        "runheader--title",
        "runheader--phase-ready",
        "runheader--phase-crashed",
        "runheader--phase-busy",
        "runheader--phase-stopped",
        "runheader--diff",
        "runheader--dim",
        "runheader--progress",
    }

    def __init__(self, profile: str, hosts: tuple[str, ...], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._profile = profile
        self._hosts = hosts
        self._snapshot: RunSnapshot | None = None
        self._phase_since: float | None = None
        self._now = 0.0
        self._note = ""

    def show(self, snapshot: RunSnapshot | None, phase_since: float | None, now: float, note: str = "") -> None:
        self._snapshot, self._phase_since, self._now, self._note = snapshot, phase_since, now, note
        self.refresh()  # a fixed two-line height: no layout pass (it cost ~30 ms a snapshot)

    def tick(self, now: float) -> None:
        self._now = now
        self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 2

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"runheader--{name}", partial=True)

    def render(self) -> Text:
        snap = self._snapshot
        sep = (" · ", self._style("dim"))
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("Cockpit", style=self._style("title"))
        line.append(*sep)
        line.append(self._profile, style=self._style("title"))
        line.append(*sep)
        hosts = snap.run.hosts if snap and snap.run and snap.run.hosts else self._hosts
        slurm = snap.slurm if snap is not None else None
        if slurm:  # a Slurm run: the login node, the job and the nodes the allocation gave
            nodes = slurm.get("node_list") or ", ".join(slurm.get("nodes") or []) or "no nodes yet"
            line.append(f"{slurm.get('login')} · job {slurm.get('job_id')} · {nodes}")
        else:
            line.append(", ".join(hosts) or "local")
        line.append(*sep)
        if snap is None:
            line.append("CONNECTING", style=self._style("phase-busy"))
        else:
            word = fmt.phase_word(snap.state.phase, snap.lifecycle)
            key = {"READY": "phase-ready", "CRASHED": "phase-crashed", "STOPPED": "phase-stopped"}.get(word, "phase-busy")
            line.append(f" {word} ", style=self._style(key))
            since = None if self._phase_since is None else self._now - self._phase_since
            line.append(" " + fmt.hms(since))
            for change in snap.flag_diff:
                line.append(*sep)
                line.append(fmt.flag_diff_words(change), style=self._style("diff"))
            if snap.readiness:
                line.append(*sep)
                line.append(f"ready: {snap.readiness}", style=self._style("dim"))
        second = Text(no_wrap=True, overflow="ellipsis")
        if slurm:
            second.append(f"Slurm {slurm.get('state') or 'state unknown'}", style=self._style("dim"))
            if slurm.get("time_left"):
                second.append(f" · {slurm['time_left']} left", style=self._style("dim"))
            second.append(*sep)
        if snap is not None:
            settled = snap.lifecycle == "running" and snap.state.phase == "ready"
            if snap.progress and not settled:
                second.append(snap.progress, style=self._style("progress"))
            elif snap.run is not None:
                r = snap.run
                second.append(f"run {r.id}", style=self._style("dim"))
                if r.pid is not None:
                    second.append(f" · pid {r.pid}", style=self._style("dim"))
                second.append(f" · started {r.started_at}", style=self._style("dim"))
                if snap.health is not None:
                    second.append(f" · /health {snap.health}", style=self._style("dim"))
        if self._note:
            if second.cell_len:
                second.append(*sep)
            second.append(self._note, style=self._style("progress"))
        return Text("\n", no_wrap=True, overflow="ellipsis").join([line, second])
