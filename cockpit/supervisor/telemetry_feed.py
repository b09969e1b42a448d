"""Telemetry for the supervisor: the stdlib agent (cockpit/telemetry/agent.py) run on each node.

The agent's text goes over stdin to the node's python, exactly like hostside.py, and prints one
JSON sample per line. Here those samples become the snapshot contract's GpuSample, GpuProcess
and HostSample, and preflight's HostFacts. Values the agent could not read stay None.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.core.profile import Profile
from cockpit.supervisor.api import GpuProcess, GpuSample, HostSample
from cockpit.supervisor.host import HostOps
from cockpit.transport.base import TransportError

MIB_PER_GIB = 1024.0


def agent_source() -> bytes:
    import cockpit.telemetry

    return (Path(cockpit.telemetry.__file__).resolve().parent / "agent.py").read_bytes()


def sim_dir_of(profile: Profile) -> str | None:
    """The simulated GPUs' directory a profile's server uses (--sim-dir in program, or its env)."""
    prog = list(profile.program or [])
    for i, tok in enumerate(prog):
        if tok == "--sim-dir" and i + 1 < len(prog):
            return prog[i + 1]
        if tok.startswith("--sim-dir="):
            return tok.split("=", 1)[1]
    return profile.env.get("COCKPIT_SIM_GPU_DIR")


@dataclass(frozen=True)
class TelemetrySample:
    host: str
    gpus: tuple[GpuSample, ...]
    processes: tuple[GpuProcess, ...]
    host_sample: HostSample | None
    pids_alive: dict[int, bool]
    source: str
    errors: tuple[str, ...]


def _gib(mib: Any) -> float | None:
    return None if mib is None else float(mib) / MIB_PER_GIB


def parse_sample(host: str, obj: dict[str, Any]) -> TelemetrySample:
    ts = float(obj.get("gpu_ts") or obj.get("ts") or 0.0)
    source = str(obj.get("source") or "none")
    gpus = tuple(
        GpuSample(
            host=host,
            index=int(g["index"]),
            uuid=g.get("uuid"),
            name=g.get("name"),
            used_gb=_gib(g.get("mem_used_mib")),
            total_gb=_gib(g.get("mem_total_mib")),
            util_pct=g.get("util_pct"),
            temp_c=g.get("temp_c"),
            power_w=g.get("power_w"),
            sampled_at=ts,
            source=source,
        )
        for g in obj.get("gpus") or []
        if g.get("index") is not None
    )
    procs = tuple(
        GpuProcess(
            host=host,
            pid=int(p["pid"]),
            gpu_index=int(p["gpu_index"]) if p.get("gpu_index") is not None else -1,
            used_gb=_gib(p.get("mem_used_mib")),
            belongs_to_run=bool(p.get("belongs_to_run")),
        )
        for p in obj.get("procs") or []
        if p.get("pid") is not None
    )
    h = obj.get("host") or {}
    hs = None
    if h:
        total = h.get("mem_total_kb")
        avail = h.get("mem_available_kb")
        limit = h.get("cgroup_limit_bytes")
        usage = h.get("cgroup_usage_bytes")
        avail_gb = None if avail is None else avail * 1024 / 1e9
        if limit is not None and usage is not None:
            head = (limit - usage) / 1e9
            avail_gb = head if avail_gb is None else min(avail_gb, head)
        hs = HostSample(
            host=host,
            mem_total_gb=None if total is None else total * 1024 / 1e9,
            mem_available_gb=avail_gb,
            cgroup_limit_gb=None if limit is None else limit / 1e9,
            sampled_at=float(obj.get("ts") or 0.0),
            source="agent",
        )
    alive = {int(k): bool(v) for k, v in (obj.get("pids_alive") or {}).items()}
    return TelemetrySample(host, gpus, procs, hs, alive, source, tuple(obj.get("errors") or ()))


def host_facts(sample: TelemetrySample) -> HostFacts:
    totals = [g.total_gb for g in sample.gpus if g.total_gb is not None]
    free = tuple(
        (g.total_gb - g.used_gb) if g.total_gb is not None and g.used_gb is not None else None for g in sample.gpus
    )
    hs = sample.host_sample
    return HostFacts(
        host=sample.host,
        mem_total_gb=hs.mem_total_gb if hs else None,
        mem_available_gb=hs.mem_available_gb if hs else None,
        gpu_count=len(sample.gpus) if sample.source != "none" else None,
        gpu_mem_total_gib=min(totals) if totals else None,
        gpu_free_gib=free,
        source="agent",
    )


def _agent_argv(ops: HostOps, *, interval: float | None, pids: list[int], sim_dir: str | None) -> list[str]:
    argv = [ops.python, "-"]
    if interval is None:
        argv.append("--once")
    else:
        argv += ["--interval", f"{interval:g}"]
    if pids:
        argv += ["--pids", ",".join(str(p) for p in pids)]
    if sim_dir:
        argv += ["--sim-dir", sim_dir]
    return argv


async def sample_once(ops: HostOps, *, pids: list[int] | None = None, sim_dir: str | None = None) -> TelemetrySample:
    done = await ops.transport.run(
        _agent_argv(ops, interval=None, pids=pids or [], sim_dir=sim_dir), stdin=agent_source(), timeout=30
    )
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TransportError(f"{ops.label}: telemetry agent failed: {err[-1] if err else done.returncode}")
    return parse_sample(ops.label, json.loads(lines[-1]))


async def stream_samples(
    ops: HostOps, *, interval: float, pids: list[int] | None = None, sim_dir: str | None = None
) -> AsyncIterator[TelemetrySample]:
    stream = await ops.transport.stream(
        _agent_argv(ops, interval=interval, pids=pids or [], sim_dir=sim_dir), stdin=agent_source()
    )
    buf = b""
    try:
        async for chunk in stream.chunks():
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    yield parse_sample(ops.label, obj)
    finally:
        await stream.close()


async def measure_hosts(profile: Profile) -> dict[str, HostFacts]:
    """HostFacts of every SSH host of the profile, measured by the agent (for `cockpit check`).

    A host that cannot be reached is left out (it stays unknown in the preflight)."""
    from cockpit.transport import transport_for

    out: dict[str, HostFacts] = {}
    for host in profile.hosts:
        if host.is_local:
            continue
        ops = HostOps(transport_for(host), python="python3")
        try:
            out[host.label] = host_facts(await sample_once(ops, sim_dir=sim_dir_of(profile)))
        except (TransportError, OSError, ValueError):
            continue
    return out


def kill_command(host: str, pid: int) -> str:
    kill = ["kill", "-9", str(pid)]
    return shlex.join(kill) if host == "local" else shlex.join(["ssh", host, *kill])
