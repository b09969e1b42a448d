"""The dashboard's run control: one profile's Supervisor and everything done to its run.

No Textual here (tests/ui/test_runcontrol.py drives it against the simulator without an App and
checks in a fresh interpreter that neither textual nor rich is loaded). The dashboard owns one
`RunControl` and runs its coroutines in workers; the control says what happened through three
callbacks the screen turns into messages (`on_snapshot`, `on_logs`, `on_event`), and the screen's
handlers own the state drawn from them. What the control keeps is its own: the Supervisor and which
action is under way (`busy`); whether a follow loop is running (`following`) is the Supervisor's word.

The API, each an `async` method the screen runs in a worker:
- `launch(ask_if_crashed)`: attach to the profile's live run, else show its last run if it crashed
  (`ask_if_crashed`: nothing is launched over it), else preflight and launch; then follow the run
  until `close()`.
- `restart(changes, kill_leftovers, debug)`: the gate on the new flags (refused: `PreflightRefused`
  with what="restart", the run untouched) → stop → GPUs free → launch the gate's argvs; leftovers
  holding GPU memory come back as `LeftoversFound` for the operator to decide; follows the new run.
- `stop(leaving)`, `kill(procs)`, `stacks()`, `close()`; `renew(profile)` before a fresh launch.
- `journal(...)` and `notify_command(...)`: the unattended mode's record and its `notify:` command
  (the policy that decides is `ui/unattended.py`; the screen shows what it decided).

The launch's gate (cockpit/preflight/gate.py, the one `cockpit up` walks, here over the run's own
nodes) is called in one place, `preflight()`; the target launches the argvs it built.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.face import (
    Finding,
    FlagChange,
    GateRefused,
    GpuProcess,
    LogBatch,
    Profile,
    RunInfo,
    RunSnapshot,
    Supervisor,
    collect_stacks,
    render_stacks,
    save_stacks,
)
from cockpit.ui.unattended import journal_action, notify_env

if TYPE_CHECKING:
    from cockpit.face import GateResult

SupervisorFactory = Callable[..., Any]


# ---- what the control reports (the screen turns each into its message) ----
@dataclass(frozen=True)
class RunStarted:
    """A run was launched (attached=False) or found live and attached (attached=True); ended: the
    profile's last run, found crashed (nothing launched)."""

    run: RunInfo | None
    attached: bool
    ended: bool = False


@dataclass(frozen=True)
class PreflightRefused:
    """Preflight found critical problems: nothing was launched. what: "launch", or "restart" (the
    gate refused the new flags: the run was not stopped)."""

    findings: list[Finding]
    what: str = "launch"


@dataclass(frozen=True)
class SupervisorFailed:
    """The supervisor ended with an error; the words are for the operator."""

    error: str


@dataclass(frozen=True)
class ActionDone:
    """A stop / restart / kill the operator asked for finished (ok) or failed (error);
    "preflight-start": the launch's preflight began."""

    what: str
    error: str | None = None


@dataclass(frozen=True)
class LeftoversFound:
    """Processes outside the run still hold GPU memory; `changes` is the restart that waits on
    them (None after a plain stop)."""

    leftovers: tuple[GpuProcess, ...]
    changes: tuple[FlagChange, ...] | None


RunEvent = RunStarted | PreflightRefused | SupervisorFailed | ActionDone | LeftoversFound


