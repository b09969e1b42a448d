"""One run's lifecycle on its hosts: preflight → launch → monitor → crash → stop / restart.

The supervisor owns the nodes (one per host: transport, host program, log), and composes the
parts that do the watching, each in its own module:

- `follower.py`   the nodes' logs → the run's one RunState (and the lines to show)
- `watch.py`      GPU/host telemetry and node 0's readiness probe
- `publisher.py`  frozen `RunSnapshot`s at ≤ 10 Hz and `LogBatch`es at ~15 Hz to listeners
- `recorder.py`   the journal, fed from the published snapshots

Engine knowledge (argv, flags, GPU placement, readiness path, diagnosis) comes from the
profile's backend (`get_backend(profile.backend)`). `close()` only detaches: the server keeps
running on its hosts, and a later `attach()` (from this or another cockpit) resumes from the run
directory and the log's byte offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from cockpit.aio import reap
from cockpit.backends import get_backend
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.profile import Profile, normalise_flag_name
from cockpit.core.reducer import apply
from cockpit.errors import CockpitError
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import GpuProcess, LogBatch, LogLine, RunInfo, RunSnapshot
from cockpit.supervisor.follower import Follow, RunFold
from cockpit.supervisor.host import ServerExited
from cockpit.supervisor.hostresults import LaunchReply, RunRecord, StopReply, run_or_none
from cockpit.supervisor.nodes import Node, make_nodes, resolve_program
from cockpit.supervisor.publisher import Publisher
from cockpit.supervisor.recorder import Recorder, RunJournal
from cockpit.supervisor.servingwatch import ServingWatch
from cockpit.supervisor.watch import GpuWatch, ReadinessProbe
from cockpit.transport.base import Transport, TransportError

log = logging.getLogger(__name__)


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


class Supervisor:
    def __new__(cls, profile: Profile, **_kw: Any) -> Supervisor:
        # a `target: {kind: slurm}` profile runs as a Slurm job: every caller that makes a
        # Supervisor (CLI, TUI) gets the Slurm one without knowing
        if cls is Supervisor and getattr(profile, "target", None) is not None:
            from cockpit.slurm.supervisor import SlurmSupervisor

            return super().__new__(SlurmSupervisor)
        return super().__new__(cls)

    def __init__(
        self,
        profile: Profile,
        *,
        on_snapshot: Callable[[RunSnapshot], None] | None = None,
        on_logs: Callable[[LogBatch], None] | None = None,
        journal: RunJournal | None = None,
        telemetry_interval: float = 1.0,
        runs_root: str | None = None,
        transports: list[Transport] | None = None,
    ):
        self.profile = profile
        self.backend = get_backend(profile.backend)
        self.nodes: list[Node] = make_nodes(profile, transports, runs_root)
        self._lifecycle = "idle"
        self._progress = ""
        self._info: RunInfo | None = None
        self._overrides: dict[str, Any] = {}
        self._debug_env: dict[str, str] = {}  # a debug relaunch's environment (restart(debug=True))
        self._debug_flags: set[str] = set()  # and the flags it added (the next ordinary restart drops both)
        self._flags: dict[str, Any] = dict(profile.server)
        self._findings: tuple[Finding, ...] = ()
        self._preflight: tuple[Finding, ...] = ()
        self._plan: Any = None  # the memory plan for the run's flags, made once capture is over
        self._plan_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stop_by = "operator"  # who asked for the current stop (RunSnapshot.ending)
        self._crash_before_stop = False
        self._closed = asyncio.Event()
        self._watchers: list[asyncio.Task[Any]] = []  # follow, probe, telemetry: one per run
        self._publishing: asyncio.Task[Any] | None = None  # lives across restarts

        self.publisher = Publisher(self.snapshot, on_logs=on_logs)
        if on_snapshot is not None:
            self.publisher.subscribe(on_snapshot)
        self.recorder = Recorder(journal, profile.name) if journal is not None else None
        if self.recorder is not None:
            self.publisher.subscribe(self.recorder.on_snapshot)
            self.publisher.add_ticker(self.recorder.tick)
        self.fold = RunFold(self.backend, len(self.nodes))
        self.follow = Follow(self.fold, self.publisher, self._server_exited, self._say)
        self.telemetry = GpuWatch(self.nodes, interval=telemetry_interval,
                                  sim_dir=telemetry_feed.sim_dir_of(profile), changed=self._changed)
        self.readiness = ReadinessProbe(self._changed_and_notify)
        self.serving = ServingWatch(self.backend, profile, lambda: self.fold.state, self._changed_and_notify)
        self.follow.line_listeners.append(self.serving.lines)

    # ------------------------------------------------------------------ plumbing
    @property
    def run_info(self) -> RunInfo | None:
        return self._info

    @property
    def lifecycle(self) -> str:
        return self._lifecycle

    @property
    def state_phase(self) -> str:
        return self.fold.state.phase

    @property
    def any_exited(self) -> bool:
        """The server of some node has exited (crash or stop)."""
        return any(n.exited is not None for n in self.nodes if n.record)

    def _changed(self) -> None:
        self.publisher.dirty = True

    def _changed_and_notify(self) -> None:
        self.publisher.dirty = True
        self.publisher.notify()

    def _say(self, progress: str) -> None:
        self._progress = progress
        self.publisher.dirty = True

    def _set(self, lifecycle: str | None = None, progress: str | None = None) -> None:
        if lifecycle is not None:
            self._lifecycle = lifecycle
        if progress is not None:
            self._progress = progress
        self._changed_and_notify()

    # ------------------------------------------------------------------ preflight
    async def preflight(self, overrides: dict[str, Any] | None = None) -> list[Finding]:
        """Flags and host facts checked before a launch (HiCache per-rank arithmetic, GPUs, RAM)."""
        from cockpit.telemetry.hostfacts import check_profile

        self._set("preflight", "checking the profile against its hosts")
        profile = self.profile
        if overrides:
            profile = profile.model_copy(update={"server": merged_flags(profile, overrides)})
        from cockpit.core.findings import sort_findings
        from cockpit.supervisor.launchcheck import launch_findings

        findings, _facts = check_profile(profile, await self.telemetry.host_facts())
        # the model path missing on node 0, its API port bound: the launch would die of them
        findings = sort_findings([*findings, *await launch_findings(self.profile, overrides, self.nodes[0])])
        self._preflight = tuple(findings)
        self._set("idle", "")
        return findings

    # ------------------------------------------------------------------ launch / attach
    async def start(self, overrides: dict[str, Any] | None = None, *, attach: bool = True,
                    kill_leftovers: bool = False) -> RunInfo:
        """Launch the profile's server detached on every node. A live run is attached to (never
        launched twice) when `attach` is true, else refused with RunRefused. Processes already
        holding memory on the GPUs the run will use refuse the launch (LeftoversHoldGpus) unless
        kill_leftovers: a server started on top of them would size its KV pool from what is left
        and die, or starve them."""
        if self.profile.groups:  # two groups are never launched as one plain server (the TUI, `up`)
            name = self.profile.name
            raise LaunchFailed(f"{name} declares a prefill group and a decode group: launch each as its own "
                               f"profile, {name}.prefill and {name}.decode")
        overrides = {normalise_flag_name(k): v for k, v in (overrides or {}).items()}
        nodes = self.nodes
        live = await self.attach()
        if live is not None:
            if attach:
                return live
            n0 = nodes[0].record
            if n0 is not None and not n0.alive and n0.members:
                raise RunRefused(
                    f"{self.profile.name}: the server of run {live.id} has exited but its processes "
                    f"{list(n0.members)} are still alive on {live.hosts[0]} (and may hold GPU memory)", live)
            raise RunRefused(f"{self.profile.name} is already running on {live.hosts[0]} (run {live.id}, pid {live.pid})", live)
        flags = merged_flags(self.profile, overrides)
        busy = await self.telemetry.wait_release(self._gpus_for_flags(flags), kill_leftovers, self._say)
        if busy:
            raise LeftoversHoldGpus(busy)
        self._set("launching", "launching the server")
        run_id = new_run_id()
        dist_addr: str | None = None
        if len(nodes) > 1:
            dist_addr = self.backend.rendezvous_addr(flags)
            if dist_addr is None:
                addr, port = await nodes[0].ops.free_port()
                dist_addr = f"{addr}:{port}"
        argvs = self.backend.build_node_argvs(self.profile, overrides, dist_addr)
        env = {**self.profile.env, **self._debug_env, **self.backend.secret_env(self.profile, overrides)}
        launched: list[tuple[Node, RunRecord]] = []
        for node, argv in zip(nodes, argvs, strict=True):
            argv = resolve_program(list(argv), local=node.host.is_local)
            meta = {"flags": flags, "overrides": overrides, "node_rank": node.index, "hosts": [n.label for n in nodes]}
            res = LaunchReply.from_wire(await node.ops.launch(
                node.key, run_id, argv, env=dict(env), cwd=self.profile.workdir,
                log=node.log_file, meta=meta))
            if res.refused:
                # lost a race with another cockpit: theirs wins, we attach
                await self._stop_nodes(launched, timeout=10)
                self._set("idle", "")
                found = await self.attach()
                if found is not None and attach:
                    return found
                raise RunRefused(f"{self.profile.name} is already running on {node.label}", found)
            if res.error is not None or res.record is None:
                await self._stop_nodes(launched, timeout=10)
                self._set("failed", f"launch failed on {node.label}: {res.error}")
                raise LaunchFailed(f"{node.label}: the server did not start: {res.error}",
                                   hint="check the profile's python/program and workdir")
            launched.append((node, res.record))
        self._reset_for_run()
        for node, record in launched:
            node.record = record
        self._overrides = overrides
        self._flags = flags
        self._info = self._run_info_from_nodes()
        self._set("running", "starting")
        if self.recorder is not None:
            self.recorder.started(self._info)
        return self._info

    async def _stop_nodes(self, launched: list[tuple[Node, RunRecord]], timeout: float) -> None:
        for node, record in launched:
            with contextlib.suppress(TransportError):
                await node.ops.stop(node.key, record.run_id, timeout)

    async def attach(self, *, include_ended: bool = False) -> RunInfo | None:
        """The profile's live run (pid alive, still our process) on its hosts, resumed; with
        include_ended, the newest run even if it has ended (status of a crashed run)."""
        nodes = self.nodes
        first = run_or_none(await nodes[0].ops.find(nodes[0].key))
        if first is None:
            return None
        alive = first.has_processes
        if not alive and not include_ended:
            return None
        if self._info is not None and self._info.id == first.run_id:
            return self._info
        self._reset_for_run()
        nodes[0].record = first
        for node in nodes[1:]:
            node.record = run_or_none(await node.ops.find(node.key, first.run_id))
        self._flags = dict(first.flags or self.profile.server)
        self._overrides = dict(first.overrides)
        self._info = self._run_info_from_nodes()
        if alive:
            self._set("running", "")
            if self.recorder is not None:
                self.recorder.started(self._info)
        else:
            # the exit is applied to the state once the log has been read (refresh_once / run)
            self._set("stopped" if first.stopped_by else "failed", "the run has ended")
        return self._info

    def _reset_for_run(self) -> None:
        self.fold.reset()
        self._findings = ()
        self._plan, self._plan_task = None, None  # a new run (restart with other flags): a new plan
        self.readiness.reset()
        self.serving.reset()
        self.publisher.clear_lines()
        self._stopping = False
        self._crash_before_stop = False
        for node in self.nodes:
            node.reset()
        self._changed()

    def _run_info_from_nodes(self) -> RunInfo:
        n0 = self.nodes[0].record or RunRecord(run_id="None")
        return RunInfo(
            id=n0.run_id,
            profile=self.profile.name,
            hosts=tuple(n.label for n in self.nodes),
            pid=n0.pid,
            pgid=n0.pgid,
            started_at=n0.started_at,
            run_dir=n0.run_dir,
            log_path=n0.log_path,
            flags=dict(self._flags),
            version=self.profile.version,
        )

    # ------------------------------------------------------------------ monitoring
    def _start_watchers(self) -> None:
        """The one list of what watches a run: each node's log, node 0's readiness, telemetry."""
        spawn: list[Coroutine[Any, Any, None]] = [self.follow.follow(n, follow=True) for n in self.nodes if n.record]
        spawn.append(self.readiness.loop(
            self.nodes[0], lambda: self.backend.api_port(self._flags), self._readiness_path,
            lambda: self.nodes[0].exited is None and not self._stopping))
        spawn.append(self.telemetry.loop())
        spawn.append(self.serving.loop(self.api_base_url, lambda: self._flags,
                                       lambda: self.nodes[0].exited is None and not self._stopping))
        self._watchers = [asyncio.create_task(c) for c in spawn]

    async def run(self) -> None:
        """Follow every node's log, telemetry and the readiness probe until stop() or close().
        The publisher runs as long as this does, across restarts."""
        if self._info is None:
            raise CockpitError(f"{self.profile.name}: no run to follow", hint="start() or attach() first")
        self._start_watchers()
        self._publishing = asyncio.create_task(self.publisher.run())
        try:
            await self._closed.wait()
        finally:
            await self._cancel_watchers()
            await self._cancel_publisher()
            self.publisher.flush_logs()
            self.publisher.publish(force=True)

    async def refresh_once(self) -> RunSnapshot:
        """Read each node's log of the run to its current end, one probe: a snapshot for `status`."""
        await asyncio.gather(*(self.follow.follow(node, follow=False) for node in self.nodes if node.record))
        if any(n.exited is None for n in self.nodes if n.record) and self._lifecycle == "running":
            await self.readiness.probe(self.nodes[0], self.backend.api_port(self._flags), self._readiness_path())
            # SGLang's /health runs a generation: a hung SGLang answers it with a timeout, not 200
            if self.readiness.health not in (None, "refused", "unreachable"):
                try:
                    await self.serving.check(await self.api_base_url(), self._flags)
                except (TransportError, OSError) as exc:
                    log.debug("serving check: %s", exc)
        await self.telemetry.once()
        snap = self.snapshot()
        if self.recorder is not None and self._info is not None:
            if all(n.exited is not None for n in self.nodes if n.record):
                # a run nobody watched to its end: complete it from its log
                self.recorder.completed(snap, self._outcome())
            else:
                self.recorder.on_snapshot(snap)
                self.recorder.tick(force=True)
        return snap

    def _outcome(self) -> str:
        return "crashed" if self.fold.state.phase == "crashed" else "stopped"

    def _server_exited(self, node: Node, ex: ServerExited) -> None:
        if node.exited is not None:
            return
        node.exited = ex
        self.follow.finish(node)
        from cockpit.core.events import ProcessExited

        # "stopped" only when Cockpit or the operator stopped it: an exit 0 (vLLM's API server after
        # its engine died) or 143 (an outside SIGTERM) that nobody asked for is a crash
        stopped = bool(self._stopping or (node.record is not None and node.record.stopped_by) or ex.stopped_by)
        apply(self.fold.state, ProcessExited(line=0, ts=None, rank=None, exit_code=ex.code, stopped=stopped))
        if stopped:
            self._mark_stopped()
        self.fold.changed = True
        self._changed()
        if not self._stopping:
            self._set("failed" if self.fold.state.phase == "crashed" else "stopped",
                      f"the server on {node.label} exited with code {ex.code}")
            self._record_end()

    def _mark_stopped(self) -> None:
        """A stop we asked for is not a crash, whatever the exit code says (137 after SIGKILL can
        read as the OOM killer). A crash the log showed before the stop stays a crash."""
        st = self.fold.state
        crash = st.crash
        if crash is not None and (self._crash_before_stop or (not self._stopping and crash.kind != "unknown")):
            return
        st.crash = None
        st.phase = "stopped"

    def _state_was_read(self) -> bool:
        return any(n.log is not None for n in self.nodes if n.record)

    def _record_end(self) -> None:
        if self.recorder is not None and self._info is not None:
            self.recorder.ended(self.snapshot(), self._outcome(), state_read=self._state_was_read())

    # ------------------------------------------------------------------ snapshots
    def _readiness_path(self) -> str:
        return self.backend.readiness_path(self.backend.run_version(self.fold.state, self.profile))

    def _current_findings(self) -> tuple[Finding, ...]:
        if self.fold.changed:
            self.fold.changed = False
            try:
                self._findings = tuple(self.backend.diagnose(self.fold.state, self.profile,
                                                             self.telemetry.host_facts_now()))
            except Exception:
                log.exception("diagnosis failed")
        return tuple(self.follow.link_findings.values()) + self._findings + self._plan_vs_run()  # a changed host key first

    def _plan_vs_run(self) -> tuple[Finding, ...]:
        """Prediction beside reality once the log shows the pool and the headroom (made once per run)."""
        from cockpit.supervisor.planning import plan_for_run, plan_vs_run

        st = self.fold.state
        if st.max_total_num_tokens is None or st.min_headroom_gb is None:
            return ()
        if self._plan_task is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return ()

            async def make() -> None:
                self._plan = await plan_for_run(self.profile, self._flags)
                self.fold.changed = True

            self._plan_task = loop.create_task(make())
            return ()
        if self._plan is None:
            return ()
        f = plan_vs_run(self._plan, st.max_total_num_tokens, st.min_headroom_gb)
        return (f,) if f is not None else ()

    def rank_gpu(self) -> dict[str, tuple[str, int]]:
        return self.backend.rank_gpu_map(self.fold.state.ranks.keys(), [n.label for n in self.nodes],
                                         self._flags, self.profile.env)

    def run_gpus(self) -> set[tuple[str, int]]:
        """(host, GPU) pairs the run uses: from the ranks its log showed, else from its flags."""
        found = set(self.rank_gpu().values())
        return found or self._gpus_for_flags(self._flags)

    def _gpus_for_flags(self, flags: dict[str, Any]) -> set[tuple[str, int]]:
        return self.backend.gpus_for_flags([n.label for n in self.nodes], flags, self.profile.env)

    def snapshot(self) -> RunSnapshot:
        findings = self._current_findings()
        diff: tuple[FlagChange, ...] = ()
        if self._overrides:
            try:
                diff = tuple(self.backend.flag_diff(self.profile, self._flags))
            except Exception:
                log.exception("flag diff failed")
        watch = self.telemetry
        return RunSnapshot(
            taken_at=time.time(),
            profile=self.profile.name,
            lifecycle=self._lifecycle,
            state=self.fold.state.copy(),
            findings=findings,
            run=self._info,
            gpus=tuple(sorted(watch.gpus.values(), key=lambda g: (g.host, g.index))),
            gpu_processes=tuple(p for procs in watch.procs.values() for p in procs),
            hosts=tuple(watch.hosts.values()),
            readiness=f"log + {self._readiness_path()}",
            health=self.readiness.health,
            flag_diff=diff,
            progress=self._progress,
            rank_gpu=self.rank_gpu(),
            serving=self.serving.serving,
            ending=self._ending(),
        )

    # signals another process sends (an operator's kill, the OOM killer); the others (SIGILL,
    # SIGSEGV, SIGBUS, SIGABRT, SIGFPE) the engine's own code raises
    _EXTERNAL_SIGNALS = frozenset({1, 2, 9, 15})

    def _log_crash(self) -> bool:
        """The crash rests on the server's log (not only on its exit)."""
        crash = self.fold.state.crash
        return crash is not None and crash.line > 0

    def _ending(self) -> dict[str, Any] | None:
        """How node 0's server ended (RunSnapshot.ending), or None while it runs."""
        from cockpit.core.crashstory import SIGNAL_WORDS, signal_of

        n0 = self.nodes[0]
        ex = n0.exited
        if ex is None:
            return None
        mark = ex.stopped_by or (n0.record.stopped_by if n0.record is not None else None)
        sig = signal_of(ex.code)
        if mark or self._stopping:
            by = "operator" if (mark or self._stop_by) == "operator" else "cockpit"
        elif sig in self._EXTERNAL_SIGNALS:
            by = "external"
        elif ex.code == 0 and not self._log_crash():
            # a server exits 0 only when asked (a SIGTERM it handled: vLLM does) or after its
            # engine died, which its log says
            by = "external"
        else:
            by = "engine"  # its own exit: an error, a fault, or 0 after its engine died
        name = (SIGNAL_WORDS[sig][0] if sig in SIGNAL_WORDS else f"signal {sig}") if sig is not None else None
        return {"exit_code": ex.code, "signal": name, "by": by}

    def recent_lines(self) -> list[LogLine]:
        return self.publisher.recent_lines()

    async def api_base_url(self) -> str:
        """The base URL of the run's API on node 0 from this machine (through the SSH forward when
        remote): what `cockpit bench` sends its load to."""
        return await self.readiness.base_url(self.nodes[0], self.backend.api_port(self._flags))

    def is_ready(self) -> bool:
        return self.fold.state.phase == "ready" and self.readiness.health == "200"

    async def wait_until(self, cond: Callable[[Supervisor], bool], timeout: float) -> bool:
        """Wait (while run() works) until cond(self) holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while not cond(self):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.publisher.wait_changed(min(left, 0.5))
        return True

    # ------------------------------------------------------------------ stop / restart / close
    async def stop(self, timeout: float = 30.0, kill_leftovers: bool = False, *, by: str = "operator") -> StopResult:
        """SIGTERM the run's process groups, SIGKILL after `timeout`, then wait until its GPU
        memory is released; leftovers still holding memory are reported (and killed on request).
        `by`: who asked — the operator (`down`, the TUI's stop) or Cockpit itself (a restart)."""
        if self._info is None:
            await self.attach()
        if self._info is None:
            return StopResult(True, False, [])
        self._crash_before_stop = self.fold.state.crash is not None
        self._stopping = True
        self._stop_by = by
        self._set("stopping", f"stopping {self.profile.name} (SIGTERM, SIGKILL after {timeout:g} s)")
        gpus_of_run = self.run_gpus()
        running = [n for n in self.nodes if n.record]
        results = await asyncio.gather(
            *(n.ops.stop(n.key, n.record.run_id if n.record else None, timeout, by) for n in running),
            return_exceptions=True,
        )
        res = StopResult(True, False, [])
        for node, r in zip(running, results, strict=True):
            if isinstance(r, BaseException):
                res.stopped = False
                self._progress = f"{node.label}: stop failed: {r}"
                continue
            reply = StopReply.from_wire(r)
            res.killed |= reply.killed
            res.left += list(reply.left)
            res.stopped &= reply.stopped
            exit_code = reply.record.exit_code if reply.record is not None else None
            res.exit_codes[node.label] = exit_code
            if node.exited is None:
                pid = reply.record.pid if reply.record is not None else None
                self._server_exited(node, ServerExited(pid or 0, exit_code,
                                                       (reply.record.stopped_by if reply.record is not None else None) or by))
        self._mark_stopped()
        self._set("waiting_gpu_release", "waiting for the run's GPU memory to be released")
        res.leftovers = await self.telemetry.wait_release(gpus_of_run, kill_leftovers, self._say)
        self._set("stopped", "stopped" if not res.leftovers else
                  "GPU memory still held by pid " + ", ".join(str(p.pid) for p in res.leftovers))
        self._record_end()
        self.publisher.publish(force=True)
        return res

    async def gpu_processes_now(self) -> list[GpuProcess] | None:
        """Processes on the GPUs of every node now (None when telemetry cannot tell)."""
        return await self.telemetry.processes_now()

    async def kill_pids(self, procs: Iterable[GpuProcess]) -> None:
        await self.telemetry.kill(procs)

    async def restart(self, changes: list[FlagChange] | dict[str, Any], *, kill_leftovers: bool = False,
                      timeout: float = 30.0, debug: bool = False) -> RunInfo:
        """Stop → wait for the GPUs to be free → launch with the change; refuses to launch on top of
        leftovers (LeftoversHoldGpus) unless kill_leftovers. The publisher goes on throughout.
        `debug`: with the engine's debugging settings (Backend.debug_settings), journaled as a debug run."""
        debug_env, debug_flags = self.backend.debug_settings() if debug else ({}, {})
        kept = {k: v for k, v in self._overrides.items() if k not in self._debug_flags}
        overrides = {**kept, **changes_to_overrides(changes), **changes_to_overrides(debug_flags)}
        self._debug_flags = set(changes_to_overrides(debug_flags))
        was_running = bool(self._watchers)
        res = await self.stop(timeout=timeout, kill_leftovers=kill_leftovers, by="cockpit")
        if res.leftovers:
            raise LeftoversHoldGpus(res.leftovers)
        if not res.stopped:
            raise CockpitError(f"processes of the old run survived SIGKILL: {res.left}")
        await self._cancel_watchers()
        self._debug_env = dict(debug_env)
        info = await self.start(overrides, attach=False)
        if debug and self.recorder is not None:
            self.recorder.tag_debug(info.id, {"env": debug_env, "flags": debug_flags})
        if was_running and not self._closed.is_set():
            self._start_watchers()
        return info

    async def _cancel_watchers(self) -> None:
        current = asyncio.current_task()
        tasks, self._watchers = [t for t in self._watchers if t is not current], []
        for t in tasks:
            t.cancel()
        for t in tasks:
            await reap(t)
        for node in self.nodes:
            if node.follower is not None:
                await node.follower.close()

    async def _cancel_publisher(self) -> None:
        task, self._publishing = self._publishing, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await reap(task)

    async def close(self) -> None:
        """Detach: stop following; the server keeps running on its hosts."""
        self._closed.set()
        await self._cancel_watchers()
        await self._cancel_publisher()
        if self._plan_task is not None and not self._plan_task.done():
            self._plan_task.cancel()
            await reap(self._plan_task)
        if self.recorder is not None and self._state_was_read():
            self.recorder.on_snapshot(self.snapshot())
            self.recorder.tick(force=True)
        # transports are pooled (transport_for) and shared with other views: their owner closes them
