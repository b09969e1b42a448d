"""Messages from the dashboard's run control (`ui/runcontrol.py`) to the screens, and from a screen
to the app. The run control's callbacks post these (`message_for` turns its events into them);
handlers own the state."""

from __future__ import annotations

from textual.message import Message

from cockpit.face import Finding, FlagChange, GpuProcess, LogBatch, Profile, RunInfo, RunSnapshot
from cockpit.ui import runcontrol


class GroupRead(Message):
    """A prefill/decode deployment's other group's run as its supervisor last read it (None: no
    run, or `error`), from the group controller's watch (`ui/groupcontrol.py`)."""

    def __init__(self, role: str, profile: str, snapshot: RunSnapshot | None, error: str | None = None) -> None:
        super().__init__()
        self.role = role
        self.profile = profile
        self.snapshot = snapshot
        self.error = error


class SnapshotArrived(Message):
    def __init__(self, snapshot: RunSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class LogsArrived(Message):
    def __init__(self, batch: LogBatch) -> None:
        super().__init__()
        self.batch = batch


class RunStarted(Message):
    """A run was launched (attached=False) or found live and attached (attached=True); ended: the
    profile's last run, found crashed (nothing launched)."""

    def __init__(self, run: RunInfo | None, attached: bool, ended: bool = False) -> None:
        super().__init__()
        self.run = run
        self.attached = attached
        self.ended = ended


class PreflightRefused(Message):
    """Preflight found critical problems: nothing was launched. what: "launch", or "restart" (the
    run was not stopped)."""

    def __init__(self, findings: list[Finding], what: str = "launch") -> None:
        super().__init__()
        self.findings = findings
        self.what = what


class SupervisorFailed(Message):
    """The supervisor worker ended with an error; the words are for the operator."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ActionDone(Message):
    """A stop / restart / launch the operator asked for finished (ok) or failed (error)."""

    def __init__(self, what: str, error: str | None = None) -> None:
        super().__init__()
        self.what = what
        self.error = error


class LeftoversFound(Message):
    """Processes outside the run still hold GPU memory after a stop; `changes` is the restart that
    waits on them (None after a plain stop)."""

    def __init__(self, leftovers: tuple[GpuProcess, ...], changes: tuple[FlagChange, ...] | None) -> None:
        super().__init__()
        self.leftovers = leftovers
        self.changes = changes


def message_for(event: runcontrol.RunEvent) -> Message:
    """The message a run control's event is posted as."""
    if isinstance(event, runcontrol.RunStarted):
        return RunStarted(event.run, event.attached, event.ended)
    if isinstance(event, runcontrol.PreflightRefused):
        return PreflightRefused(event.findings, event.what)
    if isinstance(event, runcontrol.SupervisorFailed):
        return SupervisorFailed(event.error)
    if isinstance(event, runcontrol.ActionDone):
        return ActionDone(event.what, event.error)
    return LeftoversFound(event.leftovers, event.changes)


class ProfileChosen(Message):
    """The picker chose a profile: the app opens its dashboard (the picker does not know the app);
    `group`: one group of a prefill/decode profile ("prefill" | "decode"), None for its first."""

    def __init__(self, profile: Profile, group: str | None = None) -> None:
        super().__init__()
        self.profile = profile
        self.group = group
