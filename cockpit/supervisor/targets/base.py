"""What a target is: where a run's server processes live and how they are launched, found,
followed, stopped and listed (the Supervisor holds one; `hosts.py` and `slurm.py` are the two).

`Target` is what the Supervisor asks of its target; a target answers (`RunFound`, `StopResult`)
and the Supervisor applies the answer. `Run` is what a target may use of the Supervisor: the run
read, never written, the watchers it drives and a few callbacks. The run's outcomes and refusals
every target reports live here too.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.core.overrides import Overrides
from cockpit.core.profile import Profile
from cockpit.errors import CockpitError
from cockpit.remote.host import ServerExited
from cockpit.remote.hostresults import NodeTree, StackRequest
from cockpit.supervisor.api import GpuProcess, RunInfo, TargetView
from cockpit.supervisor.nodes import Node
from cockpit.supervisor.watch import GpuWatch

if TYPE_CHECKING:
    from cockpit.backends.base import Backend
    from cockpit.preflight.launchplan import GatedLaunch
    from cockpit.supervisor.follower import Follow
    from cockpit.supervisor.servingwatch import ServingWatch
    from cockpit.supervisor.watch import ReadinessProbe


class RunRefused(CockpitError):
    """A run of this profile is already alive on its host (a second launch is never made)."""

    def __init__(self, message: str, run: RunInfo | None, found: RunFound | None = None):
        # every message starts with the profile's name ("NAME is already running…", "NAME: …")
        name = message.split(" ", 1)[0].rstrip(":")
        super().__init__(message, hint=f"`cockpit tui {name}` attaches to it, `cockpit status {name}` reports on it, "
                         f"`cockpit down {name}` stops it")
        self.run = run
        self.found = found  # the live run the target found (the Supervisor follows it from then on)


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
    lifecycle: str = "stopped"  # the run's lifecycle after it (Slurm: "stopping" while the job lingers)
    words: str = "stopped"  # and its words
    reached: bool = True  # False: the stop never reached the target (scancel failed), nothing ended


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)




@dataclass(frozen=True)
class RunFound:
    """What a target's start and attach answer: the run it now follows there, for the Supervisor to
    take (its state, flags and lifecycle are the Supervisor's; the target never writes them).
    The target has put the run's records on its nodes already."""

    info: RunInfo
    flags: dict[str, Any]  # its server flags (the profile's with the overrides), as launched
    overrides: Overrides
    new: bool = True  # another run than the one followed: the run's state starts afresh
    lifecycle: str | None = None  # what the run's lifecycle is now (None: as it is)
    progress: str | None = None
    journal: bool = False  # a live run the journal records the start of


class Run(Protocol):
    """What a target may use of the Supervisor that holds it: the run as it is (read, never
    written), the watchers it drives, and a few callbacks. What a target finds it answers
    (RunFound, StopResult, refresh_once's end), and the Supervisor applies it.
    tests/supervisor/test_target_answers.py holds the targets to this list."""

    @property
    def profile(self) -> Profile: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def follow(self) -> Follow: ...
    @property
    def readiness(self) -> ReadinessProbe: ...
    @property
    def serving(self) -> ServingWatch: ...
    @property
    def info(self) -> RunInfo | None: ...  # the run being followed
    @property
    def flags(self) -> dict[str, Any]: ...  # its server flags
    @property
    def overrides(self) -> Overrides: ...
    @property
    def stopping(self) -> bool: ...  # a stop is under way (its exits are not crashes)
    @property
    def lifecycle(self) -> str: ...

    def set_lifecycle(self, lifecycle: str | None = None, progress: str | None = None) -> None: ...

    def say(self, progress: str) -> None: ...

    def changed(self) -> None: ...

    def server_exited(self, node: Node, ex: ServerExited) -> None: ...

    def ended_with(self, words: str, exit_code: int | None, stop: bool) -> None:
        """The target's own words on how the run ended (Slurm's), after each node's exit."""
        ...

    def readiness_path(self) -> str: ...

    def api_base_url(self) -> Awaitable[str]: ...

    def run_gpus(self) -> set[tuple[str, int]]: ...


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

    async def start(self, plan: GatedLaunch, *, attach: bool, kill_leftovers: bool,
                    env: Mapping[str, str]) -> RunFound:
        """Launch the gate's `plan` (its argvs, one per node, as they are, and its overrides), with
        `env` added (a debug relaunch's); a live run is attached to when `attach`, else refused
        (RunRefused, carrying what it found). The first thing it does is `check_gated(plan, …)`:
        nothing the gate did not let through is ever launched."""
        ...

    async def attach(self, *, include_ended: bool = False) -> RunFound | None:
        """The profile's live run here, found (with include_ended: its newest, even ended)."""
        ...

    async def stop(self, timeout: float, kill_leftovers: bool, by: str) -> StopResult:
        """Stop the run the Supervisor follows (it has one: the Supervisor attaches first, and has
        marked the stop as under way); `by` is who asked, and each node's exit says so."""
        ...

    def stop_failed(self, res: StopResult) -> str:
        """Why a restart cannot launch after this stop (its processes or its job are still there)."""
        ...

    def watchers(self) -> list[asyncio.Task[Any]]:
        """The tasks that watch the run (logs, readiness, telemetry, the target's own state)."""
        ...

    async def refresh_once(self) -> bool:
        """Every node's log read to its end, one probe, one look at the target (`status`): whether
        the run has ended (the journal completes its record)."""
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
