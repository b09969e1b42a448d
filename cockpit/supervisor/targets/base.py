"""What a target is: where a run's server processes live and how they are launched, found,
followed, stopped and listed (the Supervisor holds one; `hosts.py` and `slurm.py` are the two).

`Target` is what the Supervisor asks of its target; `Run` is what a target may use of the
Supervisor (the run's state, its watchers and its lifecycle words), so neither reaches into the
other's private members. The run's outcomes and refusals every target reports live here too.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.core.findings import FlagChange
from cockpit.core.profile import Profile, normalise_flag_name
from cockpit.errors import CockpitError
from cockpit.remote.host import ServerExited
from cockpit.remote.hostresults import NodeTree, StackRequest
from cockpit.supervisor.api import GpuProcess, RunInfo, RunSnapshot, TargetView
from cockpit.supervisor.nodes import Node
from cockpit.supervisor.watch import GpuWatch

if TYPE_CHECKING:
    from cockpit.backends.base import Backend
    from cockpit.preflight.launchplan import GatedLaunch
    from cockpit.supervisor.follower import Follow, RunFold
    from cockpit.supervisor.publisher import Publisher
    from cockpit.supervisor.recorder import Recorder
    from cockpit.supervisor.servingwatch import ServingWatch
    from cockpit.supervisor.watch import ReadinessProbe


class RunRefused(CockpitError):
    """A run of this profile is already alive on its host (a second launch is never made)."""

    def __init__(self, message: str, run: RunInfo | None):
        # every message starts with the profile's name ("NAME is already running…", "NAME: …")
        name = message.split(" ", 1)[0].rstrip(":")
        super().__init__(message, hint=f"`cockpit tui {name}` attaches to it, `cockpit status {name}` reports on it, "
                         f"`cockpit down {name}` stops it")
        self.run = run


class LaunchFailed(CockpitError):
    pass


class LeftoversHoldGpus(CockpitError):
    """Processes still hold memory on the run's GPUs after a stop: a relaunch would land on them."""

    def __init__(self, leftovers: list[GpuProcess]):
        pids = ", ".join(f"{p.pid} (GPU {p.gpu_index} on {p.host})" for p in leftovers)
        kills = "; ".join(f"kill -9 {p.pid} on {p.host}" for p in leftovers)
        super().__init__(f"GPU memory is held by pid {pids}: launching now would land on top of it",
                         hint=f"check what they are, then free the GPUs ({kills}) and launch again")
        self.leftovers = leftovers


@dataclass
class StopResult:
    stopped: bool  # every process of the run is gone
    killed: bool  # SIGKILL was needed after the timeout
    left: list[int]  # pids of the run that survived even SIGKILL
    leftovers: list[GpuProcess] = field(default_factory=list)  # still holding GPU memory after the stop
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # host -> server exit code


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)




def changes_to_overrides(changes: Iterable[FlagChange] | dict[str, Any]) -> dict[str, Any]:
    if isinstance(changes, dict):
        return {normalise_flag_name(k): v for k, v in changes.items()}
    return {normalise_flag_name(c.flag): c.to_value for c in changes}


class Run(Protocol):
    """What a target may use of the Supervisor that holds it."""

    profile: Profile
    backend: Backend
    fold: RunFold
    follow: Follow
    publisher: Publisher
    readiness: ReadinessProbe
    serving: ServingWatch
    recorder: Recorder | None
    info: RunInfo | None  # the run being followed
    flags: dict[str, Any]  # its server flags (the profile's with the overrides)
    overrides: dict[str, Any]
    debug_env: dict[str, str]  # a debug relaunch's environment
    stopping: bool  # a stop is under way (its exits are not crashes)
    stop_by: str  # who asked for it: "operator" or "cockpit"
    crash_before_stop: bool  # the log showed a crash before the stop (it stays one)

    @property
    def lifecycle(self) -> str: ...

    def set_lifecycle(self, lifecycle: str | None = None, progress: str | None = None) -> None: ...

    def say(self, progress: str) -> None: ...

    def changed(self) -> None: ...

    def reset_for_run(self) -> None: ...

    def server_exited(self, node: Node, ex: ServerExited) -> None: ...

    def mark_stopped(self) -> None: ...

    def record_end(self) -> None: ...

    def outcome(self) -> str: ...

    def readiness_path(self) -> str: ...

    def api_base_url(self) -> Awaitable[str]: ...

    def gpus_for_flags(self, flags: dict[str, Any]) -> set[tuple[str, int]]: ...

    def run_gpus(self) -> set[tuple[str, int]]: ...

    def snapshot(self) -> RunSnapshot: ...


class Target(Protocol):
    """Where a run's server lives: launch, find, follow, stop, and what the run looks like there."""

    kind: str  # "hosts", "slurm": the profile's `target.kind` (hosts when it has none)

    @property
    def nodes(self) -> list[Node]:
        """One per node of the run: its log, its record, its label."""
        ...

    @property
    def telemetry(self) -> GpuWatch:
        """The GPUs and hosts of the run's nodes."""
        ...

    async def start(self, plan: GatedLaunch, *, attach: bool, kill_leftovers: bool) -> RunInfo:
        """Launch the gate's `plan` (its argvs, one per node, as they are, and its overrides); a
        live run is attached to when `attach`, else refused (RunRefused). The first thing it does
        is `check_gated(plan, …)`: nothing the gate did not let through is ever launched."""
        ...

    async def attach(self, *, include_ended: bool = False) -> RunInfo | None:
        """The profile's live run here, resumed (with include_ended: its newest, even ended)."""
        ...

    async def stop(self, timeout: float, kill_leftovers: bool, by: str) -> StopResult: ...

    def stop_failed(self, res: StopResult) -> str:
        """Why a restart cannot launch after this stop (its processes or its job are still there)."""
        ...

    def watchers(self) -> list[asyncio.Task[Any]]:
        """The tasks that watch the run (logs, readiness, telemetry, the target's own state)."""
        ...

    async def refresh_once(self) -> RunSnapshot:
        """Every node's log read to its end, one probe, one look at the target: `status`."""
        ...

    def ready(self) -> bool:
        """The target's own part of readiness (Slurm: the job runs on named nodes)."""
        ...

    def view(self) -> TargetView | None:
        """The run's place in the target's words (RunSnapshot.target)."""
        ...

    def end_watch(self) -> Callable[[], Awaitable[str]] | None:
        """A wait until the target says the run ended (Slurm: the job left the queue), returning
        its words; None where the server's pid says it (`logs -f`)."""
        ...

    async def gpu_processes_now(self) -> list[GpuProcess] | None: ...

    async def process_tree(self, stacks: StackRequest | None = None) -> list[NodeTree]:
        """The run's processes on each of its nodes now, found by the run's own record (hosts: its
        process group, session and recorded tree; Slurm: the job's step on each node, looked at from
        inside the allocation); with `stacks`, each one's Python stack. A node that cannot list
        them says why (NodeTree.error): no run, a job not running, an unreachable host."""
        ...
