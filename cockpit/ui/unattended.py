"""Unattended mode: what the dashboard does by itself when a run crashes (profile `on-crash:`).

- `ask` (the default): the crash dialog, as always.
- `restart-with-advice`: restart with the headroom advice when the diagnosis is confident (a CUDA
  OOM or a graph-capture OOM, with a headroom finding that carries a change); never with a setting
  that already crashed, and at most `on-crash-max-per-hour` times in any hour; otherwise ask.
- `restart`: restart unchanged, within the same hourly budget; otherwise ask.
- Backoff: the first automatic restart in an hour is at once; each further one waits
  BACKOFF_FIRST_S × 3^(n−1) (10 s, 30 s, 90 s, 270 s, 810 s, then BACKOFF_MAX_S), where n is the
  number of automatic restarts already made in the last hour. A run that crashes as soon as it
  starts no longer relaunches 60 times in two minutes (the hourly cap alone allowed it). The wait
  is in the decision's words (the header's note, the toast) and in the journal line (`delay_s`).
- `stop`: no restart; the run's processes are stopped so its GPU memory is released.

Every automatic action is journaled (one JSON line per action in `<data dir>/automatic-actions.jsonl`,
see `journal_action`) and shown (the header's note, a toast). The policy is pure: the dashboard
gives it the crash, the findings and the run's flags, and does what it decides.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.face import Crash, Finding, FlagChange, Overrides, data_dir
from cockpit.ui.advice import headroom_finding

CONFIDENT_KINDS = ("cuda_oom", "graph_capture_oom")
HOUR_S = 3600.0
BACKOFF_FIRST_S = 10.0
BACKOFF_FACTOR = 3.0
BACKOFF_MAX_S = 900.0


def backoff_s(earlier: int) -> float:
    """The wait before an automatic restart when `earlier` were made in the last hour."""
    if earlier <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * BACKOFF_FACTOR ** (earlier - 1))


@dataclass(frozen=True)
class Decision:
    action: str  # "ask" | "restart" | "stop"
    changes: tuple[FlagChange, ...] = ()
    reason: str = ""
    delay_s: float = 0.0  # a restart waits this long first (backoff)


def _setting(flags: dict[str, Any], changes: tuple[FlagChange, ...] = ()) -> tuple[tuple[str, str], ...]:
    """A run's flags (with `changes` applied) as a comparable key."""

    merged = Overrides(changes).applied_to(flags)
    return tuple(sorted((k, repr(v)) for k, v in merged.items()))


@dataclass
class Unattended:
    policy: str = "ask"
    max_per_hour: int = 3
    restarts: deque[float] = field(default_factory=deque)
    failed: set[tuple[tuple[str, str], ...]] = field(default_factory=set)  # settings that crashed
    tried: set[tuple[tuple[str, str], ...]] = field(default_factory=set)  # settings launched by us

    def decide(self, crash: Crash, findings: list[Finding] | tuple[Finding, ...], run_flags: dict[str, Any],
               now: float) -> Decision:
        self.failed.add(_setting(run_flags))  # this setting crashed: never again automatically
        if self.policy == "ask":
            return Decision("ask")
        if self.policy == "stop":
            return Decision("stop", reason="on-crash: stop")
        while self.restarts and now - self.restarts[0] >= HOUR_S:
            self.restarts.popleft()
        if len(self.restarts) >= self.max_per_hour:
            return Decision("ask", reason=f"{len(self.restarts)} automatic restarts in the last hour "
                                          f"(on-crash-max-per-hour {self.max_per_hour}): asking")
        if self.policy == "restart":
            return self._restart((), "on-crash: restart (unchanged)", now)
        # restart-with-advice
        advice = headroom_finding(findings)
        if crash.kind not in CONFIDENT_KINDS or advice is None:
            why = f"crash kind {crash.kind}" if crash.kind not in CONFIDENT_KINDS else "no headroom advice"
            return Decision("ask", reason=f"the diagnosis is not confident ({why}): asking")
        changes = tuple(advice.changes)
        setting = _setting(run_flags, changes)
        if setting in self.failed or setting in self.tried:
            words = ", ".join(c.as_diff() for c in changes)
            return Decision("ask", reason=f"{words} already crashed once: asking")
        self.tried.add(setting)
        return self._restart(changes, "on-crash: restart-with-advice", now)

    def decide_hang(self, on_hang: str, now: float, hang: dict[str, Any] | None = None) -> Decision:
        """A hung run: `notify` (the default) rings and notifies only; `restart` restarts it as
        is, within the hourly budget of automatic restarts — never when it stuck within its first
        window after READY (`hang`: the verdict's evidence, cockpit/core/hang.py): a slow first
        token looks the same from outside, and restarting would only start the wait again."""
        if on_hang != "restart":
            return Decision("ask")
        if hang is not None:
            window = hang.get("hang_after_s")
            stuck = hang.get("stuck_since_ready_s")
            if isinstance(window, int | float) and isinstance(stuck, int | float) and stuck < window:
                return Decision("ask", reason=f"stuck {stuck:g} s after READY, within its first {window:g} s "
                                              "(a slow first token looks the same): not restarting")
        while self.restarts and now - self.restarts[0] >= HOUR_S:
            self.restarts.popleft()
        if len(self.restarts) >= self.max_per_hour:
            return Decision("ask", reason=f"{len(self.restarts)} automatic restarts in the last hour "
                                          f"(on-crash-max-per-hour {self.max_per_hour}): not restarting")
        return self._restart((), "on-hang: restart (unchanged)", now)

    def _restart(self, changes: tuple[FlagChange, ...], reason: str, now: float) -> Decision:
        delay = backoff_s(len(self.restarts))
        self.restarts.append(now + delay)  # counted from when it happens
        n = len(self.restarts)
        wait = f", backoff {delay:g} s after {n - 1} in the last hour" if delay else ""
        return Decision("restart", changes, f"{reason}, {n}/{self.max_per_hour} this hour{wait}", delay)


def actions_path() -> Path:

    return data_dir() / "automatic-actions.jsonl"


def journal_action(profile: str, run_id: str | None, decision: Decision, crash: Crash | None) -> Path:
    """Append one automatic action (the operator's record of what happened while away)."""
    path = actions_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": profile,
        "run_id": run_id,
        "action": decision.action,
        "changes": [{"flag": c.flag, "from": c.from_value, "to": c.to_value} for c in decision.changes],
        "reason": decision.reason,
        "delay_s": decision.delay_s,
        "crash_kind": crash.kind if crash else None,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return path


def notify_env(event: str, profile: str, run_id: str | None, summary: str, action: str) -> dict[str, str]:
    """The environment a `notify:` command gets: the crash summary, never on its command line."""
    return {
        "COCKPIT_EVENT": event,  # crashed | recovered | hung | unhung | restart_refused
        "COCKPIT_PROFILE": profile,
        "COCKPIT_RUN_ID": run_id or "",
        "COCKPIT_SUMMARY": summary,
        "COCKPIT_ACTION": action,
    }
