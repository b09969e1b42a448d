"""Telemetry for the supervisor's nodes, through cockpit.telemetry.client (the stdlib agent on
each node): the agent's python per node (this interpreter locally) and the simulated-GPU
directory a profile's server uses (so the agent reads the same simulated GPUs on a remote host).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from cockpit.remote.host import HostOps
from cockpit.telemetry import client
from cockpit.telemetry.hostfacts import sim_dir_of, sim_env
from cockpit.telemetry.samples import TelemetrySample

__all__ = ["sample_once", "sim_dir_of", "stream_samples"]


async def sample_once(ops: HostOps, *, pids: list[int] | None = None, sim_dir: str | None = None) -> TelemetrySample:
    """One agent sample from the node (NVML in-process when local and no simulator)."""
    return await client.sample_once(ops.transport, ops.python, pids=pids or [], env=sim_env(sim_dir))


def stream_samples(
    ops: HostOps, *, interval: float, pids: list[int] | None = None, sim_dir: str | None = None
) -> AsyncIterator[TelemetrySample]:
    """Samples forever; the client restarts a dead agent and yields source "none" samples meanwhile."""
    return client.stream_telemetry(ops.transport, ops.python, interval=interval, pids=pids or [],
                                   env=sim_env(sim_dir))



