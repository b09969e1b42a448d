"""Hang detection: a server that is up and answers nothing, told apart from one that is idle.

A hung engine keeps its HTTP front end alive: vLLM's `/health` answers 200 with a worker stopped,
and the engine's own gauges freeze at their last values (`num_requests_running` may read 0 while a
request waits). So the verdict rests on what still moves, never on a gauge alone:

- **movement**: the engine's generation (or prompt) token counter grew, or a batch/statistics line
  reported tokens moving (`RunState.progress_lines` grew);
- **outstanding work**: Cockpit's own probe requests (the smallest completion the engine takes)
  wait unanswered. The watch sends one only when the engine's gauges say requests are running or
  waiting and nothing has moved for a while — never to an idle server (`wants_probe`); `cockpit
  status`, asked by the operator, sends its two whatever the gauges say.

A run is `hung` when nothing moved for `hang_after_s` seconds and **two** probes, sent apart, wait
unanswered, the older for the whole window. A gauge alone is not enough, nor is one probe: a slow
first token (a long first prefill, a compile on the first request) holds one request and the gauges
for a while, then answers — read as a hang, the run flapped ready → hung → ready and `on-hang:
restart` restarted a healthy server. It is `ready` again as soon as something moves (or a probe is
answered). The evidence says how long after serving began the stillness started
(`stuck_since_ready_s`): the unattended policy never restarts a run stuck within its first window. Per rank: when a rank's log
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
    probes: list[float] = field(default_factory=list)  # when each probe in flight was sent (≤ 2)
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

    @property
    def probe_sent_at(self) -> float | None:
        """When the oldest probe in flight was sent (None: none is)."""
        return min(self.probes) if self.probes else None

    def probe_sent(self, now: float) -> float:
        """A probe went out; returns its mark for probe_answered/probe_failed."""
        self.begin(now)
        self.probes.append(now)
        return now

    def probe_answered(self, now: float) -> None:
        """A probe completed: the engine generated its token, so every earlier one is moot too."""
        self.probes.clear()
        self.probe_answered_at = now
        self._moved(now)

    def probe_failed(self, sent: float | None = None) -> None:
        """A probe got an error answer (not a hang: the engine said something)."""
        if sent is None:
            self.probes.clear()
        elif sent in self.probes:
            self.probes.remove(sent)

    def still_for(self, now: float) -> float:
        """Seconds since anything moved (0 before watching starts)."""
        return 0.0 if self.last_movement is None else max(0.0, now - self.last_movement)

    def wants_probe(self, now: float, probe_after_s: float) -> bool:
        """Send a probe when the engine's gauges say work is outstanding and nothing moved for
        `probe_after_s` — never to an idle server (gauges at 0) nor without gauges (no /metrics:
        the log and the readiness probe are all the watch has). A second one once the first has
        waited `probe_after_s` more; never a third."""
        if not self.outstanding_gauge or self.still_for(now) < probe_after_s:
            return False
        return self.second_probe_due(now, probe_after_s) or not self.probes

    def second_probe_due(self, now: float, probe_after_s: float) -> bool:
        """One probe waits, unanswered for `probe_after_s`: time for the second."""
        return len(self.probes) == 1 and now - self.probes[0] >= probe_after_s

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
        # two probes unanswered, the older for the whole window: one request stuck behind a slow
        # first token, or gauges frozen at a busy value, are not enough
        if len(self.probes) < 2 or probe_wait is None or probe_wait < self.hang_after_s:
            return None
        reasons = [f"Cockpit's {len(self.probes)} probe requests unanswered (the first for {probe_wait:.0f} s)"]
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
            "probes_unanswered": len(self.probes),
            # how long after serving began nothing moved any more (None: before watching began)
            "stuck_since_ready_s": (None if self.started_at is None or self.last_movement is None
                                    else round(max(0.0, self.last_movement - self.started_at), 1)),
            "reason": "; ".join(reasons),
        }
