"""The dashboard's unattended mode (profile `on-crash:`, `notify:`): on a crash, ring the terminal
bell, ask the policy (cockpit/ui/unattended.py), journal and show what it decided, run the notify
command; on the recovery that follows an automatic restart, ring and notify again. A mixin of
DashboardScreen; the notify command and the journal write are the run control's
(`ui/runcontrol.py`), run in workers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cockpit.face import RunSnapshot
from cockpit.ui.runcontrol import RunControl
from cockpit.ui.unattended import Decision


class UnattendedActions:
    """Mixed into DashboardScreen before Screen: it defines only its own methods."""

    profile: Any
    app: Any
    supervisor: Any
    control: RunControl
    unattended: Any
    note: str
    bells: int
    _awaiting_recovery: str | None
    _hang_seen: tuple[str | None, str | None] | None
    restart_refusal: list[Any]
    clock: Any
    if TYPE_CHECKING:  # DashboardScreen's and Screen's, for the type checker only

        def notify(self, *args: Any, **kwargs: Any) -> Any: ...
        def run_worker(self, *args: Any, **kwargs: Any) -> Any: ...
        def set_timer(self, *args: Any, **kwargs: Any) -> Any: ...
        def _run_flags(self) -> dict[str, Any]: ...
        def _start_restart(self, changes: Any) -> None: ...
        def _stop(self, then_exit: bool) -> Any: ...
        def _open_crash_modal(self) -> None: ...
        def _refresh_header(self) -> None: ...

    # ---- unattended mode (profile on-crash:, notify:) ----
    def _ring(self) -> None:
        self.bells += 1
        self.app.bell()

    def _on_crash(self, snap: RunSnapshot) -> None:
        crash = snap.state.crash
        assert crash is not None
        self._ring()
        decision = self.unattended.decide(crash, snap.findings, self._run_flags(), self.clock())
        run_id = snap.run.id if snap.run else None
        summary = f"{self.profile.name}: run {run_id} crashed: {crash.kind} in {crash.phase}: {crash.message[:300]}"
        if decision.action != "ask" or decision.reason:
            self.run_worker(self._journal(run_id, decision, crash), group="unattended", exit_on_error=False)
        self._notify_command("crashed", run_id, summary, decision.action)
        if decision.action == "restart":
            words = ", ".join(c.as_diff() for c in decision.changes) or "unchanged flags"
            self._awaiting_recovery = words
            if decision.delay_s > 0:  # backoff: the restart waits, and the note says how long
                self.set_timer(decision.delay_s, lambda: self._deferred_restart(decision.changes))
                self.note = f"auto: {decision.reason}: restarting with {words} in {decision.delay_s:g} s"
            else:
                self._start_restart(decision.changes)
                self.note = f"auto: {decision.reason}: restarting with {words}"
        elif decision.action == "stop":
            self.note = f"auto: {decision.reason}: stopping, " + (
                "its processes to exit" if snap.state.device == "cpu" else "GPU memory to be released")
            if self.supervisor is not None:
                self.run_worker(self._stop(False), name="stop", group="supervisor", exit_on_error=False)
        else:
            if decision.reason:
                self.note = f"auto: {decision.reason}"
            self._open_crash_modal()
        if decision.action != "ask":
            self.notify(self.note.removeprefix("auto: "), title="Automatic action", timeout=6, markup=False)
        self._refresh_header()

    def _restart_refused(self, findings: list[Any]) -> None:
        """The gate refused a restart's flags (the same preflight dialog as a launch's: the advice
        panel with the arithmetic): the run was not stopped. An automatic restart stops there and
        asks — the bell, the note, the notify command — and is not tried again on its own."""
        from cockpit.face import sort_findings

        critical = [f for f in sort_findings(list(findings)) if f.severity == "critical"]
        self.restart_refusal = list(findings)
        why = critical[0].message if critical else "a critical finding"
        if self._awaiting_recovery is None:  # the operator's r / e / R
            self.note = f"restart refused by preflight, the run is untouched: {why} (w shows the arithmetic)"
            self.notify(why, title="Restart refused", severity="error", timeout=8, markup=False)
            return
        self._awaiting_recovery = None
        self._ring()
        snap = getattr(self, "snapshot", None)
        run_id = snap.run.id if snap is not None and snap.run else None
        self.note = f"auto: restart refused by preflight, nothing relaunched: {why} — fix the flags, then r/e/R"
        self.notify(self.note.removeprefix("auto: "), title="Automatic restart refused", severity="error",
                    timeout=10, markup=False)
        self._notify_command("restart_refused", run_id, f"{self.profile.name}: automatic restart of run {run_id} "
                             f"refused by preflight: {why}", "ask")

    def _deferred_restart(self, changes: Any) -> None:
        """The backed-off automatic restart, unless the operator acted meanwhile (the run is no
        longer the crashed one: restarted by hand, stopped, or gone)."""
        snap = getattr(self, "snapshot", None)
        if snap is None or snap.state.crash is None or snap.lifecycle in ("stopping", "stopped", "launching"):
            return
        self._start_restart(changes)

    def _maybe_hung(self, snap: RunSnapshot) -> None:
        """`hung` (or back from it): ring, say it in the header, run the notify command; restart
        only when the profile's on-hang says so."""
        run_id = snap.run.id if snap.run else None
        hung = snap.state.phase == "hung" and snap.lifecycle == "running"
        key = (run_id, snap.state.phase_since)
        if hung and key != self._hang_seen:
            self._hang_seen = key
            self._ring()
            why = (snap.state.hang or {}).get("reason", "nothing moves")
            summary = f"{self.profile.name}: run {run_id} HUNG: {why}"
            decision = self.unattended.decide_hang(self.profile.on_hang, self.clock(), snap.state.hang)
            self._notify_command("hung", run_id, summary, decision.action)
            if decision.action == "restart":
                self._awaiting_recovery = "unchanged flags (it hung)"
                self.run_worker(self._journal(run_id, decision, None), group="unattended", exit_on_error=False)
                self._start_restart(())
                self.note = f"auto: {decision.reason}: restarting"
            else:
                self.note = f"HUNG: {why} · S: stacks" + (f" · auto: {decision.reason}" if decision.reason else "")
            self._refresh_header()
        elif not hung and self._hang_seen is not None and self._hang_seen[0] == run_id and snap.state.phase == "ready":
            self._hang_seen = None
            self.note = "tokens move again: READY"
            self._notify_command("unhung", run_id, f"{self.profile.name}: run {run_id} READY again (tokens move)", "none")
            self._refresh_header()

    def _maybe_recovered(self, snap: RunSnapshot) -> None:
        if self._awaiting_recovery is None or snap.state.phase != "ready" or snap.lifecycle != "running":
            return
        words, self._awaiting_recovery = self._awaiting_recovery, None
        self._ring()
        run_id = snap.run.id if snap.run else None
        self.note = f"auto: recovered: run {run_id} READY with {words}"
        self._notify_command("recovered", run_id, f"{self.profile.name}: run {run_id} READY again with {words}", "none")
        self._refresh_header()

    async def _journal(self, run_id: str | None, decision: Decision, crash: Any) -> None:
        error = await self.control.journal(run_id, decision, crash)
        if error is not None:
            self.notify(error, severity="error", timeout=6)

    def _notify_command(self, event: str, run_id: str | None, summary: str, action: str) -> None:
        if not self.profile.notify:
            return
        self.run_worker(self._run_notify(event, run_id, summary, action), group="unattended", exit_on_error=False)

    async def _run_notify(self, event: str, run_id: str | None, summary: str, action: str) -> None:
        failed = await self.control.notify_command(event, run_id, summary, action)
        if failed is not None:
            severity, words = failed
            self.notify(words, severity=severity, timeout=6, markup=False)
