"""Engine-neutral scoring of the steps `cockpit tune` benched: which one is best.

Each engine's tuning policy (cockpit/backends/<engine>/tuning.py) decides which steps kept its
headroom target (the engines reserve memory differently); what is shared is how a benchmark is
scored against the objective and the SLO, and how near ties are broken. Nothing here may import an
engine package (import-linter enforces it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


class Benched(Protocol):
    """What the scoring reads of an engine's `Step`."""

    @property
    def output_tok_s(self) -> float | None: ...
    @property
    def ttft_p99_ms(self) -> float | None: ...
    @property
    def itl_p99_ms(self) -> float | None: ...
    @property
    def kv_tokens(self) -> int | None: ...


StepT = TypeVar("StepT", bound=Benched)


@dataclass(frozen=True)
class BaseStep:
    """What every engine's tuner records of one launch (None: not measured); each engine's `Step`
    adds the flags it tunes, in its own words."""

    flags: dict[str, Any]  # server flags as launched (profile keys)
    outcome: str  # ready, crashed, skipped-by-prediction, refused (by the gate: never launched)
    headroom_gb: float | None = None  # the worst rank's free GiB after graph capture (after start-up)
    pre_load_avail_gb: float | None = None  # free memory before the weights, minimum over ranks
    graph_gb: float | None = None  # the largest graph memory of a rank
    kv_tokens: int | None = None
    kv_gb: float | None = None
    concurrency: int | None = None  # what the benchmark kept in flight
    output_tok_s: float | None = None
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    peak_running: float | None = None
    peak_queue: float | None = None
    peak_token_usage: float | None = None
    crash_kind: str | None = None
    advice: dict[str, Any] = field(default_factory=dict)  # flag -> value the diagnosis proposed
    predicted_headroom_gb: float | None = None
    run_id: str | None = None
    why: str = ""
    version: str | None = None  # the server version the log showed
    launch_s: float | None = None  # wall seconds from launch to READY (or the crash)
    bench_s: float | None = None  # wall seconds of the benchmark


def objective_value(s: Benched, objective: str) -> float | None:
    """Higher is better: output tokens/s, or the negated TTFT p99 for `ttft-p99`."""
    if objective == "ttft-p99":
        return None if s.ttft_p99_ms is None else -s.ttft_p99_ms
    return s.output_tok_s


def meets_slo(s: Benched, slo: dict[str, float]) -> bool:
    """Every SLO limit (`ttft_p99`, `itl_p99`, ms) measured and kept; an unmeasured one fails."""
    for key, limit in slo.items():
        v = s.ttft_p99_ms if key == "ttft_p99" else s.itl_p99_ms if key == "itl_p99" else None
        if v is None or v > limit:
            return False
    return True


def pick_best(ok: Sequence[StepT], history: Sequence[StepT], objective: str, tie: float) -> StepT | None:
    """The best of `ok` (steps that kept the target and the SLO, with the objective measured).
    Measurements within `tie` of the top are a tie on a loaded machine; the tie goes to the larger
    KV pool (the most room for a burst), then to the later step of `history`."""
    if not ok:
        return None
    top = max(objective_value(s, objective) or 0.0 for s in ok)
    near = [s for s in ok if (objective_value(s, objective) or 0.0) >= top - abs(top) * tie]
    return max(near, key=lambda s: (s.kv_tokens or 0, history.index(s)))


@dataclass(frozen=True)
class Move:
    """The tuner's next launch: the flags that differ from the profile, why, and what it should leave."""

    overrides: dict[str, Any]  # the flags that differ from the profile for the next launch
    why: str
    predicted_headroom_gb: float | None
