"""Hang detection: a server that is up and answers nothing, told apart from one that is idle.

A hung engine keeps its HTTP front end alive: vLLM's `/health` answers 200 with a worker stopped,
and the engine's own gauges freeze at their last values (`num_requests_running` may read 0 while a
request waits). So the verdict rests on what still moves, never on a gauge alone:

- **movement**: the engine's generation (or prompt) token counter grew, or a batch/statistics line
  reported tokens moving (`RunState.progress_lines` grew);
- **outstanding work**: a request is known to wait — Cockpit's own probe request (a one-token
  completion, sent only when nothing has moved for a while) has not been answered, or the engine's
  gauges say requests are running or waiting.

A run is `hung` when work is outstanding and nothing moved for `hang_after_s` seconds. It is
`ready` again as soon as something moves (or the probe is answered). Per rank: when a rank's log
has been silent for the window while another rank went on logging, the evidence names it.

Pure: the caller passes the clock (seconds, monotonic) and what it observed; no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The default window, in seconds, for every engine (the profile's `policy.hang-after-s` overrides it);
# why 60 s suits both engines Cockpit ships:
# vLLM: a decode step is milliseconds and its stats logger prints every 10 s while it serves;
#   nothing of vLLM's own fires on a hang (no watchdog), so Cockpit's window is the only one: 60 s
#   (six of vLLM's stats intervals) keeps a long prefill of a huge prompt from reading as hung.
# SGLang: its scheduler watchdog (--watchdog-timeout, 300 s by default) dumps stacks and kills the
#   server; Cockpit says `hung` well before that so the operator can take stacks first: 60 s.
DEFAULT_HANG_AFTER_S = 60.0


def hang_after_s(backend: str, configured: float | None) -> float:
    """The window in force: the profile's `policy.hang-after-s`, else the default (one for every
    engine: `backend` is kept for an engine that will need its own)."""
    if configured is not None:
        return float(configured)
    return DEFAULT_HANG_AFTER_S


@dataclass
class HangWatch:
    """What moved when, and since when work has been outstanding."""

    hang_after_s: float
    last_movement: float | None = None  # monotonic seconds of the last observed movement
    _tokens: float | None = None  # the last generation+prompt token counter value seen
    _progress_lines: int | None = None
    probe_sent_at: float | None = None  # the probe request in flight (None: none is)
    probe_answered_at: float | None = None
    outstanding_gauge: int | None = None  # running + waiting, as the engine's gauges last said
    rank_last_line: dict[str, float] = field(default_factory=dict)
    started_at: float | None = None

    def begin(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now
            self.last_movement = now  # nothing is known to be stuck before watching starts

    def _moved(self, now: float) -> None:
        self.last_movement = now

    def tokens(self, now: float, total: float | None) -> None:
        """The engine's cumulative token counters (generation + prompt); None: not reported."""
        self.begin(now)
        if total is None:
            return
        if self._tokens is not None and total != self._tokens:
            self._moved(now)
        self._tokens = total

    def progress_lines(self, now: float, count: int) -> None:
        """How many batch/statistics lines reported tokens moving so far (RunState.progress_lines)."""
        self.begin(now)
        if self._progress_lines is not None and count > self._progress_lines:
            self._moved(now)
        self._progress_lines = count

    def outstanding(self, now: float, running: int | None, waiting: int | None) -> None:
        self.begin(now)
        if running is None and waiting is None:
            self.outstanding_gauge = None
        else:
            self.outstanding_gauge = (running or 0) + (waiting or 0)

    def log_line(self, now: float, rank: str | None) -> None:
        if rank:
            self.rank_last_line[rank] = now

    def probe_sent(self, now: float) -> None:
        self.begin(now)
        self.probe_sent_at = now

    def probe_answered(self, now: float) -> None:
        """The probe completed: the engine generated its token."""
        self.probe_sent_at = None
        self.probe_answered_at = now
        self._moved(now)

    def probe_failed(self) -> None:
        """The probe got an error answer (not a hang: the engine said something)."""
        self.probe_sent_at = None

    def still_for(self, now: float) -> float:
        """Seconds since anything moved (0 before watching starts)."""
        return 0.0 if self.last_movement is None else max(0.0, now - self.last_movement)

    def wants_probe(self, now: float, probe_after_s: float) -> bool:
        """Send a probe when none is in flight and nothing moved for `probe_after_s`."""
        return self.probe_sent_at is None and self.still_for(now) >= probe_after_s

    def silent_ranks(self, now: float) -> list[str]:
        """Ranks whose log has been silent for the window while another rank logged within it."""
        if len(self.rank_last_line) < 2:
            return []
        recent = [r for r, t in self.rank_last_line.items() if now - t < self.hang_after_s]
        if not recent:
            return []
        return sorted(r for r, t in self.rank_last_line.items() if now - t >= self.hang_after_s)

    def verdict(self, now: float) -> dict[str, Any] | None:
        """The evidence of a hang, or None when the run is not hung."""
        still = self.still_for(now)
        if still < self.hang_after_s:
            return None
        probe_wait = None if self.probe_sent_at is None else now - self.probe_sent_at
        outstanding = (probe_wait is not None and probe_wait >= self.hang_after_s) or bool(self.outstanding_gauge)
        if not outstanding:
            return None
        reasons = []
        if probe_wait is not None:
            reasons.append(f"Cockpit's probe request unanswered for {probe_wait:.0f} s")
        if self.outstanding_gauge:
            n = self.outstanding_gauge
            reasons.append(f"the engine reports {n:g} request{'' if n == 1 else 's'} running or waiting")
        reasons.append(f"no token generated and no batch line for {still:.0f} s")
        silent = self.silent_ranks(now)
        if silent:
            reasons.append("silent log: " + ", ".join(silent))
        return {
            "hang_after_s": self.hang_after_s,
            "still_for_s": round(still, 1),
            "probe_waiting_s": None if probe_wait is None else round(probe_wait, 1),
            "requests_outstanding": self.outstanding_gauge,
            "silent_ranks": silent,
            "reason": "; ".join(reasons),
        }
