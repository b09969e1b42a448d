"""Telemetry from a host: runs the agent through a transport and turns its JSON lines into samples.

The agent (cockpit/telemetry/agent.py) is sent as source over stdin and run with the profile's
python, so nothing has to be installed on the GPU host. On this machine, when NVML works and no
simulator is asked for, NVML is read in-process instead (cockpit/telemetry/nvml.py).

Units: GPU memory in GiB (MiB / 1024) like nvidia-smi and SGLang print it; host RAM in decimal
GB like `free -g` does not but SGLang's --hicache-size does. Unknown stays None.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.supervisor.api import GpuProcess, GpuSample, HostSample
from cockpit.transport.base import HostKeyError, Transport, TransportError
from cockpit.transport.local import LocalTransport

log = logging.getLogger(__name__)

RESTART_BACKOFF_CAP_S = 30.0
MAX_LINE_BYTES = 1 << 20  # a line longer than this is garbage, not a sample
UNKNOWN_GPU = -1  # GpuProcess.gpu_index when the agent could not tell which GPU


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


@cache
def agent_source() -> bytes:
    """The agent program as sent to the host."""
    return Path(__file__).with_name("agent.py").read_bytes()


def _f(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _i(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return int(v)


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def sample_from_agent(obj: Mapping[str, Any], host_label: str) -> TelemetrySample:
    """Convert one agent JSON object. Tolerates missing and mistyped fields (they become None)."""
    ts = _f(obj.get("ts")) or time.time()
    gpu_ts = _f(obj.get("gpu_ts")) or ts
    source = _s(obj.get("source")) or "none"
    gpus: list[GpuSample] = []
    for g in obj.get("gpus") or ():
        if not isinstance(g, Mapping) or _i(g.get("index")) is None:
            continue
        used = _f(g.get("mem_used_mib"))
        total = _f(g.get("mem_total_mib"))
        gpus.append(
            GpuSample(
                host=host_label,
                index=int(g["index"]),
                uuid=_s(g.get("uuid")),
                name=_s(g.get("name")),
                used_gb=used / 1024.0 if used is not None else None,
                total_gb=total / 1024.0 if total is not None else None,
                util_pct=_f(g.get("util_pct")),
                temp_c=_f(g.get("temp_c")),
                power_w=_f(g.get("power_w")),
                sampled_at=gpu_ts,
                source=source,
            )
        )
    procs: list[GpuProcess] = []
    for p in obj.get("procs") or ():
        if not isinstance(p, Mapping) or _i(p.get("pid")) is None:
            continue
        used = _f(p.get("mem_used_mib"))
        idx = _i(p.get("gpu_index"))
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
        total_kb = _f(h.get("mem_total_kb"))
        avail_kb = _f(h.get("mem_available_kb"))
        limit = _f(h.get("cgroup_limit_bytes"))
        usage = _f(h.get("cgroup_usage_bytes"))
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


def parse_line(line: bytes | str, host_label: str) -> TelemetrySample | None:
    """One line of agent output; None for anything that is not a sample (banners, garbage)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "ts" not in obj:
        return None
    return sample_from_agent(obj, host_label)


def _agent_argv(python: str, interval: float, pids: Iterable[int], once: bool) -> list[str]:
    argv = [python, "-", "--interval", f"{interval:g}"]
    pid_list = ",".join(str(int(p)) for p in pids)
    if pid_list:
        argv += ["--pids", pid_list]
    if once:
        argv.append("--once")
    return argv


def _sim_requested(env: Mapping[str, str] | None) -> bool:
    return bool((env or {}).get("COCKPIT_SIM_GPU_DIR") or os.environ.get("COCKPIT_SIM_GPU_DIR"))


def _use_local_nvml(transport: Transport, env: Mapping[str, str] | None) -> bool:
    if not isinstance(transport, LocalTransport) or _sim_requested(env):
        return False
    from cockpit.telemetry import nvml

    return nvml.available()


def _error_sample(label: str, message: str) -> TelemetrySample:
    return TelemetrySample(host_label=label, sampled_at=time.time(), source="none", errors=(message,))