def error_words(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class RunControl:
    def __init__(
        self,
        profile: Profile,
        factory: SupervisorFactory | None,
        *,
        on_event: Callable[[RunEvent], None],
        on_snapshot: Callable[[RunSnapshot], None],
        on_logs: Callable[[LogBatch], None],
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.profile = profile
        self.factory = factory
        self.overrides = overrides
        self.on_event = on_event
        self.on_snapshot = on_snapshot
        self.on_logs = on_logs
        self.supervisor: Any = None
        self.busy: str | None = None  # "stopping" / "restarting" while such an action runs
        self._watching_serving = False

    def watch_serving(self, on: bool) -> None:
        """The operator is (or is no longer) looking at the serving figures: /metrics at the full
        rate while they do (docs/OPERATIONS.md "Footprint"); a flag, no I/O."""
        self._watching_serving = on
        serving = getattr(self.supervisor, "serving", None)
        if serving is not None:
            serving.watching = on

    @property
    def can_launch(self) -> bool:
        """A supervisor can be made (none without a factory: the dashboard only shows)."""
        return self.factory is not None

    @property
    def run_info(self) -> RunInfo | None:
        return None if self.supervisor is None else self.supervisor.run_info

    # ---- launch / attach, then follow ----
    def _make_supervisor(self) -> Any:
        assert self.factory is not None
        sup = self.factory(self.profile, on_snapshot=self.on_snapshot, on_logs=self.on_logs)
        serving = getattr(sup, "serving", None)
        if serving is not None:
            serving.watching = self._watching_serving
        return sup

    async def preflight(self, sup: Any) -> GateResult:
        """The launch's gate: the one call, here (FlagError raised: the flags make no argv)."""
        checked: GateResult = await sup.gate(self.overrides)
        checked.node_argvs()
        return checked

    async def launch(self, ask_if_crashed: bool = True) -> None:
        """Attach to the profile's live run, or launch it after preflight; then follow it."""
        try:
            if self.supervisor is None:
                self.supervisor = self._make_supervisor()
            sup = self.supervisor
            run = await sup.attach()
            if run is None and ask_if_crashed:
                # The profile's last run crashed: show that crash and ask (the crash dialog's R/r,
                # or `l`) before anything is launched over it; a run stopped on purpose is no news.
                ended = await sup.attach(include_ended=True)
                if ended is not None and getattr(sup, "lifecycle", "") == "failed":
                    self.on_event(RunStarted(ended, attached=True, ended=True))
                    await sup.run()
                    return
            if run is None:
                self.on_event(ActionDone("preflight-start"))
                checked = await self.preflight(sup)
                if checked.preflight_refuses:
                    self.on_event(PreflightRefused(list(checked.findings)))
                    return
                go = checked.launch()  # the gate's go: the only value a target launches
                run = await sup.start(go)
                self.on_event(RunStarted(run, attached=False))
            else:
                self.on_event(RunStarted(run, attached=True))
            await sup.run()
        except Exception as exc:  # shown to the operator, never a traceback on screen
            self.on_event(SupervisorFailed(f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)))

    @property
    def following(self) -> bool:
        """A follow loop (Supervisor.run) is running: the supervisor's own word, not a copy of it."""
        return self.supervisor is not None and bool(self.supervisor.following)

    async def follow_again(self) -> None:
        """After a restart, follow the new run if the previous follow ended with the old one."""
        if self.following or self.supervisor is None:
            return
        try:
            await self.supervisor.run()
        except Exception as exc:
            self.on_event(SupervisorFailed(error_words(exc)))

    def renew(self, profile: Profile) -> Coroutine[Any, Any, None] | None:
        """Forget the supervisor before a fresh launch of `profile` (reloaded from its file); the
        old one's close, for the caller to run, or None."""
        self.profile = profile
        old, self.supervisor = self.supervisor, None
        return self._close(old) if old is not None else None

    # ---- actions on the run ----
    async def restart(self, changes: tuple[FlagChange, ...], kill_leftovers: bool = False, debug: bool = False) -> None:
        self.busy = "restarting"
        # the supervisor's publisher goes on through the restart: its snapshots show the progress

        try:
            # the one restart: the gate on the new flags first (refused: nothing is stopped)
            if debug:
                await self.supervisor.restart(list(changes), kill_leftovers=kill_leftovers, debug=True)
            else:
                await self.supervisor.restart(list(changes), kill_leftovers=kill_leftovers)
            self.on_event(ActionDone("restart"))
        except GateRefused as refused:
            self.on_event(PreflightRefused(refused.findings, what="restart"))
        except Exception as exc:
            leftovers = getattr(exc, "leftovers", None)
            if leftovers:
                # Never launch on top of memory someone else holds: the operator decides.
                self.on_event(LeftoversFound(tuple(leftovers), changes))
            else:
                self.on_event(ActionDone("restart", error_words(exc)))
        finally:
            self.busy = None
        await self.follow_again()

    async def stop(self, leaving: bool = False) -> None:
        """Stop the run and wait until its GPU memory is released. `leaving`: the dashboard closes
        next, so neither leftovers nor the outcome are reported."""
        self.busy = "stopping"
        error = None
        try:
            result = await self.supervisor.stop()
            leftovers = tuple(getattr(result, "leftovers", None) or ())
            if leftovers and not leaving:
                self.on_event(LeftoversFound(leftovers, None))
        except Exception as exc:
            error = error_words(exc)
        finally:
            self.busy = None
        if not leaving:
            self.on_event(ActionDone("stop", error))

    async def kill(self, procs: tuple[GpuProcess, ...]) -> None:
        try:
            await self.supervisor.kill_pids(procs)
            self.on_event(ActionDone("kill"))
        except Exception as exc:
            self.on_event(ActionDone("kill", error_words(exc)))

    async def stacks(self) -> list[str]:
        """py-spy stacks of every process of the run, saved with the run: the lines to show
        (the odd one out first) and where they were saved. Raises on failure."""

        dump = await collect_stacks(self.supervisor)
        path = await asyncio.to_thread(save_stacks, dump)
        return [*render_stacks(dump), "", f"saved: {path}"]

    async def close(self) -> None:
        """Stop following; the server keeps running whatever the follower did."""
        await self._close(self.supervisor)

    @staticmethod
    async def _close(sup: Any) -> None:
        if sup is None:
            return
        with contextlib.suppress(Exception):
            await sup.close()

    # ---- unattended mode's I/O (the policy decides, the screen shows) ----
    async def journal(self, run_id: str | None, decision: Any, crash: Any) -> str | None:
        """Journal one automatic action; the reason it could not be, or None."""

        try:
            await asyncio.to_thread(journal_action, self.profile.name, run_id, decision, crash)
        except OSError as exc:
            return f"automatic action not journaled: {exc.strerror or exc}"
        return None

    async def notify_command(self, event: str, run_id: str | None, summary: str, action: str) -> tuple[str, str] | None:
        """Run the profile's `notify:` command with the news in its environment (never on its
        command line); (severity, words) when it failed, else None."""
        import subprocess


        argv = list(self.profile.notify or ())
        if not argv:
            return None
        env = {**os.environ, **notify_env(event, self.profile.name, run_id, summary, action)}

        def run() -> int:
            return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=30, check=False).returncode

        try:
            code = await asyncio.to_thread(run)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return "error", f"notify command {argv[0]} failed: {exc}"
        if code:
            return "warning", f"notify command {argv[0]} exited with code {code}"
        return None


GROUP_READ_TIMEOUT_S = 10.0


async def read_run(profile: Profile, timeout: float = GROUP_READ_TIMEOUT_S) -> tuple[RunSnapshot | None, str | None]:
    """Another profile's run (a prefill/decode deployment's other group) read once: its snapshot
    (None when it has no run) or the error words."""

    snap, error = None, None
    sup = Supervisor(profile)
    try:
        info = await asyncio.wait_for(sup.attach(include_ended=True), timeout=timeout)
        if info is not None:
            snap = await asyncio.wait_for(sup.refresh_once(), timeout=timeout)
    except Exception as exc:  # an unreachable host: the line says so, the dashboard goes on
        error = error_words(exc)
    finally:
        with contextlib.suppress(Exception):
            await sup.close()
    return snap, error
