"""The dashboard's unattended mode (profile `on-crash:`, `on-hang:`, `notify:`), as a controller
the screen owns: on a crash, ring the bell, ask the policy (`ui/unattended.py`), journal and show
what it decided, run the notify command; on a hang, the same with `on-hang:`; on the recovery that
follows an automatic restart, ring and notify again.

No Textual here (tests/ui/test_autocontrol.py drives it with plain callables): what it does to the
screen goes through `AutoHooks`, each one of the screen's own methods, and the journal line and the
notify command are the run control's (`ui/runcontrol.py`), run in the screen's workers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from cockpit.face import Crash, Finding, FlagChange, Profile, RunSnapshot, sort_findings
from cockpit.ui.unattended import Decision, Unattended

# a restart the operator asked for is no longer the crashed run's: a backed-off restart gives way
_NOT_THE_CRASHED_RUN = ("stopping", "stopped", "launching")


@dataclass(frozen=True)
class AutoHooks:
    """What the unattended mode does through the dashboard."""

    ring: Callable[[], None]  # the terminal bell (tmux marks the window)
    say: Callable[[str], None]  # the header's note, repainted
    toast: Callable[[str, str, str, float], None]  # words, title, severity, seconds
    restart: Callable[[tuple[FlagChange, ...]], None]  # the screen's restart: the gate, stop, launch
    stop: Callable[[], None]  # stop the run: its GPU memory released
    ask: Callable[[], None]  # the crash dialog
    later: Callable[[float, Callable[[], None]], None]  # call back after so many seconds
    spawn: Callable[[Coroutine[Any, Any, None]], None]  # run a coroutine in a worker
    run_flags: Callable[[], dict[str, Any]]  # the run's flags as launched (else the profile's)
    snapshot: Callable[[], RunSnapshot | None]  # the latest snapshot
    journal: Callable[[str | None, Decision, Crash | None], Awaitable[str | None]]  # the error, if any
    notify_command: Callable[[str, str | None, str, str], Awaitable[tuple[str, str] | None]]  # failed: (severity, words)
    clock: Callable[[], float]


class AutoControl:
    """`profile` gives the profile as the dashboard holds it now (`l` reloads it: its name, its
    `notify:` and `on-hang:`); the policy (`on-crash:` and its hourly budget) is the one the
    dashboard opened with, so a reload does not reset the count of automatic restarts."""

    def __init__(self, profile: Callable[[], Profile], on_crash: str, max_per_hour: int, hooks: AutoHooks) -> None:
        self._profile = profile
        self.hooks = hooks
        self.policy = Unattended(on_crash, max_per_hour)
        self.awaiting_recovery: str | None = None  # the automatic restart's words, until READY
        self.hang_seen: tuple[str | None, str | None] | None = None  # (run, phase_since) of the hang rung for

    @property
    def profile(self) -> Profile:
        return self._profile()

    # ---- what the snapshots bring ----
    def crashed(self, snap: RunSnapshot) -> None:
        """The run crashed (once per run: the screen sees to that)."""
        h = self.hooks
        crash = snap.state.crash
        assert crash is not None
        h.ring()
        decision = self.policy.decide(crash, snap.findings, h.run_flags(), h.clock())
        run_id = snap.run.id if snap.run else None
        summary = f"{self.profile.name}: run {run_id} crashed: {crash.kind} in {crash.phase}: {crash.message[:300]}"
        if decision.action != "ask" or decision.reason:
            h.spawn(self._journal(run_id, decision, crash))
        self._notify_command("crashed", run_id, summary, decision.action)
        note: str | None = None
        if decision.action == "restart":
            words = ", ".join(c.as_diff() for c in decision.changes) or "unchanged flags"
            self.awaiting_recovery = words
            if decision.delay_s > 0:  # backoff: the restart waits, and the note says how long
                h.later(decision.delay_s, lambda: self.deferred_restart(decision.changes))
                note = f"auto: {decision.reason}: restarting with {words} in {decision.delay_s:g} s"
            else:
                h.restart(decision.changes)
                note = f"auto: {decision.reason}: restarting with {words}"
        elif decision.action == "stop":
            note = f"auto: {decision.reason}: stopping, " + (
                "its processes to exit" if snap.state.device == "cpu" else "GPU memory to be released")
            h.stop()
        else:
            if decision.reason:
                note = f"auto: {decision.reason}"
            h.ask()
        if note is not None:
            h.say(note)
        if decision.action != "ask" and note is not None:
            h.toast(note.removeprefix("auto: "), "Automatic action", "information", 6)

    def restart_refused(self, findings: list[Finding]) -> None:
        """The gate refused a restart's flags: the run was not stopped. An automatic restart stops
        there and asks — the bell, the note, the notify command — and is not tried again on its own."""
        h = self.hooks
        critical = [f for f in sort_findings(list(findings)) if f.severity == "critical"]
        why = critical[0].message if critical else "a critical finding"
        if self.awaiting_recovery is None:  # the operator's r / e / R
            h.say(f"restart refused by preflight, the run is untouched: {why} (w shows the arithmetic)")
            h.toast(why, "Restart refused", "error", 8)
            return
        self.awaiting_recovery = None
        h.ring()
        snap = h.snapshot()
        run_id = snap.run.id if snap is not None and snap.run else None
        note = f"auto: restart refused by preflight, nothing relaunched: {why} — fix the flags, then r/e/R"
        h.say(note)
        h.toast(note.removeprefix("auto: "), "Automatic restart refused", "error", 10)
        self._notify_command("restart_refused", run_id, f"{self.profile.name}: automatic restart of run {run_id} "
                             f"refused by preflight: {why}", "ask")

    def deferred_restart(self, changes: tuple[FlagChange, ...]) -> None:
        """The backed-off automatic restart, unless the operator acted meanwhile (the run is no
        longer the crashed one: restarted by hand, stopped, or gone)."""
        snap = self.hooks.snapshot()
        if snap is None or snap.state.crash is None or snap.lifecycle in _NOT_THE_CRASHED_RUN:
            return
        self.hooks.restart(changes)

    def seen(self, snap: RunSnapshot) -> None:
        """Every snapshot: READY after an automatic restart, a hang, or the end of one."""
        self._maybe_recovered(snap)
        self._maybe_hung(snap)

    def _maybe_hung(self, snap: RunSnapshot) -> None:
        """`hung` (or back from it): ring, say it in the header, run the notify command; restart
        only when the profile's on-hang says so."""
        h = self.hooks
        run_id = snap.run.id if snap.run else None
        hung = snap.state.phase == "hung" and snap.lifecycle == "running"
        key = (run_id, snap.state.phase_since)
        if hung and key != self.hang_seen:
            self.hang_seen = key
            h.ring()
            why = (snap.state.hang or {}).get("reason", "nothing moves")
            decision = self.policy.decide_hang(self.profile.on_hang, h.clock(), snap.state.hang)
            self._notify_command("hung", run_id, f"{self.profile.name}: run {run_id} HUNG: {why}", decision.action)
            if decision.action == "restart":
                self.awaiting_recovery = "unchanged flags (it hung)"
                h.spawn(self._journal(run_id, decision, None))
                h.restart(())
                h.say(f"auto: {decision.reason}: restarting")
            else:
                h.say(f"HUNG: {why} · S: stacks" + (f" · auto: {decision.reason}" if decision.reason else ""))
        elif not hung and self.hang_seen is not None and self.hang_seen[0] == run_id and snap.state.phase == "ready":
            self.hang_seen = None
            h.say("tokens move again: READY")
            self._notify_command("unhung", run_id, f"{self.profile.name}: run {run_id} READY again (tokens move)", "none")

    def _maybe_recovered(self, snap: RunSnapshot) -> None:
        if self.awaiting_recovery is None or snap.state.phase != "ready" or snap.lifecycle != "running":
            return
        words, self.awaiting_recovery = self.awaiting_recovery, None
        self.hooks.ring()
        run_id = snap.run.id if snap.run else None
        self.hooks.say(f"auto: recovered: run {run_id} READY with {words}")
        self._notify_command("recovered", run_id, f"{self.profile.name}: run {run_id} READY again with {words}", "none")

    # ---- the record and the notify command (the run control's, in workers) ----
    async def _journal(self, run_id: str | None, decision: Decision, crash: Crash | None) -> None:
        error = await self.hooks.journal(run_id, decision, crash)
        if error is not None:
            self.hooks.toast(error, "", "error", 6)

    def _notify_command(self, event: str, run_id: str | None, summary: str, action: str) -> None:
        if self.profile.notify:
            self.hooks.spawn(self._run_notify(event, run_id, summary, action))

    async def _run_notify(self, event: str, run_id: str | None, summary: str, action: str) -> None:
        failed = await self.hooks.notify_command(event, run_id, summary, action)
        if failed is not None:
            severity, words = failed
            self.hooks.toast(words, "", severity, 6)