async def stream_telemetry(
    transport: Transport,
    python: str = "python3",
    *,
    interval: float = 1.0,
    pids: Iterable[int] = (),
    env: Mapping[str, str] | None = None,
    max_restarts: int | None = None,
) -> AsyncGenerator[TelemetrySample, None]:
    """Samples from `transport`'s host, forever (until the consumer stops iterating).

    When the agent dies or cannot start, a sample with source "none" and the reason in `errors`
    is yielded, and the agent is restarted after 1, 2, 4 … s (capped). A refused host key is not
    something a retry fixes: HostKeyError propagates.
    """
    label = transport.label
    pid_list = [int(p) for p in pids]
    if _use_local_nvml(transport, env):
        from cockpit.telemetry import nvml

        while True:
            started = time.monotonic()
            yield await asyncio.to_thread(nvml.read_sample, label, pid_list)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    argv = _agent_argv(python, interval, pid_list, once=False)
    failures = 0
    restarts = 0
    while True:
        reason = ""
        got_sample = False
        stream = None
        try:
            stream = await transport.stream(argv, stdin=agent_source(), env=env)
            buf = b""
            async for chunk in stream.chunks():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    sample = parse_line(line, label)
                    if sample is not None:
                        got_sample = True
                        failures = 0
                        yield sample
                if len(buf) > MAX_LINE_BYTES:
                    buf = b""
            tail = getattr(stream, "stderr_tail", "") or ""
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            reason = f"telemetry agent exited with status {stream.returncode}" + (f": {last}" if last else "")
        except HostKeyError:
            raise
        except TransportError as exc:
            reason = f"telemetry agent could not run: {exc}"
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
        if not got_sample:
            failures += 1
        restarts += 1
        log.debug("telemetry on %s: %s", label, reason)
        yield _error_sample(label, reason)
        if max_restarts is not None and restarts > max_restarts:
            return
        await asyncio.sleep(min(RESTART_BACKOFF_CAP_S, 2.0 ** max(0, failures - 1)))


async def sample_once(
    transport: Transport,
    python: str = "python3",
    *,
    pids: Iterable[int] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> TelemetrySample:
    """One sample now (preflight, "are the GPUs free yet?"). Raises TransportError when it can't."""
    pid_list = [int(p) for p in pids]
    if _use_local_nvml(transport, env):
        from cockpit.telemetry import nvml

        return await asyncio.to_thread(nvml.read_sample, transport.label, pid_list)
    res = await transport.run(
        _agent_argv(python, 1.0, pid_list, once=True), stdin=agent_source(), env=env, timeout=timeout
    )
    for line in res.stdout.splitlines():
        sample = parse_line(line, transport.label)
        if sample is not None:
            return sample
    err = res.stderr.decode("utf-8", "replace").strip().splitlines()
    raise TransportError(
        f"{transport.label}: telemetry agent gave no sample (exit {res.returncode})"
        + (f": {err[-1]}" if err else ""),
        hint=f"check that {python} runs on {transport.label}",
    )


def facts_from_sample(sample: TelemetrySample) -> HostFacts:
    gpus = sample.gpus
    totals = [g.total_gb for g in gpus if g.total_gb is not None]
    free = tuple(
        (g.total_gb - g.used_gb) if g.total_gb is not None and g.used_gb is not None else None for g in gpus
    )
    h = sample.host
    return HostFacts(
        host=sample.host_label,
        mem_total_gb=h.mem_total_gb if h else None,
        mem_available_gb=h.mem_available_gb if h else None,
        gpu_count=len(gpus) if gpus else None,
        gpu_mem_total_gib=min(totals) if totals else None,
        gpu_free_gib=free,
        source="agent" if sample.source != "nvml" else "nvml",
    )


async def host_facts(
    transport: Transport, python: str = "python3", *, env: Mapping[str, str] | None = None
) -> HostFacts:
    """What preflight needs about one host, from one agent sample."""
    return facts_from_sample(await sample_once(transport, python, env=env))
