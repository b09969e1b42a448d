"""The dashboard's top lines: profile, hosts, phase and its age, readiness, flags that differ."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from cockpit.supervisor.api import RunSnapshot
from cockpit.ui import format as fmt


class RunHeader(Widget):
    # Textual lays out a rendered Text by these rules, not by the Text's own no_wrap: without
    # them an 80-column first line wraps and pushes line 2 (Slurm's state, the run id) out of
    # the fixed two-line height
    DEFAULT_CSS = """
    RunHeader { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
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

    def __init__(self, profile: str, hosts: tuple[str, ...], *, engine: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self._profile = profile
        self._engine = engine  # the profile's `backend version` ("vllm 0.32.0"), until the log says its own
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

    def _engine_words(self, snap: RunSnapshot | None) -> str:
        """The engine and its version: the log's when it names one (`vllm-0.32.0`), else the
        profile's pinned `version:`; never `vllm-unknown`."""
        found = snap.state.format if snap is not None else None
        if found and not found.endswith("-unknown") and "-" in found:
            name, _, version = found.partition("-")
            if version[:1].isdigit():
                return f"{name} {version}"
        return self._engine

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
            key = {"READY": "phase-ready", "CRASHED": "phase-crashed", "HUNG": "phase-crashed", "STOPPED": "phase-stopped"}.get(word, "phase-busy")
            line.append(f" {word} ", style=self._style(key))
            since = None if self._phase_since is None else self._now - self._phase_since
            line.append(" " + fmt.hms(since))
            uptime = fmt.iso_age(snap.run.started_at, self._now) if snap.run else None
            if uptime is not None:
                line.append(f" · up {fmt.hms(uptime)}", style=self._style("dim"))
            for change in snap.flag_diff:
                line.append(*sep)
                line.append(fmt.flag_diff_words(change), style=self._style("diff"))
            if snap.readiness:
                line.append(*sep)
                line.append(f"ready: {snap.readiness}", style=self._style("dim"))
        # line 2: run id and pid from the first snapshot on (not "starting" for 20 s), then what
        # the supervisor is doing, or /health once settled
        second = Text(no_wrap=True, overflow="ellipsis")
        parts: list[tuple[str, Style]] = []
        # While a Slurm job waits, the supervisor's progress is Slurm's own reason ("queued:
        # Resources"): it reads with the state it explains, before the run id (at 80 columns the
        # line's tail is what gets cut).
        queued_words = bool(slurm) and snap is not None and snap.lifecycle == "launching" and bool(snap.progress)
        if slurm:
            slurm_words = f"Slurm {slurm.get('state') or 'state unknown'}"
            if slurm.get("time_left"):
                slurm_words += f" · {slurm['time_left']} left"
            parts.append((slurm_words, self._style("dim")))
            if queued_words and snap is not None:
                parts.append((snap.progress, self._style("progress")))
        if snap is not None:
            settled = snap.lifecycle == "running" and snap.state.phase == "ready"
            if snap.run is not None:
                r = snap.run
                engine = self._engine_words(snap)
                parts.append((f"run {r.id}" + (f" · pid {r.pid}" if r.pid is not None else "")
                              + (f" · {engine}" if engine else ""), self._style("dim")))
            if queued_words:
                pass  # said above, next to Slurm's state
            elif snap.progress and not settled:
                kind = snap.state.crash.kind if snap.state.crash is not None else None
                words = fmt.progress_words(snap.progress, kind)
                if snap.state.device == "cpu":  # a CPU engine holds no GPU memory to wait for
                    words = words.replace("the run's GPU memory to be released", "the run's processes to exit")
                parts.append((words, self._style("progress")))
            elif snap.run is not None and snap.health is not None:
                parts.append((f"/health {snap.health}", self._style("dim")))
        # a note that repeats the supervisor's own words ("stopped · stopped") is said once
        if self._note and not any(self._note == text or self._note in text for text, _ in parts):
            parts.append((self._note, self._style("progress")))
        for i, (text, style) in enumerate(parts):
            if i:
                second.append(*sep)
            second.append(text, style=style)
        return Text("\n", no_wrap=True, overflow="ellipsis").join([line, second])
