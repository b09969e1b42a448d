"""The nodes of a run: one per host of the profile, each with its transport, its host program,
its run directory name, its log file and the reading of that log (NodeLog)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from cockpit.core.profile import Host, Profile
from cockpit.core.state import RunState
from cockpit.remote.host import HostOps, LogFollower, ServerExited, program_python
from cockpit.remote.hostresults import RunRecord
from cockpit.supervisor.nodelog import NodeLog
from cockpit.transport import transport_for as pooled
from cockpit.transport.base import Transport
from cockpit.transport.local import LocalTransport


@dataclass
class Node:
    index: int
    host: Host
    transport: Transport
    ops: HostOps
    key: str  # the run-directory name of the profile on this node
    log_file: str  # the log path (relative to workdir) on this node
    record: RunRecord | None = None  # this node's part of the current run (its run directory)
    log: NodeLog | None = None  # the reading of this run's log
    follower: LogFollower | None = None
    exited: ServerExited | None = None
    link_up: bool = True
    args_seen: bool = False  # this node's server-arguments dump was applied
    own: RunState | None = None  # a multi-node run: this node's log read alone (its own crash line)

    @property
    def label(self) -> str:
        return self.host.label

    def reset(self) -> None:
        """Forget the previous run (a restart, or an attach to another run)."""
        self.record = None
        self.log = None
        self.follower = None
        self.exited = None
        self.args_seen = False
        self.own = None


def node_key(profile: Profile, index: int) -> str:
    """Node 0 keeps runs under the profile's name, node k under `<name>.node<k>`: home directories
    and workdirs are often one NFS share across a cluster's nodes, and must not collide."""
    return profile.name if index == 0 else f"{profile.name}.node{index}"


def node_log(profile: Profile, index: int) -> str:
    """Node k > 0 logs to `<log stem>.node<k><suffix>` (logs/sglang.log → logs/sglang.node1.log)."""
    if index == 0:
        return profile.log
    head, _, tail = profile.log.rpartition("/")
    stem, dot, ext = tail.rpartition(".")
    name = f"{stem}.node{index}.{ext}" if dot and stem else f"{tail}.node{index}"
    return f"{head}/{name}" if head else name


def transport_for(host: Host) -> Transport:
    if host.is_local:

        return LocalTransport()

    return pooled(host)


def make_nodes(profile: Profile, transports: list[Transport] | None, runs_root: str | None) -> list[Node]:
    nodes = []
    for i, host in enumerate(profile.hosts):
        t = transports[i] if transports else transport_for(host)
        nodes.append(Node(i, host, t, HostOps(t, python=program_python(profile, host), runs_root=runs_root),
                          key=node_key(profile, i), log_file=node_log(profile, i)))
    return nodes


def resolve_program(argv: list[str], *, local: bool) -> list[str]:
    """A program[0] of `cockpit` on this machine means this very cockpit (venvs are rarely on PATH)."""
    if local and argv and argv[0] == "cockpit":
        return [sys.executable, "-m", "cockpit", *argv[1:]]
    return argv
