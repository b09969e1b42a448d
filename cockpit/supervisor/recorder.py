"""The journal's view of a supervisor: it subscribes to the published snapshots and records a
run's start, its progress (offered at most once a second; the journal writes only what changed
that an operator looks up, and the running figures every ~30 s: cockpit/journal/journal.py) and
its end. The journal never stops a run:
its failures are logged and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from cockpit.core.findings import Finding
from cockpit.core.state import RunState
from cockpit.supervisor.api import RunInfo, RunSnapshot

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 1.0


class RunJournal(Protocol):
    """What the recorder writes to (cockpit.journal.journal.Journal)."""

    def record_start(self, run: RunInfo, profile_name: str, flags: dict[str, Any]) -> None: ...

    def record_progress(self, run_id: str, state: RunState, findings: list[Finding]) -> None: ...

    def record_end(self, run_id: str, outcome: str, state: RunState | None, findings: list[Finding]) -> None: ...

    def complete_from_state(self, run_id: str, state: RunState, findings: list[Finding], outcome: str) -> None: ...


class Recorder:
    def __init__(self, journal: RunJournal, profile_name: str) -> None:
        self.journal = journal
        self.profile_name = profile_name
        self._ended: str | None = None  # the run id recorded as over
        self._latest: RunSnapshot | None = None  # not yet recorded
        self._written_at = -1e9

    def _guard(self, what: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            log.warning("journal %s failed: %s", what, exc)

    def started(self, run: RunInfo) -> None:
        self._ended = None
        self._guard("record_start", lambda: self.journal.record_start(run, self.profile_name, dict(run.flags)))

    def tag_debug(self, run_id: str, settings: dict[str, Any]) -> None:
        """The run is a debug relaunch (the journal keeps what it added)."""
        tag = getattr(self.journal, "tag_debug", None)
        if tag is not None:
            self._guard("tag_debug", lambda: tag(run_id, settings))

    def on_snapshot(self, snap: RunSnapshot) -> None:
        if snap.run is not None and snap.run.id != self._ended:
            self._latest = snap

    def tick(self, *, force: bool = False) -> float | None:
        """Record the latest snapshot's progress when a second has passed (now with force);
        returns when the next write is due (time.monotonic()), None when nothing waits."""
        snap = self._latest
        if snap is None or snap.run is None:
            return None
        now = time.monotonic()
        if not force and now - self._written_at < PROGRESS_INTERVAL_S:
            return self._written_at + PROGRESS_INTERVAL_S
        self._latest = None
        self._written_at = now
        run_id, state, findings = snap.run.id, snap.state, list(snap.findings)
        # cheap: the journal writes only when something it keeps has changed
        self._guard("record_progress", lambda: self.journal.record_progress(run_id, state, findings))
        return None

    def ended(self, snap: RunSnapshot, outcome: str, *, state_read: bool) -> None:
        """The run is over. `down` stops a run without reading its log: then the journal keeps
        what it learnt so far (state_read False)."""
        if snap.run is None or self._ended == snap.run.id:
            return
        self._ended, self._latest = snap.run.id, None
        run_id = snap.run.id
        state = snap.state if state_read else None
        findings = list(snap.findings) if state_read else []
        self._guard("record_end", lambda: self.journal.record_end(run_id, outcome, state, findings))

    def completed(self, snap: RunSnapshot, outcome: str) -> None:
        """A run nobody watched to its end, completed from its log on a later attach."""
        if snap.run is None:
            return
        self._ended, self._latest = snap.run.id, None
        run_id, state, findings = snap.run.id, snap.state, list(snap.findings)
        self._guard("complete_from_state",
                    lambda: self.journal.complete_from_state(run_id, state, findings, outcome))

    @property
    def is_ended(self) -> bool:
        return self._ended is not None
