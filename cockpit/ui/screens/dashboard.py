"""The dashboard of one profile's run: header, rank bars, advice, plots, timeline, processes, log.

State lives here, in the handlers: the run control (`ui/runcontrol.py`: the Supervisor's life,
launch/attach, follow, restart, stop) runs in workers, and its callbacks post SnapshotArrived,
LogsArrived and the run's news (RunStarted, ActionDone, …) as messages; handlers keep the latest
snapshot and hand each widget what it draws. Nothing here reads files, sockets or processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Container, Vertical, VerticalScroll
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Input, Static
from textual.worker import Worker, WorkerState

from cockpit.face import (
    GENERIC_ERROR_WORDS,
    PRESET_NAMES,
    Finding,
    FlagChange,
    LineFilter,
    LogBatch,
    Profile,
    ProfileError,
    RunSnapshot,
    get_backend,
    load_profile,
    plural,
)
from cockpit.ui import format as fmt
from cockpit.ui.autocontrol import AutoControl, AutoHooks
from cockpit.ui.gpuhistory import GpuHistory
from cockpit.ui.groupcontrol import GroupControl
from cockpit.ui.keys import DASHBOARD_BINDINGS
from cockpit.ui.logexport import LogExport
from cockpit.ui.logmodel import log_view
from cockpit.ui.messages import (
    ActionDone,
    GroupRead,
    LeftoversFound,
    LogsArrived,
    PreflightRefused,
    RunStarted,
    SnapshotArrived,
    SupervisorFailed,
    message_for,
)
from cockpit.ui.runcontrol import RunControl, RunEvent
from cockpit.ui.screens.crash import CrashScreen, RestartChoice
from cockpit.ui.screens.dialogs import ConfirmScreen, QuitScreen
from cockpit.ui.screens.export import save_lines
from cockpit.ui.screens.groups import ask_to_open_other_group
from cockpit.ui.screens.killprocess import ask_to_kill_a_gpu_process, ask_to_kill_leftovers
from cockpit.ui.screens.restarts import (
    ask_debug_relaunch,
    ask_other_advice,
    ask_relaunch_with,
    ask_restart_advised,
    ask_restart_unchanged,
)
from cockpit.ui.screens.stacks import StacksScreen, StacksTaken
from cockpit.ui.servingseries import ServingSeries
from cockpit.ui.widgets.advice import AdvicePanel
from cockpit.ui.widgets.groups import GroupsStrip, GroupSummary, summarise
from cockpit.ui.widgets.header import RunHeader
from cockpit.ui.widgets.keyhints import KeyHints
from cockpit.ui.widgets.logpane import LogPane
from cockpit.ui.widgets.plots import SeriesPlot
from cockpit.ui.widgets.processes import GpuProcesses
from cockpit.ui.widgets.rankbars import Policy, RankBars, ranks_in_view_order
from cockpit.ui.widgets.serving import ServingFigures
from cockpit.ui.widgets.timeline import StartupTimeline

PANELS: tuple[str, ...] = ("advice", "plots", "timeline", "processes")
MIN_WIDTH, MIN_HEIGHT = 60, 16


def too_small_words(width: int, height: int) -> str:
    return f"Cockpit needs at least {MIN_WIDTH}×{MIN_HEIGHT}\n(this terminal is {width}×{height})"


class DashboardScreen(Screen[None]):
    """The screen owns its controllers (no Textual in them): `control` the run's life, `auto` the
    unattended mode, `groups` a prefill/decode deployment's other group, `export` what `y`/`E`/`o`
    get out, `serving` the plots' series. Its actions are thin: they ask a controller and draw."""

    BINDINGS = DASHBOARD_BINDINGS

    def __init__(
        self,
        profile: Profile,
        *,
        supervisor_factory: Callable[..., Any] | None = None,
        overrides: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        from_picker: bool = False,
        deployment: Profile | None = None,
        group: str | None = None,
    ) -> None:
        super().__init__()
        self.profile = profile
        self.deployment = deployment  # a prefill/decode profile: this dashboard follows its `group`
        self.group = group
        self.supervisor_factory = supervisor_factory
        self.overrides = overrides
        self.clock = clock
        self.from_picker = from_picker
        # the run's life (launch/attach, follow, restart, stop, kill, stacks): I/O, no Textual
        self.control = RunControl(profile, supervisor_factory, overrides=overrides, on_event=self._post_event,
                                  on_snapshot=self._post_snapshot, on_logs=self._post_logs)
        self.snapshot: RunSnapshot | None = None
        self.preflight_findings: list[Finding] = []
        self.restart_refusal: list[Finding] = []  # why the gate refused the last restart (shown above the run's)
        self.note = ""
        self.filter_spec = "all"
        self.rank_focus: str | None = None
        self.panel = "advice"
        self._phase_key: tuple[str | None, str] | None = None
        self._phase_since: float | None = None
        self._crashes_seen: set[str | None] = set()  # run ids whose crash was announced
        self._crash_modal: CrashScreen | None = None  # the one crash dialog, while it is open
        self._announced: set[tuple[str | None, str]] = set()
        self._run_started = False
        self.gpu_history = GpuHistory()
        self.serving = ServingSeries()
        self.bells = 0  # terminal bells rung (tmux marks the window)
        self.auto = AutoControl(lambda: self.profile, profile.on_crash, profile.on_crash_max_per_hour, AutoHooks(
            ring=self._ring, say=self._say, toast=self._toast, restart=lambda changes: self._start_restart(changes),
            stop=self._stop_now, ask=self._open_crash_modal, later=self._later,
            spawn=lambda work: self._spawn(work, "unattended"), run_flags=self._run_flags,
            snapshot=lambda: self.snapshot, journal=self.control.journal,
            notify_command=self.control.notify_command, clock=clock))
        self.groups = GroupControl(deployment, group)
        self.export = LogExport(lambda: self.profile)
        self.probes_hidden = 0  # Cockpit's own requests' access lines left out of the log
        self._input_mode = "filter"  # what the one input box is doing: "filter" (&) or "search" (/)

    # ---- layout ----
    def compose(self) -> ComposeResult:
        yield Static(too_small_words(0, 0), id="too-small")
        with Vertical(id="body"):
            hosts = tuple(h.label for h in self.profile.hosts)
            engine = f"{self.profile.backend} {self.profile.version}" if self.profile.version else ""
            yield RunHeader(self.profile.name, hosts, engine=engine, id="header")
            if self.groups.active:
                yield GroupsStrip(self.group or "", [summarise(r, name, None) for r, name in self.groups.groups()],
                                  id="groups")
            with VerticalScroll(id="bars-box") as bars_box:
                bars_box.can_focus = False  # 16+ ranks scroll here; the keys stay with the log
                yield RankBars(id="bars")
            with Container(id="panels"):
                with VerticalScroll(id="advice-box", classes="panel") as box:
                    box.border_title = "Advice"
                    box.can_focus = True  # tab reaches it: ↑ ↓ PgDn scroll advice taller than the panel
                    yield AdvicePanel(id="advice")
                with Vertical(id="plots-box", classes="panel") as box:
                    box.border_title = "Throughput · token usage"
                    yield ServingFigures(id="serving")
                    yield SeriesPlot("gen tok/s", "throughput", "plot-throughput", id="plot-throughput")
                    yield SeriesPlot("token usage", "usage", "plot-usage", id="plot-usage")
                with VerticalScroll(id="timeline-box", classes="panel") as box:
                    box.border_title = "Startup timeline"
                    box.can_focus = False
                    yield StartupTimeline(id="timeline")
                with VerticalScroll(id="procs-box", classes="panel") as box:
                    box.border_title = "GPUs over the last minute · processes (K kills one)"
                    box.can_focus = False
                    yield GpuProcesses(id="procs")
            yield Input(placeholder="regex — enter to apply, esc to cancel", id="filter-input")
            yield LogPane(id="log")
        yield KeyHints(groups=self.deployment is not None, id="keyhints")

    def on_mount(self) -> None:
        self.add_class("-panel-advice")
        self._apply_filter()
        self.query_one(LogPane).focus()
        self.set_interval(1.0, self._tick)  # ages and time-in-phase only; data repaints on arrival
        if self.control.can_launch:
            self._launch()
        if self.groups.other() is not None and self.supervisor_factory is not None:
            self.run_worker(self.groups.watch(self._post_group), name="groups", group="groups", exit_on_error=False)

    def on_resize(self, event: Resize) -> None:
        self.query_one("#too-small", Static).update(too_small_words(event.size.width, event.size.height))

    # ---- the run control (I/O lives there, in workers) ----
    def _post_event(self, event: RunEvent) -> None:
        self.post_message(message_for(event))

    def _post_snapshot(self, snapshot: RunSnapshot) -> None:
        self.post_message(SnapshotArrived(snapshot))

    def _post_logs(self, batch: LogBatch) -> None:
        self.post_message(LogsArrived(batch))

    def _post_group(self, role: str, profile: str, snapshot: RunSnapshot | None, error: str | None) -> None:
        self.post_message(GroupRead(role, profile, snapshot, error))

    def _spawn(self, work: Coroutine[Any, Any, None], group: str) -> None:
        self.run_worker(work, group=group, exit_on_error=False)

    # ---- what the controllers do to the screen ----
    def _ring(self) -> None:
        self.bells += 1
        self.app.bell()

    def _say(self, note: str) -> None:
        self.note = note
        self._refresh_header()

    def _toast(self, words: str, title: str, severity: Any, timeout: float) -> None:
        self.notify(words, title=title, severity=severity, timeout=timeout, markup=False)

    def _later(self, seconds: float, then: Callable[[], None]) -> None:
        self.set_timer(seconds, then)

    def _stop_now(self) -> None:
        if self.supervisor is not None:
            self.run_worker(self._stop(False), name="stop", group="supervisor", exit_on_error=False)

    @property
    def cockpit_app(self) -> Any:
        """The app as Cockpit's (its history, its dashboards): screens never import the app."""
        return self.app

    @property
    def supervisor(self) -> Any:
        """The run control's Supervisor (None until a launch made one)."""
        return self.control.supervisor

    @supervisor.setter
    def supervisor(self, value: Any) -> None:
        self.control.supervisor = value

    def _launch(self) -> None:
        self.run_worker(self.control.launch(ask_if_crashed=not self._run_started), name="supervise",
                        group="supervisor", exit_on_error=False)

    def _restart(self, changes: tuple[FlagChange, ...], kill_leftovers: bool = False, debug: bool = False) -> None:
        self.run_worker(self.control.restart(changes, kill_leftovers, debug), name="restart", group="supervisor",
                        exit_on_error=False)

    async def _stop(self, then_exit: bool) -> None:
        await self.control.stop(leaving=then_exit)
        if then_exit:
            await self._close_and_exit()

    async def _close_and_exit(self, back: bool = False) -> None:
        await self.control.close()  # leaving: the server keeps running whatever the follower did
        self.workers.cancel_group(self, "supervisor")
        self.workers.cancel_group(self, "groups")
        if back:
            self.app.pop_screen()
        else:
            self.app.exit(0)

    # ---- messages from the worker ----
    @on(SnapshotArrived)
    def _on_snapshot(self, message: SnapshotArrived) -> None:
        self.apply_snapshot(message.snapshot)

    @on(LogsArrived)
    def _on_logs(self, message: LogsArrived) -> None:
        # Cockpit's own requests' access lines never arrive (the log reader leaves them out, as
        # `cockpit logs` does: cockpit/core/ownlines.py); the title says how many were left out
        batch = message.batch
        if batch.own:
            before = self.probes_hidden
            self.probes_hidden += batch.own
            if not before:
                self._apply_filter()  # the title says from now on that they are hidden
        self.query_one(LogPane).add_lines(list(batch.lines), batch.dropped)

    @on(RunStarted)
    def _on_started(self, message: RunStarted) -> None:
        run = message.run
        if run is None:
            return
        self._run_started = True
        if message.ended:
            self.note = "the last run crashed: nothing launched (R/r restart · l launch)"
        else:
            verb = "attached to the running" if message.attached else "launched"
            self.note = f"{verb} run {run.id}"
        self._refresh_header()

    @on(PreflightRefused)
    def _on_refused(self, message: PreflightRefused) -> None:
        self.preflight_findings = message.findings
        self.note = "launch refused by preflight: fix the profile, then l to try again (w shows the arithmetic)"
        if message.what == "restart":  # the run was not stopped; an automatic restart stops and asks
            self.restart_refusal = list(message.findings)
            self.auto.restart_refused(message.findings)
        self.query_one(AdvicePanel).show(message.findings, None)
        self._set_panel("advice")
        self._refresh_header()

    @on(SupervisorFailed)
    def _on_failed(self, message: SupervisorFailed) -> None:
        self.note = f"supervisor: {message.error}"
        self.notify(message.error, title="Supervisor", severity="error", timeout=6)
        self._refresh_header()

    @on(ActionDone)
    def _on_done(self, message: ActionDone) -> None:
        if message.what == "preflight-start":
            self.note = "preflight, then launch…"
        elif message.error:
            self.note = f"{message.what} failed: {message.error}"
            self.notify(message.error, title=f"{message.what} failed", severity="error", timeout=6)
        else:
            self.note = {"restart": "restarted", "stop": "stopped", "kill": "leftover processes killed"}.get(
                message.what, message.what
            )
        self._refresh_header()

    @on(LeftoversFound)
    def _on_leftovers(self, message: LeftoversFound) -> None:
        def kill(procs: tuple[Any, ...]) -> None:
            self.run_worker(self.control.kill(procs), name="kill", group="supervisor", exit_on_error=False)

        self.note = ask_to_kill_leftovers(self, message.leftovers, message.changes,
                                          lambda changes: self._restart(changes, kill_leftovers=True), kill)
        self._refresh_header()

    # ---- rendering ----
    def apply_snapshot(self, snap: RunSnapshot) -> None:
        self.snapshot = snap
        now = self.clock()
        key = (snap.run.id if snap.run else None, fmt.phase_word(snap.state.phase, snap.lifecycle))
        if key != self._phase_key:
            if self._phase_key is not None and not self.note.startswith(("launch refused", "restart refused", "supervisor:", "auto:", "the last run crashed")):
                self.note = ""  # "restarted", "attached to …": news of the previous phase
            self._phase_key = key
            self._phase_since = now - fmt.phase_age_in_log(snap, now)
        self._refresh_header()
        if self.groups.active and self.group is not None:  # this dashboard's own group, on its line
            self._show_group(summarise(self.group, snap.profile, snap))
        self.query_one(RankBars).show(
            snap, now, self._policy(), self.rank_focus, host_cache_gb_per_rank=snap.host_cache_gb_per_rank,
            host_cache_label=snap.host_cache_label,
        )
        findings = [*self.restart_refusal, *snap.findings] or self.preflight_findings
        self.query_one(AdvicePanel).show(findings, snap.state.max_total_num_tokens)
        self.query_one(ServingFigures).show(snap.serving)
        gen, usage = self.serving.add(snap)
        self.query_one("#plot-throughput", SeriesPlot).show(gen)
        self.query_one("#plot-usage", SeriesPlot).show(usage)
        self.query_one(StartupTimeline).show(snap.state)
        changed = self.gpu_history.add(snap)
        self.query_one(GpuProcesses).show(snap, self.gpu_history, changed)
        self._announce_new_critical(snap)
        self._maybe_show_crash(snap)
        self.auto.seen(snap)

    def _announce_new_critical(self, snap: RunSnapshot) -> None:
        """A critical finding the operator has not seen yet (e.g. low headroom as capture ends)
        also pops up once, so it is not missed while looking at the log."""
        if snap.state.crash is not None:
            return
        run_id = snap.run.id if snap.run else None
        for f in snap.findings:
            key = (run_id, f.id)
            if f.severity == "critical" and key not in self._announced:
                self._announced.add(key)
                change = (" → " + ", ".join(c.as_diff() for c in f.changes)) if f.changes else ""
                # short and brief: the advice panel keeps the whole text
                first = f.message.split(": ", 1)[0].split(". ", 1)[0]
                self.notify(first[:120] + change, title="Critical", severity="error", timeout=6, markup=False)

    def _refresh_header(self) -> None:
        self.query_one(RunHeader).show(self.snapshot, self._phase_since, self.clock(), self.note)

    def _tick(self) -> None:
        now = self.clock()
        self.query_one(RunHeader).tick(now)
        if self.snapshot is not None:
            self.query_one(RankBars).tick(now)

    def _policy(self) -> Policy:
        p = self.profile.policy
        return Policy(target_headroom_gb=p.target_headroom_gb, warn_headroom_gb=p.warn_headroom_gb)

    def _run_flags(self) -> dict[str, Any]:
        if self.snapshot is not None and self.snapshot.run is not None and self.snapshot.run.flags:
            return dict(self.snapshot.run.flags)
        return dict(self.profile.server)

    # ---- crash flow ----
    def _maybe_show_crash(self, snap: RunSnapshot) -> None:
        """One crash, one dialog: the crash is judged again as its lines arrive (the exception,
        then the process's death), and the dialog already open shows the newer judgement."""
        crash = snap.state.crash
        if crash is None or snap.lifecycle in ("stopping", "waiting_gpu_release", "launching") or self.control.busy:
            return
        key = snap.run.id if snap.run else None
        if key in self._crashes_seen:
            if self._crash_modal is not None:
                self._open_crash_modal()  # updates the open dialog in place
            return
        self._crashes_seen.add(key)
        self.auto.crashed(snap)

    def _crash_tail(self) -> list[str]:
        return [ln.text for ln in list(self.query_one(LogPane).all_lines[-80:])]

    def _open_crash_modal(self) -> None:
        snap = self.snapshot
        if snap is None or snap.state.crash is None:
            self.notify("no crash in this run", severity="information")
            return
        crash = snap.state.crash
        if crash.exit_code is None and fmt.exit_code_in(snap.progress) is not None:
            # the log decided the crash; the supervisor saw the exit code: the dialog says both
            crash = dataclasses.replace(crash, exit_code=fmt.exit_code_in(snap.progress))
        if self._crash_modal is not None:
            self._crash_modal.update_crash(crash, snap.findings, snap.state.max_total_num_tokens, self._crash_tail(),
                                           snap.state.format)
            return
        modal = CrashScreen(
            crash, snap.findings, snap.state.max_total_num_tokens, self._run_flags(), self._validate_overrides,
            backend=self.profile.backend, log_tail=self._crash_tail(), log_format=snap.state.format,
        )
        self._crash_modal = modal
        self.app.push_screen(modal, self._crash_choice)

    def _crash_choice(self, choice: RestartChoice | None) -> None:
        self._crash_modal = None
        if choice is None:
            return
        self._start_restart(choice.changes)

    def _start_restart(self, changes: tuple[FlagChange, ...]) -> None:
        if self.supervisor is None:
            self.notify("no supervisor: nothing to restart", severity="warning")
            return
        if self.control.busy:
            self.notify(f"already {self.control.busy}", severity="warning")
            return
        words = ", ".join(c.as_diff() for c in changes) or "unchanged flags"
        self.restart_refusal = []
        self.note = f"restarting with {words}: preflight, then stopping…"
        self._refresh_header()
        self._restart(changes)

    def action_debug_relaunch(self) -> None:
        if self.supervisor is None:
            self.notify("no supervisor: nothing to relaunch", severity="warning")
            return

        def relaunch() -> None:
            if not self.control.busy:
                self.note = "debug relaunch: stopping…"
                self._refresh_header()
                self._restart((), debug=True)

        ask_debug_relaunch(self, self.profile.backend, relaunch)

    def _validate_overrides(self, overrides: dict[str, Any]) -> None:
        """Raises FlagError when the flag table refuses the edited flags (before anything stops)."""

        get_backend(self.profile.backend).flags.effective(self.profile, overrides)

    def relaunch_with(self, flags: dict[str, Any], source: str | None = None) -> None:
        ask_relaunch_with(self, self._run_flags(), flags, source, self._start_restart)

    # ---- actions ----
    def action_show_crash(self) -> None:
        self._open_crash_modal()

    def action_show_overrides(self) -> None:
        """`i`: the flags this run changed from the profile, each in full (the header keeps as many
        as its width allows and says `+N more (i)` for the rest)."""
        snap = self.snapshot
        diff = list(snap.flag_diff) if snap is not None else []
        if not diff:
            self.notify("this run uses the profile's flags unchanged", timeout=4)
            return
        lines = "\n".join(fmt.flag_diff_words(c, full_name=True) for c in diff)
        self.notify(lines, title=f"{plural(len(diff), 'flag')} changed from the profile", timeout=10, markup=False)

    def action_restart_advised(self) -> None:
        ask_restart_advised(self, self.snapshot, self._start_restart)

    def action_other_advice(self) -> None:
        ask_other_advice(self, self.snapshot, self._start_restart)

    def action_restart_unchanged(self) -> None:
        ask_restart_unchanged(self, self._start_restart)

    def action_stop_run(self) -> None:
        if self.supervisor is None:
            self.notify("no supervisor: nothing to stop", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.note = "stopping…"
                self._refresh_header()
                self.run_worker(self._stop(False), name="stop", group="supervisor", exit_on_error=False)

        self.app.push_screen(
            ConfirmScreen("Stop", f"Stop the {self.profile.name} server and wait until {self.release_words()}?"),
            answered,
        )

    def action_launch(self) -> None:
        if not self.control.can_launch:
            return
        if self.control.busy:
            self.notify(f"already {self.control.busy}", severity="warning")
            return
        if self.control.following:
            if self.snapshot is not None and self.snapshot.ended:
                self._start_restart(())  # launch again with this run's flags
            else:
                self.notify("the run is live: s stops it, r restarts it", severity="warning")
            return
        if self.profile.source:

            try:
                self.profile = load_profile(self.profile.source)
            except ProfileError as exc:
                self.notify(str(exc), title="Profile", severity="error", timeout=6)
                return
        closing = self.control.renew(self.profile)
        if closing is not None:
            self.run_worker(closing, group="closing", exit_on_error=False)
        self.preflight_findings = []
        self._launch()

    def action_quit_dashboard(self) -> None:
        self._ask_quit(back=False)

    def action_back(self) -> None:
        if self.query_one("#filter-input", Input).has_class("-active"):
            self._close_search()
            return
        pane = self.query_one(LogPane)
        if pane.search_rx is not None:
            pane.clear_search()
            return
        if self.has_class("-log-max"):
            self.action_toggle_zoom()
            return
        if self.from_picker:
            self._ask_quit(back=True)

    def on_cpu(self) -> bool:
        """The log proved a CPU engine: no GPU memory to speak of."""
        return self.snapshot is not None and self.snapshot.state.device == "cpu"

    def release_words(self) -> str:
        return "its processes have exited" if self.on_cpu() else "its GPU memory is released"

    def _ask_quit(self, back: bool) -> None:
        running = self.supervisor is not None and self._run_started and not (self.snapshot and self.snapshot.ended)

        def answered(choice: str | None) -> None:
            if choice == "leave":
                self.run_worker(self._close_and_exit(back), group="leaving", exit_on_error=False)
            elif choice == "stop":
                self.note = "stopping before quitting…"
                self._refresh_header()
                self.run_worker(self._stop(True), name="stop", group="leaving", exit_on_error=False)

        self.app.push_screen(QuitScreen(self.profile.name, running), answered)

    def action_history(self) -> None:
        self.cockpit_app.action_history()

    def action_why(self) -> None:
        self.query_one(AdvicePanel).toggle_arithmetic()

    def action_cycle_panel(self) -> None:
        self._set_panel(PANELS[(PANELS.index(self.panel) + 1) % len(PANELS)])

    def _set_panel(self, panel: str) -> None:
        self.remove_class(f"-panel-{self.panel}")
        self.panel = panel
        self.add_class(f"-panel-{panel}")
        self._watch_serving()

    def _watch_serving(self) -> None:
        """The throughput panel on screen: the serving figures are read at the full rate."""
        self.control.watch_serving(self.panel == "plots" and not self.has_class("-log-max"))

    # ---- log filters ----
    def action_cycle_filter(self) -> None:
        cur = self.filter_spec if self.filter_spec in PRESET_NAMES else "all"
        self.filter_spec = PRESET_NAMES[(PRESET_NAMES.index(cur) + 1) % len(PRESET_NAMES)]
        self._apply_filter()

    def action_filter(self, preset: str) -> None:
        self.filter_spec = preset
        self._apply_filter()

    def action_focus_rank(self, n: int) -> None:
        if n == 0:
            self.rank_focus = None
        else:
            # counted as the rows show them: across nodes, node by node
            names = ranks_in_view_order(self.snapshot) if self.snapshot else []
            if n > len(names):
                self.notify(f"no rank {n}: {len(names)} ranks known", severity="warning")
                return
            self.rank_focus = names[n - 1]
        self._apply_filter()
        if self.snapshot is not None:
            self.apply_snapshot(self.snapshot)

    def action_pause_log(self) -> None:
        self.query_one(LogPane).action_toggle_pause()

    def action_filter_regex(self) -> None:
        """`&` (as in less): show only the lines matching a regex."""
        self._input_mode = "filter"
        box = self.query_one("#filter-input", Input)
        box.placeholder = "filter: regex — enter shows only matching lines, empty = all, esc cancels"
        box.add_class("-active")
        box.value = "" if self.filter_spec in PRESET_NAMES else self.filter_spec
        box.focus()

    def action_search(self) -> None:
        """`/` (as in less): jump to matching lines in their context, newest first."""
        self._input_mode = "search"
        box = self.query_one("#filter-input", Input)
        box.placeholder = "search: regex — enter jumps to the newest match, n older, N newer, esc cancels"
        box.add_class("-active")
        pane = self.query_one(LogPane)
        box.value = pane.search_rx.pattern if pane.search_rx is not None else ""
        box.focus()

    def action_search_next(self, older: bool) -> None:
        pane = self.query_one(LogPane)
        if pane.search_rx is None:
            self.notify("no search yet: / searches", severity="warning", timeout=3)
        elif not pane.search_next(older):
            self.notify(f"no {'older' if older else 'newer'} match", timeout=2)

    def action_kill_process(self) -> None:
        """`K`: pick a GPU process (the GPU panel's list), confirm, SIGKILL it on its host."""
        ask_to_kill_a_gpu_process(self, self.snapshot, self._kill)

    def _kill(self, proc: Any) -> None:
        if self.supervisor is None:
            self.notify("no supervisor: nothing can be killed from here", severity="warning", timeout=4)
        else:
            self.run_worker(self.control.kill((proc,)), name="kill", group="supervisor", exit_on_error=False)

    def action_toggle_zoom(self) -> None:
        """The log alone under the header (bars and panels hidden), like k9s/lazydocker's zoom."""
        self.toggle_class("-log-max")
        self._watch_serving()
        self.query_one(LogPane).focus()

    def action_toggle_wrap(self) -> None:
        self.query_one(LogPane).toggle_wrap()

    def _close_search(self) -> None:
        box = self.query_one("#filter-input", Input)
        box.remove_class("-active")
        self.query_one(LogPane).focus()

    @on(Input.Submitted, "#filter-input")
    def _search_submitted(self, event: Input.Submitted) -> None:
        if self._input_mode == "search":
            pattern = event.value.strip()
            pane = self.query_one(LogPane)
            self._close_search()
            if not pattern:
                pane.clear_search()
                return
            try:
                found = pane.search(pattern)
            except re.error as exc:
                self.notify(f"search: {exc}", severity="error", timeout=4)
                return
            if not found:
                self.notify(f"no line matches /{pattern}/", timeout=3)
            return
        spec = event.value.strip() or "all"
        try:
            LineFilter(spec, presets=self._filter_presets())
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.filter_spec = spec
        self._apply_filter()
        self._close_search()

    def _filter_presets(self) -> Mapping[str, tuple[str, ...]]:
        """The presets' words as the profile's server prints them (the backend's)."""

        try:
            return get_backend(self.profile.backend).logs.filter_presets()
        except ValueError:  # an unknown backend: the generic error words only
            return {}

    def _apply_filter(self) -> None:
        presets = self._filter_presets()
        pane = self.query_one(LogPane)
        pane.error_words = tuple(presets.get("errors") or GENERIC_ERROR_WORDS)
        view = log_view(self.filter_spec, self.rank_focus, presets, self.probes_hidden > 0)
        if view.error:
            self.notify(view.error, severity="error")
        self.filter_spec = view.spec
        pane.set_filter(view.matcher, None, view.title)

    # ---- getting things out (the export controller builds, the screen copies and hands over) ----
    def action_copy_command(self) -> None:
        """`y`: the advised command line to the clipboard (OSC 52: tmux passes it on with
        `set-clipboard on`), and in the toast, so it can be read off the screen as well."""
        try:
            line = self.export.advised_command(self.snapshot)
        except Exception as exc:  # the flag table refused it: say why
            self.notify(f"cannot build the command: {exc}", severity="error", timeout=6)
            return
        if line is None:
            self.notify("no headroom advice to copy", severity="warning", timeout=3)
            return
        self.app.copy_to_clipboard(line)
        self.notify(line, title="Copied the advised command", timeout=6, markup=False)

    def action_save_log(self) -> None:
        """`E`: the log lines the pane shows (this filter, this rank) to a file in the current
        directory; the toast names it."""
        lines = [ln.text for ln in self.query_one(LogPane).shown_lines]
        path = Path.cwd() / self.export.file_name("visible", self.snapshot)
        self._spawn(save_lines(self, self.export, path, lines, page=False), "files")

    def action_open_pager(self) -> None:
        """`o`: the run's log as this pane holds it (the last 20,000 lines, unfiltered) in $PAGER."""
        import tempfile

        lines = [ln.text for ln in self.query_one(LogPane).all_lines]
        path = Path(tempfile.gettempdir()) / self.export.file_name("all", self.snapshot)
        self._spawn(save_lines(self, self.export, path, lines, page=True), "files")

    # ---- S: py-spy stacks, taken by the run control in a worker ----
    def action_take_stacks(self) -> None:
        if self.control.run_info is None:
            self.notify("no run to take stacks of", severity="warning", timeout=3)
            return
        self.notify("taking stacks of every process (py-spy)…", timeout=3)
        self.run_worker(self._take_stacks(), name="stacks", group="stacks", exclusive=True, exit_on_error=False)

    async def _take_stacks(self) -> None:
        try:
            lines = await self.control.stacks()
        except Exception as exc:
            self.post_message(StacksTaken([], str(exc) or type(exc).__name__))
            return
        self.post_message(StacksTaken(lines))

    def on_stacks_taken(self, message: StacksTaken) -> None:
        if message.error is not None:
            self.notify(f"stacks failed: {message.error}", severity="error", timeout=6, markup=False)
            return
        self.app.push_screen(StacksScreen(message.lines))

    # ---- a prefill/decode deployment's groups (the group controller reads the other one) ----
    def on_group_read(self, message: GroupRead) -> None:
        self._show_group(summarise(message.role, message.profile, message.snapshot, message.error))

    def _show_group(self, summary: GroupSummary) -> None:
        with contextlib.suppress(Exception):  # the strip is gone while the screen closes
            self.query_one(GroupsStrip).show(summary)

    def action_other_group(self) -> None:
        """`g`: the other group's dashboard, asked first when opening it launches its server."""
        summaries = dict(self.query_one(GroupsStrip).summaries) if self.groups.active else {}
        ask_to_open_other_group(self, self.groups, summaries, lambda role: self._spawn(self._switch_group(role),
                                                                                      "leaving"))

    async def _switch_group(self, role: str) -> None:
        """Leave this group's server running (as `q` → leave does) and open the other's dashboard."""
        await self.control.close()
        self.workers.cancel_group(self, "supervisor")
        self.workers.cancel_group(self, "groups")
        assert self.deployment is not None
        self.app.switch_screen(self.cockpit_app.dashboard_for(self.deployment, from_picker=self.from_picker, group=role))

    # ---- for tests and the app ----
    def worker_states(self) -> dict[str, WorkerState]:
        return {w.name: w.state for w in self.workers if isinstance(w, Worker)}
