"""One run's lifecycle on its hosts: preflight → launch → monitor → crash → stop / restart.

The supervisor owns the transports (one per node), the host program (hostside.py, via HostOps),
the log followers (one per node, each with its own parser feeding the one RunState), the
telemetry stream and the readiness probe. It publishes frozen `RunSnapshot`s at ≤ 10 Hz and
`LogBatch`es at ~15 Hz to whoever listens (the TUI, the CLI); it never calls back once per line.

`close()` only detaches: the server keeps running on its hosts, and a later `attach()` (from this
or another cockpit) resumes from the run directory and the log's byte offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.profile import Host, Profile, normalise_flag_name
from cockpit.core.state import RunState
from cockpit.errors import CockpitError
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import GpuProcess, GpuSample, HostSample, LogBatch, LogLine, RunInfo, RunSnapshot
from cockpit.supervisor.host import HostOps, LinkState, LogChunk, LogFollower, LogReset, ServerExited
from cockpit.telemetry.client import TelemetrySample
from cockpit.transport.base import Transport, TransportError

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_S = 0.1  # ≤ 10 Hz
LOG_BATCH_INTERVAL_S = 1 / 15  # 10-20 Hz
LOG_RING_LINES = 5000  # what a late subscriber (or the TUI's scroll-back) can get at once
LOG_PENDING_MAX = 20000  # undelivered lines kept for a slow consumer; beyond that they are counted as dropped
LINE_CAP = 4000  # characters per log line shown (a tqdm bar or a giant repr stays one line)
HEALTH_INTERVAL_S = 2.0  # SGLang's /health costs ≥ 1 s: don't poll fast
GPU_RELEASE_TIMEOUT_S = 60.0
BIG_LOG_BYTES = 256 << 20  # a run's log above this is read as head + tail (lines between counted)
BIG_LOG_HEAD_BYTES = 64 << 20  # the startup (memory lifecycle) is in the first MBs of a run
BIG_LOG_TAIL_LINES = 20000
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
RANK_TOKEN_RE = re.compile(r"^(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+$")


class RunRefused(CockpitError):
    """A run of this profile is already alive on its host (a second launch is never made)."""

    def __init__(self, message: str, run: RunInfo | None):
        super().__init__(message, hint="`cockpit status` attaches to it; `cockpit down` stops it")
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


def _transport_for(host: Host) -> Transport:
    if host.is_local:
        from cockpit.transport.local import LocalTransport

        return LocalTransport()
    from cockpit.transport import transport_for

    return transport_for(host)


def resolve_program(argv: list[str], *, local: bool) -> list[str]:
    """A program[0] of `cockpit` on this machine means this very cockpit (venvs are rarely on PATH)."""
    if local and argv and argv[0] == "cockpit":
        return [sys.executable, "-m", "cockpit", *argv[1:]]
    return argv


def merged_flags(profile: Profile, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The server flags of a run: the profile's, with the run's overrides (any spelling) on top."""
    flags = dict(profile.server)
    for k, v in (overrides or {}).items():
        want = normalise_flag_name(k)
        for existing in list(flags):
            if normalise_flag_name(existing) == want:
                del flags[existing]
        flags[want] = v
    return flags


def changes_to_overrides(changes: Iterable[FlagChange] | dict[str, Any]) -> dict[str, Any]:
    if isinstance(changes, dict):
        return {normalise_flag_name(k): v for k, v in changes.items()}
    return {normalise_flag_name(c.flag): c.to_value for c in changes}


def _flag(flags: dict[str, Any], *names: str, default: Any = None) -> Any:
    norm = {normalise_flag_name(k): v for k, v in flags.items()}
    for n in names:
        if normalise_flag_name(n) in norm:
            return norm[normalise_flag_name(n)]
    return default


