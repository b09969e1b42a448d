"""Telemetry for the supervisor, through cockpit.telemetry.client (the stdlib agent on each node).

What this adds: which simulated-GPU directory a profile's server uses (so the agent reads the
same simulated GPUs on a remote host), the agent's python per node (this interpreter locally),
and host facts of a profile's SSH hosts for `cockpit check`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import AsyncIterator

from cockpit.backends.base import HostFacts
from cockpit.core.profile import Profile
from cockpit.sim import gpus
from cockpit.supervisor.host import HostOps
from cockpit.telemetry import client
from cockpit.telemetry.client import TelemetrySample
from cockpit.transport.base import TransportError


def runs_simulator(profile: Profile) -> bool:
    """True when the profile's program is `cockpit sim` (as `cockpit sim …` or `python -m cockpit sim …`)."""
    prog = list(profile.program or [])
    return any(
        (tok == "cockpit" or tok.endswith("/cockpit")) and prog[i + 1] == "sim" for i, tok in enumerate(prog[:-1])
    )


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
    port = profile.server.get("port")
    try:
        return gpus.instance_dir(int(str(port)) if port is not None else 30000)
    except ValueError:
        return gpus.instance_dir(30000)


def _env(sim_dir: str | None) -> dict[str, str] | None:
    return {"COCKPIT_SIM_GPU_DIR": sim_dir} if sim_dir else None


async def sample_once(ops: HostOps, *, pids: list[int] | None = None, sim_dir: str | None = None) -> TelemetrySample:
    """One agent sample from the node (NVML in-process when local and no simulator)."""
    return await client.sample_once(ops.transport, ops.python, pids=pids or [], env=_env(sim_dir))


def stream_samples(
    ops: HostOps, *, interval: float, pids: list[int] | None = None, sim_dir: str | None = None
) -> AsyncIterator[TelemetrySample]:
    """Samples forever; the client restarts a dead agent and yields source "none" samples meanwhile."""
    return client.stream_telemetry(ops.transport, ops.python, interval=interval, pids=pids or [], env=_env(sim_dir))


def host_facts(sample: TelemetrySample) -> HostFacts:
    return client.facts_from_sample(sample)


async def measure_hosts(profile: Profile) -> dict[str, HostFacts]:
    """HostFacts of every SSH host of the profile, measured by the agent (for `cockpit check`).

    A host that cannot be reached is left out (it stays unknown in the preflight)."""
    from cockpit.transport import transport_for

    out: dict[str, HostFacts] = {}
    for host in profile.hosts:
        if host.is_local:
            continue
        ops = HostOps(transport_for(host))
        try:
            out[host.label] = host_facts(await sample_once(ops, sim_dir=sim_dir_of(profile)))
        except (TransportError, OSError, ValueError):
            continue
    return out


def kill_command(host: str, pid: int) -> str:
    kill = ["kill", "-9", str(pid)]
    return shlex.join(kill) if host == "local" else shlex.join(["ssh", host, *kill])
