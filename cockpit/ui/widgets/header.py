"""The dashboard's top lines: profile, hosts, phase and its age, readiness, flags that differ."""

from __future__ import annotations

import re

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from cockpit.face import RunSnapshot, SlurmView
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
        self._painted: Text | None = None  # what the last paint showed

    def show(self, snapshot: RunSnapshot | None, phase_since: float | None, now: float, note: str = "") -> None:
        self._snapshot, self._phase_since, self._now, self._note = snapshot, phase_since, now, note
        self._refresh_if_changed()

    def tick(self, now: float) -> None:
        self._now = now
        self._refresh_if_changed()

    def _refresh_if_changed(self) -> None:
        # The 1 Hz clock and the 1 Hz snapshots both land here: two repaints a second of the same
        # words on an idle server. Building the two lines is cheap; painting them is not. A fixed
        # two-line height: no layout pass either (it cost ~30 ms a snapshot).
        if self._painted is None or self._lines() != self._painted:
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

    def _width(self) -> int:
        return self.size.width or 10_000  # not laid out yet: nothing to fit

    def _join(self, parts: list[tuple[str, Style]]) -> Text:
        sep = (" · ", self._style("dim"))
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, (text, style) in enumerate(parts):
            if i:
                out.append(*sep)
            out.append(text, style=style)
        return out

    def _first_line(self, snap: RunSnapshot | None) -> Text:
        """Profile, hosts, phase and its clock, then what fits of: the flags this run changed, the
        uptime, how readiness is read. The rule when the line is too narrow (80 columns): first the
        readiness source goes, then each change loses its `(profile …)`, then the uptime, then the
        last changes give way to `+N more (i)`; `i` lists them all. The phase clock always stays."""
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append("Cockpit", style=self._style("title"))
        head.append(" · ", style=self._style("dim"))
        head.append(self._profile, style=self._style("title"))
        head.append(" · ", style=self._style("dim"))
        hosts = snap.run.hosts if snap and snap.run and snap.run.hosts else self._hosts
        slurm = snap.target if snap is not None and isinstance(snap.target, SlurmView) else None
        if slurm:  # a Slurm run: the login node, the job and the nodes the allocation gave
            nodes = slurm.node_list or ", ".join(slurm.nodes) or "no nodes yet"
            head.append(f"{slurm.login} · job {slurm.job_id} · {nodes}")
        else:
            head.append(", ".join(hosts) or "local")
        head.append(" · ", style=self._style("dim"))
        if snap is None:
            head.append("CONNECTING", style=self._style("phase-busy"))
            return head
        word = fmt.phase_word(snap.state.phase, snap.lifecycle)
        key = {"READY": "phase-ready", "CRASHED": "phase-crashed", "HUNG": "phase-crashed", "STOPPED": "phase-stopped"}.get(word, "phase-busy")
        head.append(f" {word} ", style=self._style(key))
        since = None if self._phase_since is None else self._now - self._phase_since
        head.append(" " + fmt.hms(since))
        uptime = fmt.iso_age(snap.run.started_at, self._now) if snap.run else None
        up = [(f"up {fmt.hms(uptime)}", self._style("dim"))] if uptime is not None else []
        ready = [(f"ready: {snap.readiness}", self._style("dim"))] if snap.readiness else []
        diff = list(snap.flag_diff)
        full = [(fmt.flag_diff_words(c), self._style("diff")) for c in diff]
        short = [(fmt.flag_diff_words(c, short=True), self._style("diff")) for c in diff]
        tries: list[list[tuple[str, Style]]] = [
            [*up, *full, *ready], [*up, *full], [*up, *short], short,
        ]
        for keep in range(len(diff) - 1, -1, -1):
            tries.append([*short[:keep], (f"+{len(diff) - keep} more (i)", self._style("diff"))])
        width = self._width()
        for tail in tries:
            line = head.copy()
            if tail:
                line.append(" · ", style=self._style("dim"))
                line.append_text(self._join(tail))
            if line.cell_len <= width:
                return line
        return line

    def _second_line(self, snap: RunSnapshot | None) -> Text:
        """Run id and pid from the first snapshot on (not "starting" for 20 s), then what the
        supervisor is doing, or /health once settled (marked stale once the run has ended: the
        probe stops with the server). Too narrow: the engine's version goes first (line 1 of the
        dialogs and `status` say it too), then the pid, then the exit in fewer words."""
        slurm = snap.target if snap is not None and isinstance(snap.target, SlurmView) else None
        parts: list[tuple[str, Style]] = []
        pid_at: int | None = None
        engine_at: int | None = None
        progress_at: int | None = None
        # While a Slurm job waits, the supervisor's progress is Slurm's own reason ("queued:
        # Resources"): it reads with the state it explains, before the run id (at 80 columns the
        # line's tail is what gets cut).
        queued_words = bool(slurm) and snap is not None and snap.lifecycle == "launching" and bool(snap.progress)
        if slurm:
            slurm_words = f"Slurm {slurm.state or 'state unknown'}"
            if slurm.time_left:
                slurm_words += f" · {slurm.time_left} left"
            parts.append((slurm_words, self._style("dim")))
            if queued_words and snap is not None:
                parts.append((snap.progress, self._style("progress")))
        kind: str | None = None
        if snap is not None:
            settled = snap.lifecycle == "running" and snap.state.phase == "ready"
            if snap.run is not None:
                r = snap.run
                parts.append((f"run {r.id}", self._style("dim")))
                if r.pid is not None:
                    pid_at = len(parts)
                    parts.append((f"pid {r.pid}", self._style("dim")))
                engine = self._engine_words(snap)
                if engine:
                    engine_at = len(parts)
                    parts.append((engine, self._style("dim")))
            if queued_words:
                pass  # said above, next to Slurm's state
            elif snap.progress and not settled:
                kind = snap.state.crash.kind if snap.state.crash is not None else None
                progress_at = len(parts)
                words = fmt.progress_words(snap.progress, kind)
                if snap.state.device == "cpu":  # a CPU engine holds no GPU memory to wait for
                    words = words.replace("the run's GPU memory to be released", "the run's processes to exit")
                parts.append((words, self._style("progress")))
            elif snap.run is not None and snap.health is not None:
                ended = snap.state.phase == "crashed" or snap.lifecycle not in ("running", "launching")
                health = f"last /health {snap.health} (stale: the run ended)" if ended else f"/health {snap.health}"
                parts.append((health, self._style("dim")))
        # a note that repeats the supervisor's own words ("stopped · stopped") is said once
        if self._note and not any(self._note == text or self._note in text for text, _ in parts):
            parts.append((self._note, self._style("progress")))
        line = self._join(parts)
        for drop in (engine_at, pid_at):  # engine_at > pid_at: deleting it moves no earlier index
            if line.cell_len > self._width() and drop is not None:
                del parts[drop]
                if progress_at is not None:
                    progress_at -= 1
                line = self._join(parts)
        if line.cell_len > self._width() and progress_at is not None and snap is not None:
            parts[progress_at] = (fmt.progress_words(snap.progress, kind, short=True), self._style("progress"))
            line = self._join(parts)
        if line.cell_len > self._width() and progress_at is not None and snap is not None:
            # "the server on gpu-box-1 exited: …" → "exited: …": the host is on line 1 already
            words = fmt.progress_words(snap.progress, kind, short=True)
            parts[progress_at] = (re.sub(r"^the server on \S+ (?=exited)", "", words), self._style("progress"))
            line = self._join(parts)
        return line

    def _lines(self) -> Text:
        snap = self._snapshot
        return Text("\n", no_wrap=True, overflow="ellipsis").join([self._first_line(snap), self._second_line(snap)])

    def render(self) -> Text:
        self._painted = self._lines()
        return self._painted
