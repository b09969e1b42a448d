"""Where a run's server lives: the targets the Supervisor composes (one per Supervisor).

`base.Target` is the protocol; `hosts` (the profile's hosts over SSH or this machine) and `slurm`
(a job submitted on a login node) implement it, each without the other. `make_target` is the one
place a profile's target is chosen.
"""

from __future__ import annotations

from cockpit.supervisor.targets.base import Run, Target
from cockpit.supervisor.targets.hosts import HostsTarget
from cockpit.supervisor.targets.slurm import SlurmJobTarget
from cockpit.transport.base import Transport


def make_target(run: Run, *, transports: list[Transport] | None, runs_root: str | None,
                telemetry_interval: float) -> Target:
    """The profile's `target:` (`kind: slurm`), else its `hosts:`."""
    kind = run.profile.target.kind if run.profile.target is not None else "hosts"
    if kind == "slurm":

        return SlurmJobTarget(run, transports=transports, runs_root=runs_root, telemetry_interval=telemetry_interval)

    return HostsTarget(run, transports=transports, runs_root=runs_root, telemetry_interval=telemetry_interval)
