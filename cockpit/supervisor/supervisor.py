"""One run's lifecycle: preflight → launch → monitor → crash → stop / restart.

The supervisor holds the run's target (`targets/`: where the server lives — the profile's hosts,
or a Slurm job — and how it is launched, found, followed and stopped) and composes the parts that
do the watching, each in its own module:

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
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from cockpit.aio import reap
from cockpit.backends import get_backend
from cockpit.core.crashstory import SIGNAL_WORDS, signal_of
from cockpit.core.events import ProcessExited
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.overrides import Overrides
from cockpit.core.profile import Profile
from cockpit.core.reducer import apply
from cockpit.errors import CockpitError
from cockpit.preflight import gate
from cockpit.preflight.planning import plan_for_run, plan_vs_run
from cockpit.remote.host import ServerExited
from cockpit.remote.hostresults import NodeTree, StackRequest, run_or_none
from cockpit.supervisor.api import GpuProcess, LogBatch, LogLine, NodeView, RunInfo, RunSnapshot
from cockpit.supervisor.follower import Follow, RunFold
from cockpit.supervisor.nodes import Node
from cockpit.supervisor.publisher import Publisher
from cockpit.supervisor.recorder import Recorder, RunJournal
from cockpit.supervisor.servingwatch import ServingWatch
from cockpit.supervisor.targets import make_target
from cockpit.supervisor.targets.base import (
    LaunchFailed,
    LeftoversHoldGpus,
    RunFound,
    RunRefused,
    StopResult,
    Target,
    new_run_id,
)
from cockpit.supervisor.watch import GpuWatch, ReadinessProbe
from cockpit.transport.base import Transport

if TYPE_CHECKING:
    from cockpit.core.events import ProcessExited
    from cockpit.preflight import GatedLaunch, GateResult

# the run's outcomes and refusals, importable from here as before (they live with the targets)
__all__ = ["LaunchFailed", "LeftoversHoldGpus", "RunRefused", "StopResult", "Supervisor", "new_run_id"]

log = logging.getLogger(__name__)


class Supervisor:
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
        self._lifecycle = "idle"
        self._progress = ""
        self.info: RunInfo | None = None
        self.overrides: Overrides = Overrides()
        self.debug_env: dict[str, str] = {}  # a debug relaunch's environment (restart(debug=True))
        self._debug_flags: set[str] = set()  # and the flags it added (the next ordinary restart drops both)
        self.flags: dict[str, Any] = dict(profile.server)
        self._findings: tuple[Finding, ...] = ()
        self._dead_nodes: dict[int, Finding] = {}  # node index -> node_died, for nodes k > 0
        self._preflight: tuple[Finding, ...] = ()
        self._plan: Any = None  # the memory plan for the run's flags, made once capture is over
        self._plan_task: asyncio.Task[None] | None = None
        self.stopping = False
        self.stop_by = "operator"  # who asked for the current stop (RunSnapshot.ending)
        self.crash_before_stop = False
        self._closed = asyncio.Event()
        self._watchers: list[asyncio.Task[Any]] = []  # follow, probe, telemetry: one per run
        self._following = False  # run() is following the run (its watchers restart with a restart)
        self._ready_in_log = False  # the log's phase was ready at the last batch of lines
        self._publishing: asyncio.Task[Any] | None = None  # lives across restarts
        # where the server lives (its hosts, or a Slurm job): the one thing that differs by target
        self.target: Target = make_target(self, transports=transports, runs_root=runs_root,
                                          telemetry_interval=telemetry_interval)
        self.nodes: list[Node] = self.target.nodes
        self.telemetry: GpuWatch = self.target.telemetry

        self.publisher = Publisher(self.snapshot, on_logs=on_logs)
        if on_snapshot is not None:
            self.publisher.subscribe(on_snapshot)
        self.recorder = Recorder(journal, profile.name) if journal is not None else None
        if self.recorder is not None:
            self.publisher.subscribe(self.recorder.on_snapshot)
            self.publisher.add_ticker(self.recorder.tick)
        self.fold = RunFold(self.backend, len(self.nodes))
        self.follow = Follow(self.fold, self.publisher, self.server_exited, self.say)
        self.readiness = ReadinessProbe(self._changed_and_notify)
        self.serving = ServingWatch(self.backend, profile, lambda: self.fold.state, self._changed_and_notify)
        self.follow.line_listeners.append(self.serving.lines)
        self.follow.line_listeners.append(self._probe_when_the_log_says_ready)

    # ------------------------------------------------------------------ plumbing
    @property
    def run_info(self) -> RunInfo | None:
        return self.info

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

    async def ended_on_hosts(self) -> bool:
        """Whether some node's server of this run has ended, asked of the hosts now (its run
        directory: not alive, its exit recorded or its waiter gone). The log follower reports an
        exit too, but only once it runs, over the host's transport: `up --wait started` asks."""

        for node in self.nodes:
            if node.record is None:
                continue
            try:
                now = run_or_none(await node.ops.find(node.key))
            except Exception:  # an unreachable host: the follower reports the link; nothing more known
                continue
            if (now is not None and now.run_id == node.record.run_id and not now.alive
                    and (now.exit_code is not None or now.lost)):
                return True
        return False

    def changed(self) -> None:
        self.publisher.dirty = True

    def _probe_when_the_log_says_ready(self, lines: Sequence[LogLine]) -> None:
        # READY rests on the log and /health: when the log turns ready, probe at once rather than
        # at the end of the 503 interval (up to HEALTH_INTERVAL_S later). Once per turn, not for
        # every batch of lines after it: a /health that keeps failing on a busy server would be
        # probed at the log's batch rate (15 a second) instead of its interval.
        ready = self.fold.state.phase == "ready"
        if ready and not self._ready_in_log and self.readiness.health != "200":
            self.readiness.nudge()
        self._ready_in_log = ready

    def _changed_and_notify(self) -> None:
        self.publisher.dirty = True
        self.publisher.notify()

    def say(self, progress: str) -> None:
        self._progress = progress
        self.publisher.dirty = True

    def set_lifecycle(self, lifecycle: str | None = None, progress: str | None = None) -> None:
        if lifecycle is not None:
            self._lifecycle = lifecycle
        if progress is not None:
            self._progress = progress
        self._changed_and_notify()

    # ------------------------------------------------------------------ preflight
    async def gate(self, overrides: Overrides | dict[str, Any] | None = None, *, plan: bool = False,
                   runs: Iterable[Any] = ()) -> GateResult:
        """The gate (cockpit/preflight/gate.py) over this run's own nodes: the argv per node (hand
        it to start(argvs=…)), flags and host facts checked (HiCache per-rank arithmetic, GPUs,
        RAM), node 0's model path and port; the memory plan with `plan`."""

        # a restart walks the gate with its run alive: its lifecycle (running, failed) comes back after
        before, said = self._lifecycle, self._progress
        self.set_lifecycle("preflight", "checking the profile against its hosts")
        try:
            # the nodes' own connections measure the hosts (and feed the telemetry they show)
            facts = await self.telemetry.host_facts() if self.profile.target is None else None
            node0 = self.nodes[0] if self.profile.target is None else None
            result = await gate(self.profile, overrides, facts=facts, node0=node0, plan=plan, runs=runs)
        finally:
            self.set_lifecycle(*((before, said) if self.info is not None else ("idle", "")))
        self._preflight = tuple(result.findings)
        return result

    async def gated(self, overrides: Overrides | dict[str, Any] | None = None, *, force: bool = False, plan: bool = False,
                    runs: Iterable[Any] = ()) -> GatedLaunch:
        """The gate's go for `overrides` over this run's nodes (what start() takes): GateRefused
        when it refuses (its result carries the findings), FlagError when the flags make no argv."""
        return (await self.gate(overrides, plan=plan, runs=runs)).launch(force=force)

    # ------------------------------------------------------------------ launch / attach
    async def start(self, plan: GatedLaunch, *, attach: bool = True, kill_leftovers: bool = False) -> RunInfo:
        """Launch the gate's `plan` (`gated()`, GateResult.launch) on the profile's target (detached
        on every host, or a Slurm job): its argvs as built, one per node. A live run is attached to
        (never launched twice) when `attach` is true, else refused with RunRefused (the run it
        names is followed from then on). On hosts, processes already holding memory on the GPUs the
        run will use refuse the launch (LeftoversHoldGpus) unless kill_leftovers."""
        try:
            found = await self.target.start(plan, attach=attach, kill_leftovers=kill_leftovers, env=self.debug_env)
        except RunRefused as exc:
            if exc.found is not None:
                self._take(exc.found)
            raise
        return self._take(found)

    def _take(self, found: RunFound) -> RunInfo:
        """The run the target found or launched is the one followed: its state, flags, lifecycle
        and journal entry are this Supervisor's to set (the target only answers)."""
        if found.new:
            self.reset_for_run()
        self.info, self.flags, self.overrides = found.info, dict(found.flags), found.overrides
        if found.lifecycle is not None or found.progress is not None:
            self.set_lifecycle(found.lifecycle, found.progress)
        if found.journal and self.recorder is not None:
            self.recorder.started(found.info)
        return found.info

    async def launch(self, overrides: Overrides | dict[str, Any] | None = None, *, attach: bool = True,
                     kill_leftovers: bool = False, force: bool = False) -> RunInfo:
        """Attach to the live run (when `attach`), else walk the gate and start what it lets
        through: GateRefused, nothing launched, when it refuses."""
        if attach:
            live = await self.attach()
            if live is not None:
                return live
        go = await self.gated(overrides, force=force)
        return await self.start(go, attach=attach, kill_leftovers=kill_leftovers)

    async def attach(self, *, include_ended: bool = False) -> RunInfo | None:
        """The profile's live run on its target, resumed; with include_ended, the newest run even
        if it has ended (status of a crashed run)."""
        found = await self.target.attach(include_ended=include_ended)
        return self._take(found) if found is not None else None

    def reset_for_run(self) -> None:
        """A new run is followed: its state starts afresh (the target has reset its nodes)."""
        self.fold.reset()
        self._findings = ()
        self._dead_nodes = {}
        self._plan, self._plan_task = None, None  # a new run (restart with other flags): a new plan
        self.readiness.reset()
        self.serving.reset()
        self.publisher.clear_lines()
        self.stopping = False
        self.crash_before_stop = False
        self.changed()

    # ------------------------------------------------------------------ monitoring
    def _start_watchers(self) -> None:
        """What watches a run (each node's log, readiness, telemetry…) is the target's list."""
        self._watchers = self.target.watchers()

    @property
    def following(self) -> bool:
        """run() is following the run (between its start and its end, across restarts)."""
        return self._following

    async def run(self) -> None:
        """Follow every node's log, telemetry and the readiness probe until stop() or close().
        The publisher runs as long as this does, across restarts."""
        if self.info is None:
            raise CockpitError(f"{self.profile.name}: no run to follow", hint="start() or attach() first")
        self._following = True
        self._start_watchers()
        self._publishing = asyncio.create_task(self.publisher.run())
        try:
            await self._closed.wait()
        finally:
            self._following = False
            await self._cancel_watchers()
            await self._cancel_publisher()
            self.publisher.flush_logs()
            self.publisher.publish(force=True)

    async def refresh_once(self) -> RunSnapshot:
        """Read each node's log of the run to its current end, one probe: a snapshot for `status`."""
        ended = await self.target.refresh_once()
        snap = self.snapshot()
        if self.recorder is not None and self.info is not None:
            if ended:  # a run nobody watched to its end: complete it from its log
                self.recorder.completed(snap, self.outcome())
            else:
                self.recorder.on_snapshot(snap)
                self.recorder.tick(force=True)
        return snap

    async def process_tree(self, stacks: StackRequest | None = None) -> list[NodeTree]:
        """The run's processes on each of its nodes now (Target.process_tree), the run found first."""
        if self.info is None:
            await self.attach()
        return await self.target.process_tree(stacks)

    def outcome(self) -> str:
        return "crashed" if self.fold.state.phase == "crashed" else "stopped"

    def server_exited(self, node: Node, ex: ServerExited) -> None:
        if node.exited is not None:
            return
        node.exited = ex
        self.follow.finish(node)

        # "stopped" only when Cockpit or the operator stopped it: an exit 0 (vLLM's API server after
        # its engine died) or 143 (an outside SIGTERM) that nobody asked for is a crash
        stopped = bool(self.stopping or (node.record is not None and node.record.stopped_by) or ex.stopped_by)
        exited = ProcessExited(line=0, ts=None, rank=None, exit_code=ex.code, stopped=stopped,
                               oom_evidence=ex.oom_evidence)
        apply(self.fold.state, exited)
        if stopped:
            self.mark_stopped()
        elif node.index > 0:
            self._node_died(node, exited)
        self.fold.changed = True
        self.changed()
        if not self.stopping:
            why = self._dead_nodes[node.index].message if node.index in self._dead_nodes else \
                f"the server on {node.label} exited with code {ex.code}"
            self.set_lifecycle("failed" if self.fold.state.phase == "crashed" else "stopped", why)
            self.record_end()

    def _node_died(self, node: Node, exited: ProcessExited) -> None:
        """Node k > 0 of a multi-node run ended unasked. The head may say nothing for a long time
        (vLLM's answers /health 200 until a request needs the dead node), so this is said from the
        node's own process and log, with the last decisive line that node printed."""
        own = node.own
        if own is not None:
            apply(own, exited)
        crash = own.crash if own is not None else None
        if crash is not None and crash.message:
            last = crash.message.rstrip(". ")
        else:
            last = f"its server exited with code {exited.exit_code} and its log names no cause"
        self._dead_nodes[node.index] = Finding(
            "node_died", "critical", f"node {node.index} ({node.label}) died: {last}. The head may still answer "
            "/health 200 until a request needs this node; restart the whole run.")

    def ended_with(self, words: str, exit_code: int | None, stop: bool) -> None:
        """The target's words on how the run ended (Slurm's), each node's exit taken already: a
        crash keeps them as its decisive line (and as its message when the log named no cause)."""
        crash = self.fold.state.crash
        if crash is not None and not stop:
            if crash.exit_code is None:
                crash.exit_code = exit_code
            if words not in crash.decisive_lines:
                crash.decisive_lines.append(words)
            if crash.kind == "unknown":
                crash.message = words
        if not self.stopping:
            self.set_lifecycle("stopped" if stop or crash is None else "failed", words)
        self.fold.changed = True
        self.changed()

    def mark_stopped(self) -> None:
        """A stop we asked for is not a crash, whatever the exit code says (137 after SIGKILL can
        read as the OOM killer). A crash the log showed before the stop stays a crash."""
        st = self.fold.state
        crash = st.crash
        if crash is not None and (self.crash_before_stop or (not self.stopping and crash.kind != "unknown")):
            return
        st.crash = None
        st.phase = "stopped"

    def _state_was_read(self) -> bool:
        return any(n.log is not None for n in self.nodes if n.record)

    def record_end(self) -> None:
        if self.recorder is not None and self.info is not None:
            self.recorder.ended(self.snapshot(), self.outcome(), state_read=self._state_was_read())

    # ------------------------------------------------------------------ snapshots
    def readiness_path(self) -> str:
        return self.backend.launch.readiness_path(self.backend.run_version(self.fold.state, self.profile))

    def _current_findings(self) -> tuple[Finding, ...]:
        if self.fold.changed:
            self.fold.changed = False
            doctor = self.backend.doctor  # an engine without advice: no findings of its own
            try:
                if doctor is not None:
                    self._findings = tuple(doctor.diagnose(self.fold.state, self.profile,
                                                           self.telemetry.host_facts_now()))
            except Exception:
                log.exception("diagnosis failed")
        # a changed host key first, then a dead node (the head may not know yet)
        return (tuple(self.follow.link_findings.values()) + tuple(self._dead_nodes.values()) + self._findings
                + self._plan_vs_run())

    def _plan_vs_run(self) -> tuple[Finding, ...]:
        """Prediction beside reality once the log shows the pool and the headroom (made once per run)."""

        st = self.fold.state
        if st.max_total_num_tokens is None or st.min_headroom_gb is None:
            return ()
        if self._plan_task is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return ()

            async def make() -> None:
                self._plan = await plan_for_run(self.profile, self.flags)
                self.fold.changed = True

            self._plan_task = loop.create_task(make())
            return ()
        if self._plan is None:
            return ()
        f = plan_vs_run(self._plan, st.max_total_num_tokens, st.min_headroom_gb)
        return (f,) if f is not None else ()

    def rank_gpu(self) -> dict[str, tuple[str, int]]:
        return self.backend.launch.rank_gpus(self.fold.state.ranks.keys(), [n.label for n in self.nodes],
                                         self.flags, self.profile.env)

    def run_gpus(self) -> set[tuple[str, int]]:
        """(host, GPU) pairs the run uses: from the ranks its log showed, else from its flags."""
        found = set(self.rank_gpu().values())
        return found or self.gpus_for_flags(self.flags)

    def gpus_for_flags(self, flags: dict[str, Any]) -> set[tuple[str, int]]:
        return self.backend.launch.gpus([n.label for n in self.nodes], flags, self.profile.env)

    def snapshot(self) -> RunSnapshot:
        findings = self._current_findings()
        diff: tuple[FlagChange, ...] = ()
        if self.overrides:
            try:
                diff = tuple(self.backend.flags.diff(self.profile, self.flags))
            except Exception:
                log.exception("flag diff failed")
        watch = self.telemetry
        return RunSnapshot(
            taken_at=time.time(),
            profile=self.profile.name,
            lifecycle=self._lifecycle,
            state=self.fold.state.copy(),
            findings=findings,
            run=self.info,
            gpus=tuple(sorted(watch.gpus.values(), key=lambda g: (g.host, g.index))),
            gpu_processes=tuple(p for procs in watch.procs.values() for p in procs),
            hosts=tuple(watch.hosts.values()),
            readiness=f"log + {self.readiness_path()}",
            health=self.readiness.health,
            flag_diff=diff,
            progress=self._progress,
            rank_gpu=self.rank_gpu(),
            target=self.target.view(),
            serving=self.serving.serving,
            ending=self._ending(),
            nodes=tuple(self._node_view(n) for n in self.nodes),
        )

    def _node_view(self, node: Node) -> NodeView:
        """A node as the ranks view heads it: its host and whether its server lives, from what the
        supervisor already holds (its run record, the exit its follower or a stop saw, node_died)."""
        if node.record is None:
            state = "not running"
        elif node.index in self._dead_nodes:
            state = "died"
        elif node.exited is None:
            state = "alive"
        elif node.exited.stopped_by or node.record.stopped_by or self.stopping:
            state = "stopped"
        else:
            state = "exited"
        return NodeView(index=node.index, host=node.label, address=node.host.address, state=state)

    # signals another process sends (an operator's kill, the OOM killer); the others (SIGILL,
    # SIGSEGV, SIGBUS, SIGABRT, SIGFPE) the engine's own code raises
    _EXTERNAL_SIGNALS = frozenset({1, 2, 9, 15})

    def _log_crash(self) -> bool:
        """The crash rests on the server's log (not only on its exit)."""
        crash = self.fold.state.crash
        return crash is not None and crash.line > 0

    def _crash_after_shutdown_asked(self) -> bool:
        st = self.fold.state
        return st.crash is not None and st.shutdown_asked_line is not None and st.crash.line > st.shutdown_asked_line

    def _ending(self) -> dict[str, Any] | None:
        """How node 0's server ended (RunSnapshot.ending), or None while it runs."""

        n0 = self.nodes[0]
        ex = n0.exited
        if ex is None:
            return None
        mark = ex.stopped_by or (n0.record.stopped_by if n0.record is not None else None)
        sig = signal_of(ex.code)
        if mark or self.stopping:
            by = "operator" if (mark or self.stop_by) == "operator" else "cockpit"
        elif sig in self._EXTERNAL_SIGNALS:
            by = "external"
        elif ex.code == 0 and (not self._log_crash() or self._crash_after_shutdown_asked()):
            # a server exits 0 only when asked (a SIGTERM it handled: vLLM does) or after its
            # engine died, which its log says; a traceback it printed after it said a stop was
            # asked (vLLM's EngineDeadError as it tears its engine down) is the stop's, not a cause
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
        return await self.readiness.base_url(self.nodes[0], self.backend.launch.api_port(self.flags))

    def is_ready(self) -> bool:
        return self.fold.state.phase == "ready" and self.readiness.health == "200" and self.target.ready()

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
        """Stop the run on its target (hosts: SIGTERM the run's process groups, SIGKILL after
        `timeout`, then wait until its GPU memory is released, leftovers reported and killed on
        request; Slurm: scancel, then wait until the job has left the queue).
        `by`: who asked — the operator (`down`, the TUI's stop) or Cockpit itself (a restart): each
        node's exit says so (RunSnapshot.ending), whatever the target."""
        if self.info is None:
            await self.attach()
        if self.info is None:
            return StopResult(True, False, [])
        self.crash_before_stop = self.fold.state.crash is not None
        self.stopping = True
        self.stop_by = by
        res = await self.target.stop(timeout, kill_leftovers, by)
        if not res.reached:
            self.set_lifecycle(res.lifecycle, res.words)
            return res
        self.mark_stopped()
        self.set_lifecycle(res.lifecycle, res.words)
        self.record_end()
        self.publisher.publish(force=True)
        return res

    async def gpu_processes_now(self) -> list[GpuProcess] | None:
        """Processes on the GPUs of every node now (None when telemetry cannot tell)."""
        return await self.target.gpu_processes_now()

    async def kill_pids(self, procs: Iterable[GpuProcess]) -> None:
        await self.telemetry.kill(procs)

    async def restart(self, changes: list[FlagChange] | dict[str, Any], *, kill_leftovers: bool = False,
                      timeout: float = 30.0, debug: bool = False, force: bool = False, plan: bool = False,
                      runs: Iterable[Any] = (), accepted: Callable[[GatedLaunch], None] | None = None) -> RunInfo:
        """Restart through the gate — the one path every restart takes (`cockpit restart`, the
        TUI's r/e/R, the unattended policy): the gate on the new flags first, with the old run still
        up; refused → GateRefused and nothing is stopped. Accepted (`accepted` is told) → stop →
        wait until the old processes are gone and the GPUs free → launch the gate's argvs. Refuses
        to launch on top of leftovers (LeftoversHoldGpus) unless kill_leftovers. The publisher goes
        on throughout. `plan`/`force`/`runs`: the memory plan in the verdict, as `cockpit up` has it.
        `debug`: with the engine's debugging settings (Backend.launch.debug_settings), journaled as a debug run."""
        debug_env, debug_flags = self.backend.launch.debug_settings() if debug else ({}, {})
        overrides = self.overrides.without(self._debug_flags) | Overrides.of(changes) | Overrides.of(debug_flags)
        go = await self.gated(overrides, force=force, plan=plan, runs=runs)  # GateRefused: nothing stopped
        if accepted is not None:
            accepted(go)
        self._debug_flags = set(Overrides.of(debug_flags))
        # followed by run(): the new run is followed too. Not "watchers are set": a restart refused
        # after they were cancelled (leftovers found by the launch, not by the stop) left none, and
        # the operator's next restart launched a run nobody followed (phase unknown for ever)
        was_running = self._following or bool(self._watchers)
        res = await self.stop(timeout=timeout, kill_leftovers=kill_leftovers, by="cockpit")
        if res.leftovers:
            raise LeftoversHoldGpus(res.leftovers)
        if not res.stopped:
            raise CockpitError(self.target.stop_failed(res))
        await self._cancel_watchers()
        self.debug_env = dict(debug_env)
        # the operator's consent covers the GPUs the new flags use too (another base GPU, a wider tp)
        info = await self.start(go, attach=False, kill_leftovers=kill_leftovers)
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
