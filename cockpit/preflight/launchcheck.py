"""What would kill a launch at once, checked on node 0 before it: the model path missing on the host,
the API port already bound there. Both are critical findings: `cockpit check` exits 1 on them and
`cockpit up` (and the TUI's launch, through the gate) refuses to launch, instead of starting an
engine that imports for a minute and then dies of it. Part of the gate (cockpit/preflight/gate.py).

| id | severity | when |
|---|---|---|
| `model_path_missing` | critical | server's model is a filesystem path (`/…`, `~…`, `./…`) that does not exist on node 0 |
| `port_in_use` | critical | node 0's API port is already bound (another server, an earlier run that did not stop) |
| `port_unusable` | critical | node 0 cannot listen on the API address for another reason (not its address, a privileged port) |

A model named like a Hugging Face repo (`org/name`) is the engine's to download: not checked. A
simulator profile (`cockpit sim`) loads no model: its path is not checked. A live run of the
profile is no conflict: the launch itself refuses it (RunRefused) and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.core.findings import Finding, FlagChange

if TYPE_CHECKING:
    from cockpit.core.profile import Profile
    from cockpit.remote.host import HostOps


class HostNode(Protocol):
    """Node 0 as the launch check reaches it: its label, its run-directory name, its host program
    (the Supervisor's own Node is one; `node_zero` makes one for a profile not yet launched)."""

    @property
    def label(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def ops(self) -> HostOps: ...


@dataclass(frozen=True)
class NodeZero:
    label: str
    key: str
    ops: HostOps


def node_zero(profile: Profile) -> NodeZero:
    """Node 0 of `profile` over its pooled transport (the run directory is the profile's name on
    node 0, as cockpit/supervisor/nodes.py names it)."""
    from cockpit.remote.host import HostOps, program_python
    from cockpit.transport import transport_for

    host = profile.hosts[0]
    return NodeZero(host.label, profile.name, HostOps(transport_for(host), python=program_python(profile, host)))


def _path_like(model: str) -> bool:
    return model.startswith(("/", "~", "./", "../"))


async def launch_findings(profile: Profile, overrides: Mapping[str, Any] | None = None,
                          node: HostNode | None = None) -> list[Finding]:
    """Critical findings for a launch of `profile` on its node 0 (none for a Slurm job: its nodes
    are not allocated yet). The check runs on the host, over the node's transport."""
    from cockpit.backends import get_backend
    from cockpit.remote.hostresults import run_or_none
    from cockpit.telemetry.hostfacts import runs_simulator
    from cockpit.transport.base import TransportError

    if profile.target is not None:
        return []
    backend = get_backend(profile.backend)
    n0 = node or node_zero(profile)
    try:
        live = run_or_none(await n0.ops.find(n0.key))
        if live is not None and live.has_processes:
            return []  # the launch refuses a live run itself, naming it
        flags = {**profile.server, **dict(overrides or {})}
        model = backend.planner.model_location(profile, overrides)
        paths = [model] if model and _path_like(model) and not runs_simulator(profile) else []
        port = backend.launch.api_port(flags)
        host = backend.flags.value(flags, "host")
        res = await n0.ops.launch_check(paths, profile.workdir, str(host) if host else None, port)
    except TransportError:
        return []  # an unreachable host is reported by the checks that measure it
    out: list[Finding] = []
    for missing in res.get("missing") or []:
        out.append(Finding("model_path_missing", "critical",
                           f"{n0.label}: the model path {missing} does not exist on the host: the server would import for "
                           "a minute and then fail to load it. Fix the profile's model path (or copy the model there)."))
    if res.get("port_bound"):
        out.append(Finding("port_in_use", "critical",
                           f"{n0.label}: {res['port_bound']}: another server (or an earlier run that did not stop) "
                           f"listens there, and the new one would die at start-up. Stop it, or use another --port.",
                           (), (FlagChange("--port", port, port + 1),)))
    if res.get("port_unusable"):
        out.append(Finding("port_unusable", "critical",
                           f"{n0.label}: {res['port_unusable']}: the server would die when it binds, after its start-up. "
                           "Fix the profile's host (an address of this node, or 0.0.0.0) or --port."))
    return out
