"""What crosses from the supervisor (I/O) to the UI and the CLI: frozen, timestamped snapshots.

The UI never reaches back into the supervisor's internals: it receives `RunSnapshot`s and
`LogBatch`es (batched at 10-20 Hz) and sends commands (start, stop, restart with changes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState
from cockpit.telemetry.samples import GpuProcess, GpuSample, HostSample

__all__ = ["LIFECYCLES", "NODE_STATES", "GpuProcess", "GpuSample", "HostSample", "HostsView", "LogBatch", "LogLine",
           "NodeView", "RunEnd", "RunInfo", "RunSnapshot", "ServingPoint", "SlurmView", "TargetView"]

# Lifecycle of the run as the supervisor drives it (distinct from the server's phase in RunState).
LIFECYCLES = ("idle", "preflight", "launching", "running", "stopping", "waiting_gpu_release", "stopped", "failed")


@dataclass(frozen=True)
class RunInfo:
    id: str
    profile: str
    hosts: tuple[str, ...]
    pid: int | None  # the server's main pid on node 0
    pgid: int | None
    started_at: str  # ISO-8601 UTC
    run_dir: str  # on node 0
    log_path: str  # on node 0
    flags: dict[str, Any] = field(default_factory=dict)  # server flags as launched (profile keys)
    version: str | None = None


# a node's server as the supervisor knows it: running; ended unasked on node k > 0 (the node_died
# finding); ended by a stop; ended otherwise (node 0: the run's crash says how); no run there yet
NODE_STATES = ("alive", "died", "stopped", "exited", "not running")


@dataclass(frozen=True)
class NodeView:
    """One node of the run, for the ranks view's heading above that node's ranks: which host it is,
    the address the other nodes reach it at (the profile's `address`, None when it names none) and
    whether its server lives. Its ranks are the ones `RunSnapshot.rank_gpu` places on `host`."""

    index: int
    host: str  # the node's label, as rank_gpu, the GPU samples and the processes name it
    address: str | None = None
    state: str = "not running"  # one of NODE_STATES


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based line number within the run's log
    rank: str | None  # "TP3"; None for the main process / unprefixed text
    text: str  # one line, ANSI stripped, capped in length
    host: str = ""


@dataclass(frozen=True)
class LogBatch:
    lines: tuple[LogLine, ...]
    dropped: int = 0  # lines not delivered because the consumer fell behind (counted, never silent)
    own: int = 0  # access lines of Cockpit's own requests left out (cockpit/core/ownlines.py)


@dataclass(frozen=True)
class HostsView:
    """Where a `hosts:` run is (cockpit/supervisor/targets/hosts.py): its hosts, one node each."""

    hosts: tuple[str, ...] = ()
    kind: Literal["hosts"] = "hosts"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "hosts": list(self.hosts)}


@dataclass(frozen=True)
class SlurmView:
    """Where a `target: {kind: slurm}` run is, in Slurm's words (cockpit/supervisor/targets/slurm.py).
    None in a field: Slurm has not said (no answer yet, or nothing to say: no reason, no nodes yet)."""

    job_id: str
    login: str
    state: str | None = None  # PENDING, RUNNING, CANCELLED, NODE_FAIL, TIMEOUT…
    reason: str | None = None  # Slurm's reason (Resources, Priority, NodeDown, TimeLimit…)
    nodes: tuple[str, ...] = ()  # the allocation's node names, node rank order
    node_list: str | None = None  # as Slurm writes it (gpu[01-02])
    time_left: str | None = None
    time_limit: str | None = None
    exit_code: str | None = None  # Slurm's "code:signal"
    words: str | None = None  # the state in the operator's words (SlurmJob.describe)
    telemetry: str | None = None  # why the nodes' GPUs are not measured; None when they are
    checked_at: float | None = None  # time.time() of Slurm's last answer
    kind: Literal["slurm"] = "slurm"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}

    def job_json(self) -> dict[str, Any]:
        """The `slurm` object of `status --json` (docs/OPERATIONS.md, "Slurm"): all but `kind`."""
        return {k: v for k, v in self.to_json().items() if k != "kind"}


# the target a run is on, as the snapshot carries it; a third target adds its view here
TargetView = HostsView | SlurmView

# a run is over once its server's log says it crashed or stopped, or once the supervisor stopped
# following it (stopped by a stop, failed on its own)
ENDED_PHASES = ("crashed", "stopped")
ENDED_LIFECYCLES = ("stopped", "failed")


@dataclass(frozen=True)
class ServingPoint:
    """One read of the engine's /metrics as the throughput and token-usage plots take it: typed,
    None where the engine does not report the figure. `figures` is the read itself (the snapshot's
    `serving`): consecutive snapshots carry the same read until the next one, and a plot takes
    each read once."""

    at: str  # the snapshot's time, as the plots label their points
    gen_tok_s: float | None
    kv_usage: float | None  # the share of the KV pool in use, 0..1 (the engine reports a percent)
    figures: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class RunEnd:
    """How the run ended, once it has (`RunSnapshot.end`; None while it lives)."""

    outcome: Literal["crashed", "stopped", "failed"]
    crash_kind: str | None = None  # the log's diagnosis (cockpit/core/crashstory.py), when it crashed
    by: str | None = None  # who ended node 0's server (`ending`'s "by"), once its exit was seen
    exit_code: int | None = None


def _serving_point(taken_at: float, serving: dict[str, Any] | None) -> ServingPoint | None:
    if serving is None:
        return None
    gen, kv = serving.get("gen_tok_s"), serving.get("kv_usage_pct")
    return ServingPoint(f"{taken_at:.1f}", None if gen is None else float(gen),
                        None if kv is None else float(kv) / 100, serving)


def _run_end(state: RunState, lifecycle: str, ending: dict[str, Any] | None) -> RunEnd | None:
    if state.phase not in ENDED_PHASES and lifecycle not in ENDED_LIFECYCLES:
        return None
    crash = state.crash
    outcome: Literal["crashed", "stopped", "failed"] = (
        "crashed" if state.phase == "crashed" else "failed" if lifecycle == "failed" else "stopped")
    code = (ending or {}).get("exit_code")
    return RunEnd(outcome, crash.kind if crash is not None else None, (ending or {}).get("by"),
                  code if isinstance(code, int) else None)


def _host_cache_gb_per_rank(backend: str | None, run: RunInfo | None) -> float | None:
    """The host cache per rank the run's flags set (the log's own figure is `state`'s)."""
    if run is None or not run.flags:
        return None
    from cockpit.backends import host_cache_gb_per_rank

    try:
        return host_cache_gb_per_rank(backend, run.flags)
    except ValueError:  # an engine this installation does not know: nothing to say
        return None


@dataclass(frozen=True)
class RunSnapshot:
    taken_at: float
    profile: str
    lifecycle: str  # one of LIFECYCLES
    state: RunState  # an independent copy
    findings: tuple[Finding, ...]
    run: RunInfo | None = None
    gpus: tuple[GpuSample, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    hosts: tuple[HostSample, ...] = ()
    readiness: str = ""  # what readiness rests on, e.g. "log + /health"
    health: str | None = None  # last probe: "refused", "503", "200", None = not probed yet
    flag_diff: tuple[FlagChange, ...] = ()  # flags of this run that differ from the profile
    progress: str = ""  # human words for what the supervisor is doing ("waiting for GPU 3 to free: pid 4412")
    rank_gpu: dict[str, tuple[str, int]] = field(default_factory=dict)  # rank -> (host, GPU index)
    # where the run is: its hosts, or its Slurm job (kind, job id, state, reason, nodes, time left);
    # None while the target has nothing to say yet (a Slurm profile before its job is submitted)
    target: TargetView | None = None
    # the engine's own serving figures from /metrics (cockpit/core/serving.py); None: not read
    serving: dict[str, Any] | None = None
    # how node 0's server ended, once it has: {"exit_code", "signal" (SIGKILL…, or None), "by":
    # "cockpit" | "operator" | "external" | "engine"}; "stopped" only when by is cockpit or operator
    ending: dict[str, Any] | None = None
    # every node of the run in node-rank order (one for a single-node run); () when not known
    nodes: tuple[NodeView, ...] = ()
    # ---- what the views show, typed, derived here from the fields above (never given) ----
    serving_point: ServingPoint | None = field(init=False, compare=False, repr=False)  # None: /metrics not read
    end: RunEnd | None = field(init=False, compare=False, repr=False)  # None: the run lives (or none yet)
    host_cache_gb_per_rank: float | None = field(init=False, compare=False, repr=False)  # per the run's flags
    host_cache_label: str | None = field(init=False, compare=False, repr=False)  # the engine's word for it

    def __post_init__(self) -> None:
        from cockpit.backends import words_of

        # the views compute nothing from the raw fields: each derived value has this one owner,
        # and a snapshot built anywhere (the Supervisor, `dataclasses.replace`, a test) carries them
        derived = {
            "serving_point": _serving_point(self.taken_at, self.serving),
            "end": _run_end(self.state, self.lifecycle, self.ending),
            "host_cache_gb_per_rank": _host_cache_gb_per_rank(self.state.backend, self.run),
            "host_cache_label": words_of(self.state.backend).host_cache_label,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def ended(self) -> bool:
        return self.end is not None
