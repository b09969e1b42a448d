"""What crosses from the supervisor (I/O) to the UI and the CLI: frozen, timestamped snapshots.

The UI never reaches back into the supervisor's internals: it receives `RunSnapshot`s and
`LogBatch`es (batched at 10-20 Hz) and sends commands (start, stop, restart with changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState
from cockpit.telemetry.samples import GpuProcess, GpuSample, HostSample

__all__ = ["LIFECYCLES", "GpuProcess", "GpuSample", "HostSample", "LogBatch", "LogLine", "RunInfo", "RunSnapshot"]

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
    # a Slurm run: {job_id, state, reason, nodes, time_left, …} (cockpit/slurm/supervisor.py); None otherwise
    slurm: dict[str, Any] | None = None
    # the engine's own serving figures from /metrics (cockpit/core/serving.py); None: not read
    serving: dict[str, Any] | None = None
    # how node 0's server ended, once it has: {"exit_code", "signal" (SIGKILL…, or None), "by":
    # "cockpit" | "operator" | "external" | "engine"}; "stopped" only when by is cockpit or operator
    ending: dict[str, Any] | None = None
