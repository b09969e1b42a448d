"""NVML on this machine, in-process (nvidia-ml-py), for a local run on real GPUs.

This is the one NVML gateway of the cockpit process (telemetry on a local run, `cockpit check`'s
host facts, bench/gpu_check.sh). The reading itself is the agent's own NvmlSource, so local and
remote samples are built by the same code: every NVML call goes through `NvmlSource._q`, which
turns an NVML error into None, shown as unknown. Calls block (NVML can stall for seconds on a sick GPU): callers run them in a thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from cockpit.remote.programs import agent
from cockpit.telemetry.samples import TelemetrySample, sample_from_agent

_lock = threading.Lock()
_source: Any = None
_tried = False
_why_not: str | None = None


def _open() -> Any:
    global _source, _tried, _why_not
    with _lock:
        if not _tried:
            _tried = True
            _source, _why_not = agent.NvmlSource.try_open()
            if _source is None and _why_not is None:
                _why_not = "nvidia-ml-py (pynvml) is not installed"
        return _source


def available() -> bool:
    """True when NVML initialised here (a driver and at least the library are present)."""
    return _open() is not None


def why_unavailable() -> str | None:
    _open()
    return _why_not


def read_raw(pids: list[int] | tuple[int, ...] = ()) -> dict[str, Any]:
    """One sample in the agent's JSON shape (dict), read in this process."""
    source = _open()
    roots = {int(p) for p in pids}
    if source is None:
        return agent.build_sample("none", roots, None, [], [], [why_unavailable() or "NVML unavailable"])
    with _lock:  # NVML handles are not promised to be thread-safe across concurrent callers
        gpu_ts_start = time.time()
        gpus, procs, errors = source.read(roots)
    return agent.build_sample("nvml", roots, gpu_ts_start, gpus, procs, errors)


def read_sample(host_label: str = "local", pids: list[int] | tuple[int, ...] = ()) -> TelemetrySample:
    return sample_from_agent(read_raw(pids), host_label)
