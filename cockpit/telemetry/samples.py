"""What telemetry reads, as the rest of Cockpit sees it: GPUs, the processes on them, host RAM.

`sample_from_agent` converts one JSON object of the agent (cockpit/remote/programs/agent.py), however
it was read (over a transport, or in-process through the NVML gateway in nvml.py). None means
unknown, never 0. Units: GPU memory in GiB (MiB / 1024) like nvidia-smi and SGLang print it;
host RAM in decimal GB.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.numbers import as_float, as_int

UNKNOWN_GPU = -1  # GpuProcess.gpu_index when the agent could not tell which GPU


@dataclass(frozen=True)
class GpuSample:
    """One GPU as telemetry saw it. None means unknown — never shown as 0."""

    host: str
    index: int
    uuid: str | None
    name: str | None
    used_gb: float | None  # GiB
    total_gb: float | None  # GiB
    util_pct: float | None
    temp_c: float | None
    power_w: float | None
    sampled_at: float  # time.time() on the collecting host
    source: str  # "nvml", "nvidia-smi", "sim", "none"


@dataclass(frozen=True)
class GpuProcess:
    host: str
    pid: int
    gpu_index: int
    used_gb: float | None
    belongs_to_run: bool  # False: a leftover or another user's process


@dataclass(frozen=True)
class HostSample:
    host: str
    mem_total_gb: float | None  # decimal GB
    mem_available_gb: float | None  # min(MemAvailable, cgroup headroom)
    cgroup_limit_gb: float | None
    sampled_at: float
    source: str


@dataclass(frozen=True)
class TelemetrySample:
    """One agent line, converted. `errors` are shown to the operator; the stream goes on."""

    host_label: str
    sampled_at: float  # when the agent took it (the host's clock)
    source: str  # "nvml", "nvidia-smi", "sim", "none"
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    host: HostSample | None = None
    pids_alive: Mapping[int, bool] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    @property
    def gpu_processes(self) -> tuple[GpuProcess, ...]:
        return self.processes


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def sample_from_agent(obj: Mapping[str, Any], host_label: str) -> TelemetrySample:
    """Convert one agent JSON object. Tolerates missing and mistyped fields (they become None)."""
    ts = as_float(obj.get("ts")) or time.time()
    gpu_ts = as_float(obj.get("gpu_ts")) or ts
    source = _s(obj.get("source")) or "none"
    gpus: list[GpuSample] = []
    for g in obj.get("gpus") or ():
        if not isinstance(g, Mapping) or as_int(g.get("index")) is None:
            continue
        used = as_float(g.get("mem_used_mib"))
        total = as_float(g.get("mem_total_mib"))
        gpus.append(
            GpuSample(
                host=host_label,
                index=int(g["index"]),
                uuid=_s(g.get("uuid")),
                name=_s(g.get("name")),
                used_gb=used / 1024.0 if used is not None else None,
                total_gb=total / 1024.0 if total is not None else None,
                util_pct=as_float(g.get("util_pct")),
                temp_c=as_float(g.get("temp_c")),
                power_w=as_float(g.get("power_w")),
                sampled_at=gpu_ts,
                source=source,
            )
        )
    procs: list[GpuProcess] = []
    for p in obj.get("procs") or ():
        if not isinstance(p, Mapping) or as_int(p.get("pid")) is None:
            continue
        used = as_float(p.get("mem_used_mib"))
        idx = as_int(p.get("gpu_index"))
        procs.append(
            GpuProcess(
                host=host_label,
                pid=int(p["pid"]),
                gpu_index=idx if idx is not None else UNKNOWN_GPU,
                used_gb=used / 1024.0 if used is not None else None,
                belongs_to_run=bool(p.get("belongs_to_run")),
            )
        )
    host = None
    h = obj.get("host")
    if isinstance(h, Mapping):
        total_kb = as_float(h.get("mem_total_kb"))
        avail_kb = as_float(h.get("mem_available_kb"))
        limit = as_float(h.get("cgroup_limit_bytes"))
        usage = as_float(h.get("cgroup_usage_bytes"))
        avail = avail_kb * 1024 / 1e9 if avail_kb is not None else None
        if limit is not None and usage is not None:
            # In a container the cgroup, not the host, decides when the OOM killer comes.
            headroom = max(0.0, limit - usage) / 1e9
            avail = headroom if avail is None else min(avail, headroom)
        host = HostSample(
            host=host_label,
            mem_total_gb=total_kb * 1024 / 1e9 if total_kb is not None else None,
            mem_available_gb=avail,
            cgroup_limit_gb=limit / 1e9 if limit is not None else None,
            sampled_at=ts,
            source=source,
        )
    alive: dict[int, bool] = {}
    pa = obj.get("pids_alive")
    if isinstance(pa, Mapping):
        for k, v in pa.items():
            with contextlib.suppress(TypeError, ValueError):
                alive[int(k)] = bool(v)
    errs = obj.get("errors")
    errors = tuple(str(e) for e in errs) if isinstance(errs, list) else ()
    return TelemetrySample(
        host_label=host_label,
        sampled_at=ts,
        source=source,
        gpus=tuple(gpus),
        processes=tuple(procs),
        host=host,
        pids_alive=alive,
        errors=errors,
    )
