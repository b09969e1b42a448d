"""What would kill a launch at once, checked on the nodes before it: the model path missing on the host,
the API port already bound there. Both are critical findings: `cockpit check` exits 1 on them and
`cockpit up` (and the TUI's launch, through the gate) refuses to launch, instead of starting an
engine that imports for a minute and then dies of it. Part of the gate (cockpit/preflight/gate.py).

| id | severity | when |
|---|---|---|
| `model_path_missing` | critical | server's model is a filesystem path (`/…`, `~…`, `./…`) that does not exist on node 0 |
| `port_in_use` | critical | node 0's API port, or the rendezvous port the profile names, is already bound there |
| `port_unusable` | critical | node 0 cannot listen on the API address for another reason (not its address, a privileged port) |
| `model_path_missing` (node k) | critical | a multi-node profile: the model path is missing on another node |
| `engine_version_differs` | critical | a multi-node profile: the engine's version is not the same on every node |
| `engine_version_unknown` | warning | a multi-node profile: some nodes' engine version could not be read |

A model named like a Hugging Face repo (`org/name`) is the engine's to download: not checked. A
simulator profile (`cockpit sim`) loads no model: its path is not checked. A live run of the
profile is no conflict: the launch itself refuses it (RunRefused) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cockpit.backends import get_backend
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.overrides import Overrides
from cockpit.remote.host import HostOps, program_python
from cockpit.remote.hostresults import run_or_none
from cockpit.telemetry.hostfacts import runs_simulator
from cockpit.transport import transport_for
from cockpit.transport.base import TransportError

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
    return node_at(profile, 0)


def node_at(profile: Profile, index: int) -> NodeZero:
    """Node `index` of `profile` over its pooled transport (its run directory name as nodes.py's)."""

    host = profile.hosts[index]
    key = profile.name if index == 0 else f"{profile.name}.node{index}"
    return NodeZero(host.label, key, HostOps(transport_for(host), python=program_python(profile, host)))


def engine_pythons(profile: Profile) -> list[str]:
    """Where the engine's own python may be on a host: the profile's `python` (by path), else the
    one beside the program (a venv's console script, `…/bin/vllm` → `…/bin/python`)."""
    out = [profile.python] if profile.python.startswith(("/", "~")) else []
    prog = profile.program[0] if profile.program else ""
    if prog.startswith(("/", "~")) and "/" in prog:
        out.append(prog.rsplit("/", 1)[0] + "/python")
    return list(dict.fromkeys(out))


def _path_like(model: str) -> bool:
    return model.startswith(("/", "~", "./", "../"))


async def launch_findings(profile: Profile, overrides: Overrides | None = None,
                          node: HostNode | None = None, rendezvous: str | None = None) -> list[Finding]:
    """Critical findings for a launch of `profile` (none for a Slurm job: its nodes are not
    allocated yet). The checks run on the hosts, over each node's transport: on node 0 the model
    path, the API port and the rendezvous port the flags name (`rendezvous`, the gate's: one it
    picked on node 0 is free already); on every other node of a
    multi-node profile the model path, and on all of them the engine's version (one server across
    nodes needs the same release everywhere)."""

    if profile.target is not None:
        return []
    backend = get_backend(profile.backend)
    n0 = node or node_zero(profile)
    multi = len(profile.hosts) > 1
    flags = Overrides.of(overrides).applied_to(profile.server)
    try:
        live = run_or_none(await n0.ops.find(n0.key))
        if live is not None and live.has_processes:
            return []  # the launch refuses a live run itself, naming it
        # an engine without a planner names no model flag: no path to look for
        model = backend.planner.model_location(profile, overrides) if backend.planner is not None else None
        paths = [model] if model and _path_like(model) and not runs_simulator(profile) else []
        port = backend.launch.api_port(flags)
        host = backend.flags.value(flags, "host")
        rdv = rendezvous if multi else None
        rdv_port = rdv.rpartition(":")[2] if rdv else ""
        ask: dict[str, Any] = {"dist": backend.name, "pythons": engine_pythons(profile)} if multi else {}
        replies = [(n0.label, await n0.ops.launch_check(
            paths, profile.workdir, str(host) if host else None, port,
            ports=[(None, int(rdv_port))] if rdv_port.isdigit() else [], **ask))]
        for i in range(1, len(profile.hosts)) if multi and not runs_simulator(profile) else ():
            other = node_at(profile, i)
            replies.append((other.label, await other.ops.launch_check(paths, profile.workdir, None, None, **ask)))
    except TransportError:
        return []  # an unreachable host is reported by the checks that measure it
    out: list[Finding] = []
    for label, res in replies:
        for missing in res.get("missing") or []:
            out.append(Finding("model_path_missing", "critical",
                               f"{label}: the model path {missing} does not exist on the host: the server would import for "
                               "a minute and then fail to load it. Fix the profile's model path (or copy the model there)."))
    res0 = replies[0][1]
    if res0.get("port_bound"):
        out.append(Finding("port_in_use", "critical",
                           f"{n0.label}: {res0['port_bound']}: another server (or an earlier run that did not stop) "
                           f"listens there, and the new one would die at start-up. Stop it, or use another --port.",
                           (), (FlagChange("--port", port, port + 1),)))
    if res0.get("port_unusable"):
        out.append(Finding("port_unusable", "critical",
                           f"{n0.label}: {res0['port_unusable']}: the server would die when it binds, after its start-up. "
                           "Fix the profile's host (an address of this node, or 0.0.0.0) or --port."))
    for why in res0.get("ports_bound") or []:
        out.append(Finding("port_in_use", "critical",
                           f"{n0.label}: {why}: the head's rendezvous port is taken, and every node would wait on it "
                           "at start-up. Free it, or leave the port out of the profile (a free one is picked)."))
    if multi:
        out += _version_findings(backend.name, replies)
    return out


def _version_findings(engine: str, replies: list[tuple[str, dict[str, Any]]]) -> list[Finding]:
    versions = {label: res.get("engine_version") for label, res in replies}
    known = {v for v in versions.values() if v}
    if len(known) > 1:
        said = ", ".join(f"{label} {v or 'not found'}" for label, v in versions.items())
        return [Finding("engine_version_differs", "critical",
                        f"{engine} differs across the nodes ({said}): one server across nodes needs the same release "
                        "on every node, or the nodes fail to agree at start-up. Install one version everywhere.")]
    missing = [label for label, v in versions.items() if not v]
    if known and missing:
        return [Finding("engine_version_unknown", "warning",
                        f"{engine}'s version could not be read on {', '.join(missing)} (the profile's python, or the "
                        f"one beside its program): the nodes may not run the same release as the others "
                        f"({next(iter(known))}).")]
    return []
