"""The host program's answers, typed: what `HostOps` returns as JSON becomes these once, at the
edge, so the supervisor reads fields instead of `.get("…")` on dicts.

A field the host did not send (an older run directory, a run that never started) takes the
"unknown" value: None, or empty. (`StackRequest` goes the other way: the `tree` operation's
request for py-spy stacks.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.numbers import as_int


def _str(v: Any) -> str | None:
    return str(v) if v not in (None, "") else None


@dataclass(frozen=True)
class RunRecord:
    """One run of a profile on one node, as its run directory tells it."""

    run_id: str
    run_dir: str = ""
    pid: int | None = None  # the server's main pid
    pgid: int | None = None
    started_at: str = ""  # ISO-8601 UTC
    log_path: str = ""  # absolute, on the node
    log_offset: int = 0  # where this run's lines begin in the (appended) log
    log_inode: int | None = None
    alive: bool = False  # the server's pid exists and is still our process
    exit_code: int | None = None
    members: tuple[int, ...] = ()  # processes of the run's session, even after the server ended
    stopped_by: str | None = None  # set when a stop ended it (not a crash)
    launch_error: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)  # server flags as launched (profile keys)
    overrides: dict[str, Any] = field(default_factory=dict)  # the run's changes to the profile
    # the server and the waiter that records its exit are both gone (killed, disk full): the run
    # is over with its exit code unknown
    lost: bool = False
    oom_evidence: str | None = None  # what the waiter saw that proves an OOM kill (memory.events, memory at its limit)

    @property
    def has_processes(self) -> bool:
        """The server or one of its session's processes (orphaned ranks hold GPUs) is alive."""
        return self.alive or bool(self.members)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> RunRecord:
        meta = d.get("meta") if isinstance(d.get("meta"), Mapping) else {}
        assert isinstance(meta, Mapping)
        return cls(
            run_id=str(d.get("run_id") or ""),
            run_dir=str(d.get("run_dir") or ""),
            pid=as_int(d.get("pid")),
            pgid=as_int(d.get("pgid")),
            started_at=str(d.get("started_at") or ""),
            log_path=str(d.get("log_path") or ""),
            log_offset=as_int(d.get("log_offset")) or 0,
            log_inode=as_int(d.get("log_inode")),
            alive=bool(d.get("alive")),
            exit_code=as_int(d.get("exit_code")),
            members=tuple(p for p in (as_int(m) for m in d.get("members") or ()) if p is not None),
            stopped_by=_str(d.get("stopped_by")),
            launch_error=_str(d.get("error")),
            flags=dict(meta.get("flags") or {}),
            overrides=dict(meta.get("overrides") or {}),
            lost=bool(d.get("lost")),
            oom_evidence=_str(d.get("oom_evidence")),
        )


def run_or_none(d: Any) -> RunRecord | None:
    return RunRecord.from_wire(d) if isinstance(d, Mapping) else None


@dataclass(frozen=True)
class LaunchReply:
    record: RunRecord | None
    refused: bool = False  # a live run of the profile already holds the lock (another cockpit won)
    error: str | None = None  # the server did not start

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> LaunchReply:
        return cls(run_or_none(d.get("run")), refused=bool(d.get("refused")), error=_str(d.get("error")))


@dataclass(frozen=True)
class StopReply:
    stopped: bool  # every process of the run is gone
    killed: bool  # SIGKILL was needed after the timeout
    left: tuple[int, ...]  # pids that survived even SIGKILL
    record: RunRecord | None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> StopReply:
        return cls(bool(d.get("stopped")), bool(d.get("killed")),
                   tuple(p for p in (as_int(x) for x in d.get("left") or ()) if p is not None),
                   run_or_none(d.get("run")))


@dataclass(frozen=True)
class LogScan:
    """A big log measured on its host: its head is read, its middle counted, its tail followed."""

    size: int
    ino: int | None
    offset: int
    head_end: int
    tail_start: int
    skipped_lines: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> LogScan:
        return cls(int(d["size"]), as_int(d.get("ino")), int(d["offset"]), int(d["head_end"]),
                   int(d["tail_start"]), int(d["skipped_lines"]))


@dataclass(frozen=True)
class StackRequest:
    """Take each process's Python stack (py-spy on the node) while listing the tree."""

    native: bool = False  # py-spy --native: C/C++ frames too
    timeout: float = 20.0  # seconds per process


@dataclass(frozen=True)
class TreeProcess:
    """One process of a run on a node (hoststacks.py `tree`); threads only when stacks were asked for."""

    pid: int
    ppid: int | None
    name: str  # the title the engine set (`sglang::scheduler_TP3`), else its command line's first words
    state: str | None  # /proc state letter: R, S, D (stuck in the kernel), T (stopped)
    cmdline: tuple[str, ...] = ()
    threads: tuple[Mapping[str, Any], ...] = ()  # py-spy's: {"name", "id", "active", "frames"}
    error: str | None = None  # why its stack could not be read

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> TreeProcess:
        return cls(int(d["pid"]), as_int(d.get("ppid")), str(d.get("name") or d["pid"]), _str(d.get("state")),
                   tuple(str(c) for c in d.get("cmdline") or ()),
                   tuple(t for t in d.get("threads") or () if isinstance(t, Mapping)), _str(d.get("error")))


@dataclass(frozen=True)
class NodeTree:
    """A run's processes on one node now, or why they could not be listed there (`error`)."""

    node: str  # the node's label (host, or the Slurm node's name)
    processes: tuple[TreeProcess, ...] = ()
    server_pid: int | None = None  # the server's main process (a Slurm step's task) on the node
    error: str | None = None
    py_spy: str | None = None  # with stacks: the py-spy used, None when the node has none
    hint: str | None = None  # with stacks and no py-spy: how to get it

    @classmethod
    def from_wire(cls, node: str, d: Mapping[str, Any]) -> NodeTree:
        procs = tuple(TreeProcess.from_wire(p) for p in d.get("processes") or () if isinstance(p, Mapping))
        return cls(node, procs, as_int(d.get("server_pid")), _str(d.get("error")), _str(d.get("py_spy")),
                   _str(d.get("hint")))