def rank_gpu_map(
    ranks: Iterable[str], hosts: list[str], flags: dict[str, Any], env: dict[str, str]
) -> dict[str, tuple[str, int]]:
    """Rank → (host, GPU index): node-local rank i is CUDA_VISIBLE_DEVICES[i] when set, else --base-gpu-id + i·step."""
    out: dict[str, tuple[str, int]] = {}
    nnodes = max(1, len(hosts))
    try:
        tp = int(_flag(flags, "tp-size", "tp", "tensor-parallel-size", default=1))
        pp = int(_flag(flags, "pp-size", "pipeline-parallel-size", default=1))
        base = int(_flag(flags, "base-gpu-id", default=0))
        step = int(_flag(flags, "gpu-id-step", default=1))
    except (TypeError, ValueError):
        return out
    per_node = max(1, (tp * pp) // nnodes)
    visible: list[int] | None = None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        try:
            visible = [int(x) for x in cvd.split(",") if x.strip()]
        except ValueError:
            visible = None  # GPU UUIDs: the index is unknown here
    for name in ranks:
        m_tp = re.search(r"\bTP(\d+)\b", name)
        m_pp = re.search(r"\bPP(\d+)\b", name)
        t = int(m_tp.group(1)) if m_tp else 0
        p = int(m_pp.group(1)) if m_pp else 0
        glob = p * tp + t
        node = min(glob // per_node, nnodes - 1)
        local = glob - node * per_node
        if visible is not None:
            if local >= len(visible):
                continue
            gpu = visible[local]
        else:
            gpu = base + local * step
        out[name] = (hosts[node], gpu)
    return out


@functools.lru_cache(maxsize=4096)
def _rank_label(prefix: str) -> str | None:
    """The rank label shown for a record's prefix ("DP1 TP3" of `[ts DP1 TP3]`); None for none.
    Continuation lines inherit their record's rank (see _feed)."""
    # Every line repeats one of a few prefixes ("TP3", "DP1 TP3"): pick the rank tokens out once
    # per prefix, not once per line (this runs for every line the TUI shows, 20k+ a second).
    tokens = [t for t in prefix.split() if RANK_TOKEN_RE.match(t)]
    return " ".join(tokens) if tokens else None


def _skip_parser_lines(parser: Any, n: int) -> None:
    """Tell the parser that n lines went by unread, so its line numbers stay those of the file."""
    parser.skip_lines(n)


class _Glue:
    """The backend pieces the supervisor needs, imported when first used."""

    @staticmethod
    def build_argvs(profile: Profile, overrides: dict[str, Any], dist_init_addr: str | None) -> list[list[str]]:
        from cockpit.backends.sglang import command

        if len(profile.hosts) == 1:
            return [command.build_argv(profile, overrides, version=profile.version)]
        return [
            command.build_node_argv(profile, i, dist_init_addr, overrides, profile.version)
            for i in range(len(profile.hosts))
        ]

    @staticmethod
    def new_parser() -> Any:
        from cockpit.backends.sglang.logparse import SGLangLogParser

        return SGLangLogParser()

    @staticmethod
    def apply(state: RunState, event: Any) -> None:
        from cockpit.core.reducer import apply

        apply(state, event)

    @staticmethod
    def process_exited(exit_code: int | None) -> Any:
        from cockpit.core.events import ProcessExited

        return ProcessExited(line=0, ts=None, rank=None, exit_code=exit_code)

    @staticmethod
    def diagnose(state: RunState, profile: Profile, hosts: Any) -> list[Finding]:
        try:
            from cockpit.backends.sglang.diagnosis import diagnose
        except ImportError:
            return []
        return list(diagnose(state, profile, hosts))

    @staticmethod
    def flag_diff(profile: Profile, flags: dict[str, Any]) -> list[FlagChange]:
        try:
            from cockpit.backends.sglang.command import flag_diff
        except ImportError:
            return _plain_flag_diff(profile, flags)
        return list(flag_diff(profile, flags))


def _plain_flag_diff(profile: Profile, flags: dict[str, Any]) -> list[FlagChange]:
    out = []
    for k, v in flags.items():
        before = profile.flag(k)
        if before != v:
            out.append(FlagChange(f"--{normalise_flag_name(k)}", before, v))
    return out


@dataclass
class _Node:
    index: int
    host: Host
    transport: Transport
    ops: HostOps
    parser: Any = None
    run: dict[str, Any] | None = None  # the host program's facts about this node's run
    follower: LogFollower | None = None
    lines: int = 0  # lines of this run's log seen so far
    rank: str | None = None  # rank of the current record (continuation lines inherit it)
    exited: ServerExited | None = None
    link_up: bool = True
    args_seen: bool = False  # this node's server_args dump was applied
    cursor: tuple[int, int | None] | None = None  # (offset, inode) where this run's log was read up to
    mid_line: bool = False  # the last chunk ended inside a line (a giant line arrives in pieces)
    key: str = ""  # the run-directory name of the profile on this node
    log: str = ""  # the log path (relative to workdir) on this node

    @property
    def label(self) -> str:
        return self.host.label


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


class Supervisor:
    def __init__(
        self,
        profile: Profile,
        *,
        on_snapshot: Callable[[RunSnapshot], None] | None = None,
        on_logs: Callable[[LogBatch], None] | None = None,
        journal: Any = None,
        telemetry_interval: float = 1.0,
        runs_root: str | None = None,
        transports: list[Transport] | None = None,
    ):
        self.profile = profile
        self.on_snapshot = on_snapshot
        self.on_logs = on_logs
        self.journal = journal
        self.telemetry_interval = telemetry_interval
        self._runs_root = runs_root
        self._given_transports = transports
        self._nodes: list[_Node] | None = None
        self._state = RunState(backend=profile.backend)
        self._lifecycle = "idle"
        self._run: RunInfo | None = None
        self._overrides: dict[str, Any] = {}
        self._flags: dict[str, Any] = dict(profile.server)
        self._findings: tuple[Finding, ...] = ()
        self._preflight: tuple[Finding, ...] = ()
        self._gpus: dict[tuple[str, int], GpuSample] = {}
        self._gpu_procs: dict[str, tuple[GpuProcess, ...]] = {}
        self._host_samples: dict[str, HostSample] = {}
        self._health: str | None = None
        self._progress = ""
        self._ring: deque[LogLine] = deque(maxlen=LOG_RING_LINES)
        self._pending: deque[LogLine] = deque()
        self._dropped = 0
        # set whenever there is something to publish: the publisher sleeps on it when idle
        self._wake = asyncio.Event()
        self._dirty = True
        self._diag_dirty = True
        self._stopping = False
        self._crash_before_stop = False
        self._closed = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._changed = asyncio.Condition()
        self._last_snapshot: RunSnapshot | None = None
        self._journal_progress_at = 0.0
        self._journal_ended = False
        self._health_port: int | None = None
        self._sim_dir = telemetry_feed.sim_dir_of(profile)

    # ------------------------------------------------------------------ plumbing
    @property
    def _dirty(self) -> bool:
        """Something changed since the last snapshot (also: log lines may be waiting)."""
        return self._dirty_flag

    @_dirty.setter
    def _dirty(self, value: bool) -> None:
        self._dirty_flag = value
        if value:
            self._wake.set()

    def _nodes_or_make(self) -> list[_Node]:
        if self._nodes is None:
            nodes = []
            for i, host in enumerate(self.profile.hosts):
                t = self._given_transports[i] if self._given_transports else _transport_for(host)
                # the host program runs on the profile's own python when it names one (it is there:
                # the server needs it), else on the host's python3
                python = None if host.is_local else (
                    self.profile.python if self.profile.python.startswith("/") else "python3")
                nodes.append(_Node(i, host, t, HostOps(t, python=python, runs_root=self._runs_root),
                                   key=node_key(self.profile, i), log=node_log(self.profile, i)))
            self._nodes = nodes
        return self._nodes

    @property
    def nodes(self) -> list[_Node]:
        return self._nodes_or_make()

    @property
    def run_info(self) -> RunInfo | None:
        return self._run

    @property
    def lifecycle(self) -> str:
        return self._lifecycle

    @property
    def state_phase(self) -> str:
        return self._state.phase

    @property
    def any_exited(self) -> bool:
        """The server of some node has exited (crash or stop)."""
        return any(n.exited is not None for n in self.nodes if n.run)

    def _set(self, lifecycle: str | None = None, progress: str | None = None) -> None:
        if lifecycle is not None:
            self._lifecycle = lifecycle
        if progress is not None:
            self._progress = progress
        self._dirty = True
        self._notify()

    def _notify(self) -> None:
        cond = self._changed

        async def _wake() -> None:
            async with cond:
                cond.notify_all()

        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().create_task(_wake())

    # ------------------------------------------------------------------ preflight
    async def preflight(self, overrides: dict[str, Any] | None = None) -> list[Finding]:
        """Flags and host facts checked before a launch (HiCache per-rank arithmetic, GPUs, RAM)."""
        from cockpit.commands.check import check_profile

        self._set("preflight", "checking the profile against its hosts")
        profile = self.profile
        if overrides:
            profile = profile.model_copy(update={"server": merged_flags(profile, overrides)})
        findings, _facts = check_profile(profile, await self.host_facts())
        self._preflight = tuple(findings)
        self._set("idle", "")
        return findings

    async def host_facts(self) -> dict[str, Any]:
        """HostFacts per node label, measured by the telemetry agent (unreachable nodes left out)."""
        out: dict[str, Any] = {}
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, sim_dir=self._sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                log.debug("host facts on %s: %s", node.label, exc)
                continue
            self._take_telemetry(node, sample)
            out[node.label] = telemetry_feed.host_facts(sample)
        return out

    # ------------------------------------------------------------------ launch / attach
    async def start(self, overrides: dict[str, Any] | None = None, *, attach: bool = True,
                    kill_leftovers: bool = False) -> RunInfo:
        """Launch the profile's server detached on every node. A live run is attached to (never
        launched twice) when `attach` is true, else refused with RunRefused. Processes already
        holding memory on the GPUs the run will use refuse the launch (LeftoversHoldGpus) unless
        kill_leftovers: a server started on top of them would size its KV pool from what is left
        and die, or starve them."""
        overrides = {normalise_flag_name(k): v for k, v in (overrides or {}).items()}
        nodes = self.nodes
        live = await self._find_live()
        if live is not None:
            if attach:
                return live
            n0 = nodes[0].run or {}
            if not n0.get("alive") and n0.get("members"):
                raise RunRefused(
                    f"{self.profile.name}: the server of run {live.id} has exited but its processes "
                    f"{n0['members']} are still alive on {live.hosts[0]} (and may hold GPU memory)", live)
            raise RunRefused(f"{self.profile.name} is already running on {live.hosts[0]} (run {live.id}, pid {live.pid})", live)
        busy = await self._wait_gpu_release(self._gpus_for_flags(merged_flags(self.profile, overrides)), kill_leftovers)
        if busy:
            raise LeftoversHoldGpus(busy)
        self._set("launching", "launching the server")
        run_id = new_run_id()
        dist_addr: str | None = None
        if len(nodes) > 1:
            given = _flag(merged_flags(self.profile, overrides), "dist-init-addr", "nccl-init-addr")
            if given:
                dist_addr = str(given)
            else:
                addr, port = await nodes[0].ops.free_port()
                dist_addr = f"{addr}:{port}"
        argvs = _Glue.build_argvs(self.profile, overrides, dist_addr)
        flags = merged_flags(self.profile, overrides)
        launched: list[dict[str, Any]] = []
        for node, argv in zip(nodes, argvs, strict=True):
            argv = resolve_program(list(argv), local=node.host.is_local)
            meta = {"flags": flags, "overrides": overrides, "node_rank": node.index, "hosts": [n.label for n in nodes]}
            res = await node.ops.launch(
                node.key,
                run_id,
                argv,
                env=dict(self.profile.env),
                cwd=self.profile.workdir,
                log=node.log,
                meta=meta,
            )
            if res.get("refused"):
                # lost a race with another cockpit: theirs wins, we attach
                await self._stop_nodes(launched, timeout=10)
                self._set("idle", "")
                found = await self._find_live()
                if found is not None and attach:
                    return found
                raise RunRefused(f"{self.profile.name} is already running on {node.label}", found)
            if "error" in res:
                await self._stop_nodes(launched, timeout=10)
                self._set("failed", f"launch failed on {node.label}: {res['error']}")
                raise LaunchFailed(f"{node.label}: the server did not start: {res['error']}",
                                   hint="check the profile's python/program and workdir")
            launched.append({"node": node, "run": res["run"]})
        self._reset_for_run()
        for item in launched:
            item["node"].run = item["run"]
        self._overrides = overrides
        self._flags = flags
        self._run = self._run_info_from_nodes()
        self._set("running", "starting")
        self._journal_start()
        return self._run

    async def _stop_nodes(self, launched: list[dict[str, Any]], timeout: float) -> None:
        for item in launched:
            with contextlib.suppress(TransportError):
                await item["node"].ops.stop(item["node"].key, item["run"]["run_id"], timeout)

    async def _find_live(self) -> RunInfo | None:
        info = await self.attach()
        return info

    async def attach(self, *, include_ended: bool = False) -> RunInfo | None:
        """The profile's live run (pid alive, still our process) on its hosts, resumed; with
        include_ended, the newest run even if it has ended (status of a crashed run)."""
        nodes = self.nodes
        first = await nodes[0].ops.find(nodes[0].key)
        if first is None:
            return None
        alive = bool(first.get("alive") or first.get("members"))
        if not alive and not include_ended:
            return None
        if self._run is not None and self._run.id == first["run_id"]:
            return self._run
        self._reset_for_run()
        nodes[0].run = first
        for node in nodes[1:]:
            node.run = await node.ops.find(node.key, first["run_id"])
        meta = first.get("meta") or {}
        self._flags = dict(meta.get("flags") or self.profile.server)
        self._overrides = dict(meta.get("overrides") or {})
        self._run = self._run_info_from_nodes()
        if alive:
            self._set("running", "")
            self._journal_start()
        else:
            # the exit is applied to the state once the log has been read (refresh_once / run)
            self._set("stopped" if first.get("stopped_by") else "failed", "the run has ended")
        return self._run

    def _reset_for_run(self) -> None:
        self._state = RunState(backend=self.profile.backend)
        self._findings = ()
        self._health = None
        self._health_port = None  # a restart may have changed --port
        self._ring.clear()
        self._pending.clear()
        self._dropped = 0
        self._stopping = False
        self._crash_before_stop = False
        self._journal_ended = False
        for node in self.nodes:
            node.parser = None
            node.run = None
            node.follower = None
            node.lines = 0
            node.rank = None
            node.exited = None
            node.args_seen = False
            node.mid_line = False
            node.cursor = None
        self._dirty = self._diag_dirty = True

    def _run_info_from_nodes(self) -> RunInfo:
        n0 = self.nodes[0].run or {}
        return RunInfo(
            id=str(n0.get("run_id")),
            profile=self.profile.name,
            hosts=tuple(n.label for n in self.nodes),
            pid=n0.get("pid"),
            pgid=n0.get("pgid"),
            started_at=str(n0.get("started_at") or ""),
            run_dir=str(n0.get("run_dir") or ""),
            log_path=str(n0.get("log_path") or ""),
            flags=dict(self._flags),
            version=self.profile.version,
        )

    # ------------------------------------------------------------------ monitoring
    async def run(self) -> None:
        """Follow every node's log, telemetry and the readiness probe until stop() or close()."""
        if self._run is None:
            raise CockpitError(f"{self.profile.name}: no run to follow", hint="start() or attach() first")
        self._tasks = [asyncio.create_task(self._follow(node, follow=True)) for node in self.nodes if node.run]
        self._tasks.append(asyncio.create_task(self._publisher()))
        self._tasks.append(asyncio.create_task(self._probe_loop()))
        self._tasks.append(asyncio.create_task(self._telemetry_loop()))
        try:
            await self._closed.wait()
        finally:
            await self._cancel_tasks()
            self._publish(force=True)

    async def refresh_once(self) -> RunSnapshot:
        """Read each node's log of the run to its current end, one probe: a snapshot for `status`."""
        await asyncio.gather(*(self._follow(node, follow=False) for node in self.nodes if node.run))
        if any(n.exited is None for n in self.nodes if n.run) and self._lifecycle == "running":
            await self._probe_once()
        await self._telemetry_once()
        if self.journal is not None and self._run is not None:
            if all(n.exited is not None for n in self.nodes if n.run):
                # a run nobody watched to its end: complete it from its log
                outcome = "crashed" if self._state.phase == "crashed" else "stopped"
                self._journal_call("complete_from_state", self._run.id, self._state,
                                   list(self._current_findings()), outcome)
                self._journal_ended = True
            else:
                self._journal_tick(force=True)
        return self.snapshot()

    async def _follow(self, node: _Node, *, follow: bool) -> None:
        run = node.run
        assert run is not None
        if node.parser is None:
            node.parser = _Glue.new_parser()
        watch = {"pid": run["pid"], "run_dir": run["run_dir"]} if run.get("pid") and follow else None
        if node.cursor is not None:  # read before (status, then follow): resume, never re-read
            offset, ino = node.cursor
        else:
            offset, ino = await self._read_big_log_head(node, int(run.get("log_offset") or 0), run.get("log_inode"))
        fol = LogFollower(node.ops, run["log_path"], offset=offset, ino=ino, follow=follow, watch=watch)
        node.follower = fol
        try:
            async for item in fol.items():
                if isinstance(item, LogChunk):
                    self._feed(node, item.data)
                elif isinstance(item, ServerExited):
                    self._server_exited(node, item)
                elif isinstance(item, LogReset):
                    node.mid_line = False
                    self._progress = f"{node.label}: log {item.why}; following the new file"
                elif isinstance(item, LinkState):
                    node.link_up = item.up
                    self._progress = "" if item.up else f"{node.label}: connection lost ({item.reason}); reconnecting"
                    self._dirty = True
            if not follow:
                self._finish_parser(node)
                ended = node.run or {}
                if not ended.get("alive") and ended.get("exit_code") is not None and node.exited is None:
                    self._server_exited(node, ServerExited(int(ended.get("pid") or 0), ended.get("exit_code")))
        finally:
            node.follower = None
            node.cursor = (fol.offset, fol.ino)
            await fol.close()

    async def _read_big_log_head(self, node: _Node, offset: int, ino: int | None) -> tuple[int, int | None]:
        """A run's log of many GB (days of batch lines) is not read whole: its head (the startup,
        where the memory story is) and its last lines are; the lines between are counted on the
        host so line numbers stay exact. Returns where following starts."""
        run = node.run or {}
        try:
            scan = await node.ops.scan(run["log_path"], offset, ino, head_bytes=BIG_LOG_HEAD_BYTES,
                                       tail_lines=BIG_LOG_TAIL_LINES)
        except (TransportError, OSError):
            return offset, ino  # e.g. no log yet: follow from the start
        if scan["size"] - scan["offset"] <= BIG_LOG_BYTES:
            return offset, ino
        fol = LogFollower(node.ops, run["log_path"], offset=scan["offset"], ino=scan["ino"], follow=False,
                          end=scan["head_end"])
        try:
            async for item in fol.items():
                if isinstance(item, LogChunk):
                    self._feed(node, item.data)
        finally:
            await fol.close()
        skipped = int(scan["skipped_lines"])
        node.lines += skipped
        _skip_parser_lines(node.parser, skipped)
        self._progress = (f"{node.label}: a {scan['size'] / 1e9:.1f} GB log: read its startup and its last "
                          f"{BIG_LOG_TAIL_LINES} lines ({skipped} lines between were counted, not parsed)")
        return int(scan["tail_start"]), scan["ino"]

    def _feed(self, node: _Node, data: bytes) -> None:
        for ev in node.parser.feed(data):
            self._apply(node, ev)
        # Catching up on a long log: only the newest lines become LogLines (the ring holds no
        # more anyway); the older ones are counted so line numbers stay exact.
        total = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        if total > LOG_RING_LINES:
            cut = len(data)
            for _ in range(LOG_RING_LINES + (0 if not data.endswith(b"\n") else 1)):
                cut = data.rfind(b"\n", 0, cut)
            node.lines += data.count(b"\n", 0, cut + 1) - (1 if node.mid_line else 0)
            node.mid_line = False
            node.rank = None
            data = data[cut + 1 :]
        text = data.decode("utf-8", "replace")
        label = node.label  # a property chain: once per chunk, not once per line
        # newlines only: a tqdm \r, a form feed or a \x1c in binary garbage is not a line break
        # in the file, and line numbers must stay the file's (the parser counts the same way)
        pieces = text.split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
        if node.mid_line and pieces:
            pieces.pop(0)  # the rest of a giant line shown (capped) and counted with its first piece
        node.mid_line = not data.endswith(b"\n")
        from cockpit.backends.sglang.logparse import split_record  # once per chunk: ~0.5 µs a line otherwise

        for raw in pieces:
            node.lines += 1
            line = ANSI_RE.sub("", raw) if "\x1b" in raw else raw
            if "\r" in line:  # tqdm redraws: the last segment is what a terminal shows
                line = line.rsplit("\r", 1)[-1] or line.strip("\r")
            ts, prefix, _msg = split_record(line)  # a record start: its rank; else the record's
            if ts is not None:
                node.rank = _rank_label(prefix or "")
            ll = LogLine(node.lines, node.rank, line[:LINE_CAP], label)
            self._ring.append(ll)
            if len(self._pending) >= LOG_PENDING_MAX:
                self._pending.popleft()
                self._dropped += 1
            self._pending.append(ll)
        self._dirty = self._diag_dirty = True

    def _apply(self, node: _Node, ev: Any) -> None:
        """Fold one node's event into the run's one RunState.

        Every node's log starts with the server_args dump, and the reducer reads a second dump as
        a new run appended to the log (it resets the state). In a multi-node run a node's first
        dump is not that: take its arguments (node 0's win) without resetting the other nodes' ranks.
        """
        if len(self.nodes) > 1 and type(ev).__name__ == "ServerArgs":
            first_of_node = not node.args_seen
            node.args_seen = True
            st = self._state
            if first_of_node and (st.ranks or st.crash is not None or st.ready_in_log):
                scratch = RunState(backend=st.backend)
                _Glue.apply(scratch, ev)
                if node.index == 0 or not st.server_args:
                    st.server_args = scratch.server_args
                    st.format = scratch.format or st.format
                return
        _Glue.apply(self._state, ev)

    def _finish_parser(self, node: _Node) -> None:
        if node.parser is None:
            return
        finish = getattr(node.parser, "finish", None)
        if finish is not None:
            for ev in finish():
                self._apply(node, ev)

    def _server_exited(self, node: _Node, ex: ServerExited) -> None:
        if node.exited is not None:
            return
        node.exited = ex
        self._finish_parser(node)
        _Glue.apply(self._state, _Glue.process_exited(ex.code))
        if self._stopping or (node.run or {}).get("stopped_by") or ex.stopped_by:
            self._mark_stopped()
        self._dirty = self._diag_dirty = True
        if not self._stopping:
            self._set("failed" if self._state.phase == "crashed" else "stopped",
                      f"the server on {node.label} exited with code {ex.code}")
            self._journal_end()

    def _mark_stopped(self) -> None:
        """A stop we asked for is not a crash, whatever the exit code says (137 after SIGKILL can
        read as the OOM killer). A crash the log showed before the stop stays a crash."""
        crash = self._state.crash
        if crash is not None and (self._crash_before_stop or (not self._stopping and crash.kind != "unknown")):
            return
        self._state.crash = None
        self._state.phase = "stopped"

    async def _publisher(self) -> None:
        """Log batches at ≤ 15 Hz and snapshots at ≤ 10 Hz, woken by new data, never polling.

        Intervals count from the end of the previous delivery, so a slow snapshot build never
        squeezes two callbacks closer than the cap. With nothing new it sleeps until data comes
        (or, with a journal, until its next 1 s progress tick).
        """
        last_logs = last_snap = -1e9
        while True:
            now = time.monotonic()
            if (self._pending or self._dropped) and now - last_logs >= LOG_BATCH_INTERVAL_S:
                self._flush_logs()
                last_logs = time.monotonic()
            if self._dirty and now - last_snap >= SNAPSHOT_INTERVAL_S:
                self._publish()
                last_snap = time.monotonic()
            self._journal_tick()
            due: list[float] = []
            if self._pending or self._dropped:
                due.append(last_logs + LOG_BATCH_INTERVAL_S)
            if self._dirty:
                due.append(last_snap + SNAPSHOT_INTERVAL_S)
            if due:
                await asyncio.sleep(max(0.0, min(due) - time.monotonic()))
                continue
            self._wake.clear()  # nothing runs between here and the wait: no change is missed
            timeout = None
            if self.journal is not None and self._run is not None and not self._journal_ended:
                timeout = max(0.0, self._journal_progress_at + 1.0 - time.monotonic())
            # not asyncio.wait_for: on 3.11 it can swallow a cancel that lands as the event is set,
            # and close() would then wait for this task forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _flush_logs(self) -> None:
        if not self._pending and not self._dropped:
            return
        lines = tuple(self._pending)
        self._pending.clear()
        dropped, self._dropped = self._dropped, 0
        if self.on_logs is not None:
            try:
                self.on_logs(LogBatch(lines, dropped))
            except Exception:  # a listener's bug must not stop the supervisor
                log.exception("on_logs listener failed")

    def _publish(self, force: bool = False) -> None:
        if not (self._dirty or force):
            return
        snap = self.snapshot()
        self._dirty = False
        if self.on_snapshot is not None:
            try:
                self.on_snapshot(snap)
            except Exception:
                log.exception("on_snapshot listener failed")
        self._notify()

    def _journal_call(self, what: str, *args: Any) -> None:
        """The journal never stops a run: its failures are logged and skipped."""
        if self.journal is None:
            return
        try:
            getattr(self.journal, what)(*args)
        except Exception as exc:
            log.warning("journal %s failed: %s", what, exc)

    def _journal_start(self) -> None:
        if self._run is not None:
            self._journal_ended = False
            self._journal_call("record_start", self._run, self.profile.name, dict(self._flags))

    def _journal_tick(self, force: bool = False) -> None:
        if self.journal is None or self._run is None or self._journal_ended:
            return
        now = time.monotonic()
        if not force and now - self._journal_progress_at < 1.0:
            return
        self._journal_progress_at = now
        # cheap: the journal writes only when something it keeps has changed
        self._journal_call("record_progress", self._run.id, self._state, list(self._current_findings()))

    def _state_was_read(self) -> bool:
        return any(n.parser is not None for n in self.nodes if n.run)

    def _journal_end(self) -> None:
        if self.journal is None or self._run is None or self._journal_ended:
            return
        self._journal_ended = True
        outcome = "crashed" if self._state.phase == "crashed" else "stopped"
        # `down` stops a run without reading its log: keep what the journal learnt so far
        state = self._state if self._state_was_read() else None
        findings = list(self._current_findings()) if state is not None else []
        self._journal_call("record_end", self._run.id, outcome, state, findings)

    # ------------------------------------------------------------------ readiness probe
    def _version(self) -> str | None:
        fmt = self._state.format or ""
        return self.profile.version or (fmt.split("-", 1)[1] if fmt.startswith("sglang-") else None)

    def _health_path(self) -> str:
        from cockpit.telemetry.probes import readiness_path

        return readiness_path(self._version())

    def _port(self) -> int:
        try:
            return int(_flag(self._flags, "port", default=30000))
        except (TypeError, ValueError):
            return 30000

    async def _probe_once(self) -> None:
        """Readiness on node 0 only (other nodes serve a dummy /health that always says 200)."""
        from cockpit.telemetry.probes import probe_readiness

        node = self.nodes[0]
        try:
            if self._health_port is None:
                self._health_port = await node.transport.forward_port(self._port())
            health = await probe_readiness(f"http://127.0.0.1:{self._health_port}", self._version())
        except (TransportError, OSError):
            health = "unreachable"
        if health != self._health:
            self._health = health
            self._dirty = True
            self._notify()

    async def api_base_url(self) -> str:
        """`http://127.0.0.1:PORT` reaching node 0's API port: the port itself for a local run, the
        SSH local forward for a remote one (the same tunnel the readiness probe uses)."""
        if self._health_port is None:
            self._health_port = await self.nodes[0].transport.forward_port(self._port())
        return f"http://127.0.0.1:{self._health_port}"

    async def _probe_loop(self) -> None:
        while True:
            if self.nodes[0].exited is None and not self._stopping:
                await self._probe_once()
            await asyncio.sleep(HEALTH_INTERVAL_S if self._health != "refused" else 1.0)

    # ------------------------------------------------------------------ telemetry
    def _run_pids(self, node: _Node) -> list[int]:
        pid = (node.run or {}).get("pid")
        return [int(pid)] if pid else []

    async def _telemetry_loop(self) -> None:
        async def one(node: _Node) -> None:
            while True:
                try:
                    async for sample in telemetry_feed.stream_samples(
                        node.ops, interval=self.telemetry_interval, pids=self._run_pids(node), sim_dir=self._sim_dir
                    ):
                        self._take_telemetry(node, sample)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the agent died or the link dropped: restart it
                    log.debug("telemetry on %s: %s", node.label, exc)
                await asyncio.sleep(1.0)

        await asyncio.gather(*(one(n) for n in self.nodes))

    async def _telemetry_once(self) -> None:
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, pids=self._run_pids(node), sim_dir=self._sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                log.debug("telemetry on %s: %s", node.label, exc)
                continue
            self._take_telemetry(node, sample)

    def _take_telemetry(self, node: _Node, sample: TelemetrySample) -> None:
        for g in sample.gpus:
            self._gpus[(node.label, g.index)] = g
        members = set((node.run or {}).get("members") or []) | set(self._run_pids(node))
        self._gpu_procs[node.label] = tuple(
            GpuProcess(node.label, p.pid, p.gpu_index, p.used_gb, p.belongs_to_run or p.pid in members)
            for p in sample.processes
        )
        if sample.host is not None:
            self._host_samples[node.label] = sample.host
        self._dirty = True

    # ------------------------------------------------------------------ snapshots
    def _current_findings(self) -> tuple[Finding, ...]:
        if self._diag_dirty:
            self._diag_dirty = False
            try:
                self._findings = tuple(_Glue.diagnose(self._state, self.profile, self._host_facts_now()))
            except Exception:
                log.exception("diagnosis failed")
        return self._findings

    def _host_facts_now(self) -> list[Any]:
        from cockpit.backends.base import HostFacts

        out = []
        for label, hs in self._host_samples.items():
            out.append(HostFacts(host=label, mem_total_gb=hs.mem_total_gb, mem_available_gb=hs.mem_available_gb,
                                 source=hs.source))
        return out

    def rank_gpu(self) -> dict[str, tuple[str, int]]:
        return rank_gpu_map(self._state.ranks.keys(), [n.label for n in self.nodes], self._flags, self.profile.env)

    def run_gpus(self) -> set[tuple[str, int]]:
        """(host, GPU) pairs the run uses: from the ranks its log showed, else from its flags."""
        found = set(self.rank_gpu().values())
        return found or self._gpus_for_flags(self._flags)

    def _gpus_for_flags(self, flags: dict[str, Any]) -> set[tuple[str, int]]:
        """(host, GPU) pairs a run with these flags will use (before its log names any rank)."""
        try:
            tp = int(_flag(flags, "tp-size", "tp", "tensor-parallel-size", default=1))
            pp = int(_flag(flags, "pp-size", "pipeline-parallel-size", default=1))
        except (TypeError, ValueError):
            return set()
        names = [f"PP{p} TP{t}" if pp > 1 else f"TP{t}" for p in range(pp) for t in range(tp)]
        return set(rank_gpu_map(names, [n.label for n in self.nodes], flags, self.profile.env).values())

    def snapshot(self) -> RunSnapshot:
        findings = self._current_findings()
        try:
            diff = tuple(_Glue.flag_diff(self.profile, self._flags)) if self._overrides else ()
        except Exception:
            diff = tuple(_plain_flag_diff(self.profile, self._flags))
        snap = RunSnapshot(
            taken_at=time.time(),
            profile=self.profile.name,
            lifecycle=self._lifecycle,
            state=self._state.copy(),
            findings=findings,
            run=self._run,
            gpus=tuple(sorted(self._gpus.values(), key=lambda g: (g.host, g.index))),
            gpu_processes=tuple(p for procs in self._gpu_procs.values() for p in procs),
            hosts=tuple(self._host_samples.values()),
            readiness=f"log + {self._health_path()}",
            health=self._health,
            flag_diff=diff,
            progress=self._progress,
            rank_gpu=self.rank_gpu(),
        )
        self._last_snapshot = snap
        return snap

    def recent_lines(self) -> list[LogLine]:
        return list(self._ring)

    def is_ready(self) -> bool:
        return self._state.phase == "ready" and self._health == "200"

    async def wait_until(self, cond: Callable[[Supervisor], bool], timeout: float) -> bool:
        """Wait (while run() works) until cond(self) holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while not cond(self):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
        return True

    # ------------------------------------------------------------------ stop / restart / close
    async def stop(self, timeout: float = 30.0, kill_leftovers: bool = False) -> StopResult:
        """SIGTERM the run's process groups, SIGKILL after `timeout`, then wait until its GPU
        memory is released; leftovers still holding memory are reported (and killed on request)."""
        if self._run is None:
            await self.attach()
        if self._run is None:
            return StopResult(True, False, [])
        self._crash_before_stop = self._state.crash is not None
        self._stopping = True
        self._set("stopping", f"stopping {self.profile.name} (SIGTERM, SIGKILL after {timeout:g} s)")
        gpus_of_run = self.run_gpus()
        results = await asyncio.gather(
            *(n.ops.stop(n.key, n.run["run_id"], timeout) for n in self.nodes if n.run),
            return_exceptions=True,
        )
        res = StopResult(True, False, [])
        for node, r in zip([n for n in self.nodes if n.run], results, strict=True):
            if isinstance(r, BaseException):
                res.stopped = False
                self._progress = f"{node.label}: stop failed: {r}"
                continue
            res.killed |= bool(r.get("killed"))
            res.left += list(r.get("left") or [])
            res.stopped &= bool(r.get("stopped"))
            run = r.get("run") or {}
            res.exit_codes[node.label] = run.get("exit_code")
            if node.exited is None:
                self._server_exited(node, ServerExited(int(run.get("pid") or 0), run.get("exit_code")))
        self._mark_stopped()
        self._set("waiting_gpu_release", "waiting for the run's GPU memory to be released")
        res.leftovers = await self._wait_gpu_release(gpus_of_run, kill_leftovers)
        self._set("stopped", "stopped" if not res.leftovers else
                  "GPU memory still held by pid " + ", ".join(str(p.pid) for p in res.leftovers))
        self._journal_end()
        self._publish(force=True)
        return res

    async def gpu_processes_now(self) -> list[GpuProcess] | None:
        """Processes on the GPUs of every node now (None when telemetry cannot tell)."""
        out: list[GpuProcess] = []
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, pids=self._run_pids(node), sim_dir=self._sim_dir)
            except (TransportError, OSError, ValueError):
                return None
            if sample.source == "none":
                return None
            self._take_telemetry(node, sample)
            out += list(self._gpu_procs.get(node.label, ()))
        return out

    async def _wait_gpu_release(self, gpus: set[tuple[str, int]], kill: bool) -> list[GpuProcess]:
        deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
        killed_once = False
        while True:
            procs = await self.gpu_processes_now()
            if procs is None:
                return []  # unknown: process death was verified, memory can't be
            on_ours = [p for p in procs if not gpus or (p.host, p.gpu_index) in gpus]
            if not on_ours:
                return []
            if kill and not killed_once:
                killed_once = True
                await self.kill_pids(on_ours)
            elif time.monotonic() > deadline or (not any(p.belongs_to_run for p in on_ours) and not kill):
                # foreign/leftover processes: waiting won't free them; the operator decides
                return on_ours
            self._set(progress="waiting for GPU memory: pid " + ", ".join(str(p.pid) for p in on_ours))
            await asyncio.sleep(0.5)

    async def kill_pids(self, procs: Iterable[GpuProcess]) -> None:
        by_host: dict[str, list[int]] = {}
        for p in procs:
            by_host.setdefault(p.host, []).append(p.pid)
        for node in self.nodes:
            if node.label in by_host:
                await node.ops.kill(by_host[node.label])

    async def restart(self, changes: list[FlagChange] | dict[str, Any], *, kill_leftovers: bool = False,
                      timeout: float = 30.0) -> RunInfo:
        """Stop → wait for the GPUs to be free → launch with the change; refuses to launch on top of
        leftovers (LeftoversHoldGpus) unless kill_leftovers."""
        overrides = {**self._overrides, **changes_to_overrides(changes)}
        was_running = bool(self._tasks)
        res = await self.stop(timeout=timeout, kill_leftovers=kill_leftovers)
        if res.leftovers:
            raise LeftoversHoldGpus(res.leftovers)
        if not res.stopped:
            raise CockpitError(f"processes of the old run survived SIGKILL: {res.left}")
        await self._cancel_tasks()
        info = await self.start(overrides, attach=False)
        if was_running and not self._closed.is_set():
            self._tasks = [asyncio.create_task(self._follow(node, follow=True)) for node in self.nodes if node.run]
            self._tasks.append(asyncio.create_task(self._publisher()))
            self._tasks.append(asyncio.create_task(self._probe_loop()))
            self._tasks.append(asyncio.create_task(self._telemetry_loop()))
        return info

    async def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        tasks, self._tasks = [t for t in self._tasks if t is not current], []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for node in self.nodes:
            if node.follower is not None:
                await node.follower.close()

    async def close(self) -> None:
        """Detach: stop following; the server keeps running on its hosts."""
        self._closed.set()
        await self._cancel_tasks()
        if self._state_was_read():
            self._journal_tick(force=True)
        # transports are pooled (transport_for) and shared with other views: their owner closes them

