"""Host facts for preflight, measured in one place: this machine, or a host through its transport.

- GPUs: through the telemetry agent's own readers, so a local check and a remote one use the same
  code. On this machine that is the one NVML gateway (cockpit/telemetry/nvml.py) when NVML works,
  else `nvidia-smi` (the agent's SmiSource, with its timeout); on a remote host, the agent itself.
- Host RAM available = min(/proc/meminfo MemAvailable, cgroup memory.max − memory.current at the tightest level of the cgroup path):
  inside a container the cgroup limit is what the kernel OOM-killer enforces.

Anything unreadable stays None (unknown), never 0. The gate (cockpit/preflight/gate.py) runs the
backend's preflight on these facts, with the operator's what-ifs applied (`apply_what_if`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.backends import engine_words
from cockpit.backends.base import HostFacts
from cockpit.remote.programs import agent
from cockpit.telemetry import nvml
from cockpit.telemetry.client import sample_once
from cockpit.telemetry.samples import TelemetrySample, sample_from_agent
from cockpit.transport import transport_for
from cockpit.transport.base import HostKeyError, Transport, TransportError, Unreachable

if TYPE_CHECKING:
    from cockpit.core.profile import Profile

GB = 1e9
CGROUP_ROOT = Path("/sys/fs/cgroup")
SMI_TIMEOUT_S = 5.0


# ---------------------------------------------------------------------------- host RAM
def _meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            mult = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[key.strip()] = int(parts[0]) * mult
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_headroom_bytes(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """limit − usage of the memory cgroup level with the least headroom, over every level of this
    process's cgroup path (v2, or v1 limit − usage); None if unlimited. The host agent's reader
    (agent.cgroup_memory): remote hosts and this machine are measured alike."""
    limit, usage = agent.cgroup_memory(str(root), str(self_cgroup))
    return None if limit is None else max(0, limit - (usage or 0))


# ---------------------------------------------------------------------------- GPUs
def smi_raw(env: Mapping[str, str] | None = None, pids: tuple[int, ...] = ()) -> dict[str, Any] | None:
    """One agent sample (its JSON shape) read through `nvidia-smi` on this machine; None when
    nvidia-smi is not on PATH (`env`'s PATH when given)."""
    exe = shutil.which("nvidia-smi", path=(env or os.environ).get("PATH"))
    if exe is None:
        return None
    roots = {int(p) for p in pids}
    gpus, procs, errors = agent.SmiSource(exe, SMI_TIMEOUT_S).read(roots)
    return agent.build_sample("nvidia-smi", roots, None, gpus, procs, errors)


def local_gpu_sample(*, use_nvml: bool = True, env: Mapping[str, str] | None = None,
                     pids: tuple[int, ...] = ()) -> TelemetrySample | None:
    """This machine's GPUs: NVML (the one gateway) when it works, else nvidia-smi, else None."""
    if use_nvml and nvml.available():
        return sample_from_agent(nvml.read_raw(pids), "local")
    raw = smi_raw(env, pids)
    return sample_from_agent(raw, "local") if raw is not None else None


def facts_from_sample(sample: TelemetrySample) -> HostFacts:
    gpus = sample.gpus
    totals = [g.total_gb for g in gpus if g.total_gb is not None]
    free = tuple(
        (g.total_gb - g.used_gb) if g.total_gb is not None and g.used_gb is not None else None for g in gpus
    )
    h = sample.host
    return HostFacts(
        gpu_name=_smallest_gpu_name(gpus),
        host=sample.host_label,
        mem_total_gb=h.mem_total_gb if h else None,
        mem_available_gb=h.mem_available_gb if h else None,
        gpu_count=len(gpus) if gpus else None,
        gpu_mem_total_gib=min(totals) if totals else None,
        gpu_free_gib=free,
        source="agent" if sample.source != "nvml" else "nvml",
    )


def _smallest_gpu_name(gpus: Any) -> str | None:
    """The name of the GPU with the least memory (the one a plan is made for); None when unreported."""
    named = [g for g in gpus if g.total_gb is not None and g.name]
    return min(named, key=lambda g: g.total_gb).name if named else None


def local_host_facts(*, use_nvml: bool = True, env: Mapping[str, str] | None = None) -> HostFacts:
    """Measure this machine. Anything unreadable stays None."""
    mi = _meminfo()
    total = mi.get("MemTotal")
    avail = mi.get("MemAvailable")
    cg = cgroup_headroom_bytes()
    if cg is not None:
        avail = cg if avail is None else min(avail, cg)
    if total is None:
        try:
            import psutil

            vm = psutil.virtual_memory()
            total = vm.total
            if avail is None:
                avail = vm.available
        except Exception:
            pass
    sample = local_gpu_sample(use_nvml=use_nvml, env=env)
    gpus = sample.gpus if sample is not None else ()
    totals = [g.total_gb for g in gpus if g.total_gb is not None]
    return HostFacts(
        host="local",
        gpu_name=_smallest_gpu_name(gpus),
        mem_total_gb=round(total / GB, 2) if total is not None else None,
        mem_available_gb=round(avail / GB, 2) if avail is not None else None,
        gpu_count=len(totals) if totals else None,
        gpu_mem_total_gib=round(min(totals), 2) if totals else None,
        gpu_free_gib=tuple(
            round(g.total_gb - g.used_gb, 2) if g.total_gb is not None and g.used_gb is not None else None
            for g in gpus if g.total_gb is not None
        ),
        source=sample.source if sample is not None and totals else "psutil",
    )


# ---------------------------------------------------------------------------- hosts of a profile
def runs_simulator(profile: Profile) -> bool:
    """True when the profile's program is `cockpit sim` (as `cockpit sim …` or `python -m cockpit sim …`)."""
    prog = list(profile.program or [])
    return any(
        (tok == "cockpit" or tok.endswith("/cockpit")) and prog[i + 1] == "sim" for i, tok in enumerate(prog[:-1])
    )


# cockpit/sim/gpus.py `instance_dir`: a simulator's own GPUs when nobody chose a directory
# (tests/sim/test_instances.py checks the two agree)
SIM_INSTANCE_DIR = "~/.cache/cockpit/sim-gpus/port-{port}"


def sim_dir_of(profile: Profile) -> str | None:
    """The simulated GPUs' directory a profile's server uses: --sim-dir in program, its env, this
    process's COCKPIT_SIM_GPU_DIR (a local simulator inherits it), else the simulator instance's own
    directory for its port. None for a real server: simulated GPUs never answer for real profiles."""
    prog = list(profile.program or [])
    for i, tok in enumerate(prog):
        if tok == "--sim-dir" and i + 1 < len(prog):
            return prog[i + 1]
        if tok.startswith("--sim-dir="):
            return tok.split("=", 1)[1]
    if profile.env.get("COCKPIT_SIM_GPU_DIR"):
        return profile.env["COCKPIT_SIM_GPU_DIR"]
    if not runs_simulator(profile):
        return None
    if os.environ.get("COCKPIT_SIM_GPU_DIR") and all(h.ssh == "local" for h in profile.hosts):
        return os.environ["COCKPIT_SIM_GPU_DIR"]
    # the simulator's own default port when the profile names none (each stand-in uses its
    # server's, as the backend declares it)

    default = engine_words(profile.backend).default_port or 0
    try:
        port = int(str(profile.server.get("port") or default))
    except ValueError:
        port = default
    return SIM_INSTANCE_DIR.format(port=port)


def sim_env(sim_dir: str | None) -> dict[str, str] | None:
    return {"COCKPIT_SIM_GPU_DIR": sim_dir} if sim_dir else None


async def measure(transport: Transport, python: str = "python3", *,
                  env: Mapping[str, str] | None = None) -> HostFacts:
    """What preflight needs about one host, from one agent sample through its transport."""
    return facts_from_sample(await sample_once(transport, python, env=env))


async def measure_hosts(profile: Profile, unreachable: dict[str, str] | None = None, *,
                        include_local: bool = False) -> dict[str, HostFacts]:
    """HostFacts of the profile's SSH hosts (and `local` too with include_local: then the
    simulator's GPUs count, as a launch's preflight sees them), measured by the agent. A host that
    cannot be reached is left out (it stays unknown in the preflight); when `unreachable` is given,
    it gets host label → why, in words (`unreachable_words`)."""
    out: dict[str, HostFacts] = {}
    for host in profile.hosts:
        if host.is_local and not include_local:
            continue
        try:
            out[host.label] = await measure(transport_for(host), env=sim_env(sim_dir_of(profile)))
        except (TransportError, OSError, ValueError) as exc:
            if unreachable is not None:
                unreachable[host.label] = unreachable_words(exc)
            continue
    return out


def unreachable_words(exc: BaseException) -> str:
    """Why a host could not be reached, the kind first: DNS, refused, timeout, no route,
    authentication, host key (the transport's own message follows, then its hint)."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, HostKeyError) or "host key" in low:
        kind = "host key refused (unknown or changed; never auto-accepted)"
    elif any(w in low for w in ("name or service not known", "nodename nor servname", "temporary failure in name resolution",
                                "no address associated", "name does not resolve", "getaddrinfo")):
        kind = "DNS: the name does not resolve"
    elif (isinstance(exc, Unreachable) and exc.timed_out) or "timed out" in low or "timeout" in low:
        kind = "no answer (timed out): host down, firewalled or wrong address"
    elif "connect call failed" in low or "connection refused" in low or "errno 111" in low:
        kind = "connection refused: nothing listens there (sshd down or wrong port)"
    elif "no route" in low or "network is unreachable" in low:
        kind = "no route to the host"
    elif "permission denied" in low or "auth" in low:
        kind = "authentication refused (key, agent or user)"
    else:
        kind = "unreachable"
    hint = getattr(exc, "hint", None)
    return f"{kind} — {text}" + (f" ({hint})" if hint else "")


def host_facts_for(profile: Profile, measured: Mapping[str, HostFacts] | None = None) -> list[HostFacts]:
    """One HostFacts per profile host: given ones first, `local` measured here, others unknown."""
    out: list[HostFacts] = []
    for i, h in enumerate(profile.hosts):
        # a Slurm job's nodes are whatever the allocation gives: named by rank until then
        label = h.label if profile.target is None else f"Slurm node {i} (not allocated yet)"
        if measured and label in measured:
            out.append(dataclasses.replace(measured[label], host=label))
        elif h.is_local and profile.target is None:  # a Slurm job's nodes are not this machine
            out.append(local_host_facts())
        else:
            out.append(HostFacts(host=label, source="unknown"))
    return out


def apply_what_if(facts: list[HostFacts], host_mem_gb: float | None, gpu_mem_gb: float | None,
                  gpus: int | None) -> list[HostFacts]:
    out = []
    for f in facts:
        changes: dict[str, Any] = {}
        if host_mem_gb is not None:
            changes.update(mem_available_gb=host_mem_gb, mem_total_gb=max(host_mem_gb, f.mem_total_gb or 0))
        if gpu_mem_gb is not None:
            # a what-if card: its name is not the measured one's
            changes.update(gpu_mem_total_gib=gpu_mem_gb, gpu_free_gib=(), gpu_name=None)
        if gpus is not None:
            changes.update(gpu_count=gpus)
        if changes:
            changes["source"] = "override" if f.source == "unknown" else f"{f.source}+override"
        out.append(dataclasses.replace(f, **changes))
    return out

