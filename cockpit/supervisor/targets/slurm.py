"""The `target: {kind: slurm}` target: a job submitted with sbatch on the login node, followed through it.

Node k's log is `node<k>.log` in the run directory on the shared filesystem, read through the
login node by byte offset with the same follower as the hosts' (so the same no-loss reconnects);
the job's state comes from Slurm (`scontrol`, then `sacct`, then the job-completion record) at a
modest rate and decides when the server has ended and why; telemetry and the readiness probe
reach the nodes as `srun --overlap` steps / SSH forwards from the login node, and so does the look at
the job's processes on each node (`process_tree`). Parsing, the state,
diagnosis, snapshots and the journal are the Supervisor's, as for every target.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any

from cockpit.aio import reap
from cockpit.core.overrides import Overrides
from cockpit.core.profile import Host
from cockpit.preflight.launchplan import GatedLaunch, check_gated
from cockpit.remote.host import HostOps, ServerExited
from cockpit.remote.hostresults import NodeTree, RunRecord, StackRequest
from cockpit.remote.login import SlurmLogin, SubmitRejected
from cockpit.slurm.jobstate import SlurmJob
from cockpit.slurm.script import NODE_LOG, NODE_STEP, render_batch_script, sbatch_argv
from cockpit.slurm.steps import SrunStepTransport
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import GpuProcess, RunInfo, SlurmView
from cockpit.supervisor.nodes import Node, transport_for
from cockpit.supervisor.targets.base import Run, RunFound, RunRefused, StopResult, new_run_id
from cockpit.supervisor.watch import GpuWatch, probe_interval
from cockpit.telemetry.samples import TelemetrySample
from cockpit.transport.base import Transport, TransportError

log = logging.getLogger(__name__)

# squeue/scontrol load slurmctld on a big cluster: poll at a modest rate (tests set it faster)
POLL_ENV = "COCKPIT_SLURM_POLL_S"
DEFAULT_POLL_S = 5.0
JOB_PREFIX = "slurm job "  # RunInfo.hosts entry that carries the job id (the journal keeps hosts)


class _StepWatch(GpuWatch):
    """GpuWatch over the job's nodes reached as srun steps; remembers why nothing was measured."""

    note: str | None = "not measured: the job has no nodes yet"

    def take(self, node: Node, sample: TelemetrySample) -> None:
        if sample.source == "none":
            why = "; ".join(sample.errors) or "no GPU source on the node"
            self.note = f"not measured on {node.label}: {why}"
        else:
            self.note = None
        super().take(node, sample)

    async def once(self) -> None:
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, sim_dir=self.sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                # e.g. the cluster refuses extra steps in a job: srun's words say so
                self.note = f"not measured on {node.label}: {exc}"
                continue
            self.take(node, sample)


class SlurmJobTarget:
    """The run is a Slurm job of the profile's `target:` (the login node, nodes, partition, time)."""

    kind = "slurm"

    def __init__(self, run: Run, *, transports: list[Transport] | None, runs_root: str | None,
                 telemetry_interval: float):
        profile = run.profile
        assert profile.target is not None
        self.run = run
        self.config = profile.target
        self._login_t = transports[0] if transports else transport_for(Host(ssh=self.config.login))
        self.login = SlurmLogin(self._login_t, runs_root=runs_root)
        self._runs_root = runs_root
        # every node's log is read through the login node (the shared filesystem)
        login_ops = HostOps(self._login_t, runs_root=runs_root)
        self.nodes: list[Node] = [Node(k, Host.model_construct(ssh=f"node{k}"), self._login_t, login_ops,
                                       key=profile.name, log_file=NODE_LOG.format(k=k))
                                  for k in range(self.config.nodes)]
        # telemetry reaches the nodes as srun steps, once the allocation names them
        self._steps: list[Node] = []
        self.telemetry: _StepWatch = _StepWatch(self._steps, interval=telemetry_interval,
                                                sim_dir=telemetry_feed.sim_dir_of(profile), changed=run.changed)
        self.job: SlurmJob | None = None
        self.job_id: str | None = None
        self._facts: dict[str, Any] = {}
        self._job_at: float | None = None  # time.time() of the last answer
        self._follows: list[asyncio.Task[Any]] = []
        self._stop_by: str | None = None  # who asked for the stop of this job (None: nobody here)
        self.poll_s = float(os.environ.get(POLL_ENV) or DEFAULT_POLL_S)

    # ------------------------------------------------------------------ nodes
    def _name_nodes(self, names: tuple[str, ...] | list[str]) -> None:
        """Once the allocation is known, node k is called by its name (logs, GPUs, ranks)."""
        if not self.job_id or [n.label for n in self._steps] == list(names[: len(self.nodes)]):
            return
        steps = []
        for node, name in zip(self.nodes, names, strict=False):
            node.host = Host.model_construct(ssh=name)
            if node.log is not None:
                node.log.host = name  # lines read from now on carry the node's name
            t = SrunStepTransport(self._login_t, self.job_id, name, self.config.gpus_per_node)
            steps.append(Node(node.index, node.host, t, HostOps(t, runs_root=self._runs_root), key=node.key,
                              log_file=node.log_file, record=node.record))
        self._steps[:] = steps
        self.run.changed()

    def _record(self, k: int) -> RunRecord:
        f = self._facts
        return RunRecord(run_id=str(f["run_id"]), run_dir=str(f["run_dir"]), started_at=str(f.get("submitted_at") or ""),
                         log_path=f"{f['run_dir']}/{NODE_LOG.format(k=k)}", alive=self.job is None or not self.job.ended,
                         flags=dict((f.get("meta") or {}).get("flags") or {}),
                         overrides=dict((f.get("meta") or {}).get("overrides") or {}))

    def _adopt(self, facts: dict[str, Any], journal: bool) -> RunFound:
        """The job of `facts` (its run directory's) is the run from now on: its nodes' records."""
        run = self.run
        self._steps[:] = []
        self._facts = facts
        self._stop_by = None
        self.job_id = str(facts.get("job_id") or "") or None
        for node in self.nodes:
            node.reset()
            node.host = Host.model_construct(ssh=f"node{node.index}")
            node.record = self._record(node.index)
        meta = facts.get("meta") or {}
        flags = dict(meta.get("flags") or run.profile.server)
        found = RunFound(self._run_info(flags), flags, Overrides.of(meta.get("overrides")), journal=journal)
        if facts.get("nodes"):
            self._name_nodes(facts["nodes"])
        return found

    def _run_info(self, flags: dict[str, Any]) -> RunInfo:
        run = self.run
        n0 = self.nodes[0].record or RunRecord(run_id="None")
        hosts = (self.config.login, f"{JOB_PREFIX}{self.job_id}") if self.job_id else (self.config.login,)
        return RunInfo(id=n0.run_id, profile=run.profile.name, hosts=hosts, pid=None, pgid=None,
                       started_at=n0.started_at, run_dir=n0.run_dir, log_path=n0.log_path, flags=dict(flags),
                       version=run.profile.version)

    # ------------------------------------------------------------------ launch / attach
    async def start(self, plan: GatedLaunch, *, attach: bool, kill_leftovers: bool,
                    env: Mapping[str, str]) -> RunFound:
        """Submit the gate's argvs as a job (sbatch --parsable on the login node): the script runs
        them as the gate built them, its placeholders for the head node filled in on the allocation.
        A queued or running job of the profile is attached to when `attach`, else refused (RunRefused)."""
        run, profile = self.run, self.run.profile
        gated = check_gated(plan, profile.name, len(self.nodes))  # nothing the gate did not pass
        overrides, argvs, flags = gated.overrides, gated.argvs, gated.flags
        live = await self.attach()
        if live is not None:
            if attach:
                return live
            raise RunRefused(f"{profile.name}: job {self.job_id} is "
                             f"{self.job.describe() if self.job else 'in the queue'} (run {live.info.id})",
                             live.info, live)
        run_id = new_run_id()
        env = {**profile.env, **env, **run.backend.launch.secret_env(profile, overrides)}
        script = render_batch_script(argvs, env=env, profile=profile.name, run_id=run_id)
        meta = {"flags": flags, "overrides": overrides.as_dict(), "nodes": self.config.nodes, "target": "slurm"}
        run.set_lifecycle("launching", f"submitting to Slurm on {self.config.login}")
        try:
            ans = await self.login.submit(profile.name, run_id, workdir=profile.workdir, script=script,
                                          sbatch=sbatch_argv(self.config, job_name=f"cockpit-{profile.name}"),
                                          meta=meta)
        except SubmitRejected as exc:
            run.set_lifecycle("failed", str(exc))
            raise
        if ans.get("refused"):
            run.set_lifecycle("idle", "")
            found = await self.attach()
            if found is not None and attach:
                return found
            raise RunRefused(f"{profile.name} has a job in the queue already "
                             f"(job {(ans.get('run') or {}).get('job_id')})", found.info if found else None, found)
        self.job = None
        self._adopt(ans["run"], journal=True)
        await self._poll_state()
        return RunFound(self._run_info(flags), flags, overrides, journal=True)

    async def attach(self, *, include_ended: bool = False) -> RunFound | None:
        """The profile's current job when it is queued or running (with include_ended: also
        when it has ended), resumed from its run directory."""
        run = self.run
        facts = await self.login.find(run.profile.name, run.profile.workdir)
        if facts is None or not facts.get("job_id"):
            return None
        jid = str(facts["job_id"])
        job = (await self.login.query([jid]))[jid]
        if job.ended and not include_ended:
            return None
        if run.info is not None and run.info.id == facts["run_id"]:
            self._take_job(job)
            return RunFound(run.info, run.flags, run.overrides, new=False)  # the run followed already
        self.job = job
        found = self._adopt(facts, journal=not job.ended)
        self._take_job(job)
        return found

    # ------------------------------------------------------------------ Slurm state
    async def _poll_state(self) -> SlurmJob | None:
        if not self.job_id:
            return None
        try:
            job = (await self.login.query([self.job_id]))[self.job_id]
        except (TransportError, OSError, KeyError) as exc:
            self.run.say(f"Slurm state unknown: {exc}")
            return None
        self._take_job(job)
        return job

    def _take_job(self, job: SlurmJob) -> None:
        """Slurm's answer → lifecycle and progress words (the end itself is applied by _apply_end)."""
        run = self.run
        self.job = job
        self._job_at = time.time()
        if job.nodes:
            self._name_nodes(job.nodes)
        for node in self.nodes:
            if node.record is not None and node.record.alive == job.ended:
                node.record = replace(node.record, alive=not job.ended)
        if job.outcome == "queued":
            run.set_lifecycle("launching", job.describe())
        elif job.outcome == "running" and run.lifecycle in ("idle", "launching", "preflight"):
            run.set_lifecycle("running", "")
        elif job.ended and not run.stopping:
            run.set_lifecycle(progress=job.describe())
        else:
            run.changed()

    async def _state_loop(self) -> None:
        while True:
            job = await self._poll_state()
            if job is not None and job.ended:
                await self._job_ended(job)
                return
            await asyncio.sleep(self.poll_s)

    async def _job_ended(self, job: SlurmJob) -> None:
        """Deliver every node's last lines, then apply the end with Slurm's words."""
        follows, self._follows = self._follows, []
        for t in follows:
            t.cancel()
        for t in follows:
            await reap(t)
        await asyncio.gather(*(self.run.follow.follow(n, follow=False) for n in self.nodes if n.record),
                             return_exceptions=True)
        self._apply_end(job)

    def _apply_end(self, job: SlurmJob) -> None:
        run = self.run
        stop = job.outcome == "stop" or run.stopping
        code = job.exit_status
        # a failed job is a crash even when Slurm records a clean exit code (NODE_FAIL 0:0): an
        # unknown code makes the reducer record one, with the phase the log had reached
        as_seen = code if stop or code not in (None, 0, 130, 143) else None
        # a stop asked here is the asker's (the operator's `down`, cockpit's restart), as on hosts;
        # one nobody here asked for (a time limit, someone's scancel) is Slurm's
        by = (self._stop_by or "slurm") if stop else None
        for node in self.nodes:
            if node.record is not None and node.exited is None:
                run.server_exited(node, ServerExited(0, as_seen, by))
        run.ended_with(job.describe(), code, stop)

    # ------------------------------------------------------------------ monitoring
    def _running_head(self) -> Node | None:
        if self.job is None or self.job.outcome != "running" or not self._steps:
            return None
        return self._steps[0]

    async def _readiness_loop(self) -> None:
        """Readiness on the head node, through an SSH forward from the login node to it."""
        run = self.run
        while True:
            head = self._running_head()
            if head is not None and not run.stopping:
                await run.readiness.probe(head, run.backend.launch.api_port(run.flags), run.readiness_path())
            # cut short when the log says the server is ready (Supervisor nudges the probe); slow
            # once /health says 200 (each probe is a line in the server's log)
            await run.readiness.pause(probe_interval(run.readiness.health))

    async def _telemetry_loop(self) -> None:
        while self._running_head() is None:
            await asyncio.sleep(min(1.0, self.poll_s))
        await self.telemetry.loop()

    async def _follow_once_named(self, node: Node) -> None:
        """Follow a node's log once the allocation named the nodes: its lines then carry the node's
        name from the first one. Nothing is missed by waiting: the logs begin when the job runs,
        and they are read from byte 0."""
        while not self._steps:
            await asyncio.sleep(min(0.5, self.poll_s))
        await self.run.follow.follow(node, follow=True)

    def watchers(self) -> list[asyncio.Task[Any]]:
        self._follows = [asyncio.create_task(self._follow_once_named(n)) for n in self.nodes if n.record]
        spawn: list[Coroutine[Any, Any, None]] = [self._readiness_loop(), self._telemetry_loop(), self._state_loop()]
        return [*self._follows, *(asyncio.create_task(c) for c in spawn)]

    async def refresh_once(self) -> bool:
        run = self.run
        job = await self._poll_state()
        await asyncio.gather(*(run.follow.follow(n, follow=False) for n in self.nodes if n.record),
                             return_exceptions=True)
        if job is not None and job.ended:
            self._apply_end(job)
        head = self._running_head()
        if head is not None:
            await run.readiness.probe(head, run.backend.launch.api_port(run.flags), run.readiness_path())
            await self.telemetry.once()
        return job is not None and job.ended

    async def wait_ended(self) -> str:
        """Until Slurm says the job has ended (`cockpit logs -f`: there is no pid to watch)."""
        while True:
            job = await self._poll_state()
            if job is not None and job.ended:
                return job.describe()
            await asyncio.sleep(self.poll_s)

    def end_watch(self) -> Callable[[], Awaitable[str]] | None:
        return self.wait_ended

    def ready(self) -> bool:
        return self._running_head() is not None

    # ------------------------------------------------------------------ snapshots
    def view(self) -> SlurmView | None:
        if self.job_id is None:
            return None
        job = self.job
        return SlurmView(
            job_id=self.job_id,
            login=self.config.login,
            state=job.state if job else None,
            reason=(job.reason or None) if job else None,
            nodes=tuple(job.nodes) if job else (),
            node_list=(job.node_list or None) if job else None,
            time_left=job.time_left if job else None,
            time_limit=(job.time_limit or None) if job else None,
            exit_code=(job.exit_code or None) if job else None,
            words=job.describe() if job else None,
            telemetry=self.telemetry.note,
            checked_at=self._job_at,
        )

    # ------------------------------------------------------------------ stop
    async def stop(self, timeout: float, kill_leftovers: bool, by: str) -> StopResult:
        """`scancel`, then wait until the job has left the queue (reached an end state). The
        allocation goes back to Slurm: its epilog, not cockpit, owns the GPUs from then on."""
        run = self.run
        if not self.job_id:
            return StopResult(True, False, [])
        self._stop_by = by
        run.set_lifecycle("stopping", f"scancel {self.job_id}; waiting until it has left the queue")
        try:
            ans = await self.login.cancel(self.job_id, timeout=max(timeout, 5.0) + 30)
        except TransportError as exc:
            return StopResult(False, False, [], lifecycle="failed", words=f"scancel {self.job_id} failed: {exc}",
                              reached=False)
        job = await self._poll_state()
        if job is not None and job.ended:
            await self._job_ended(job)
        left = bool(ans.get("left_queue"))
        words = job.describe() if job is not None else f"job {self.job_id} cancelled"
        return StopResult(left, False, [], exit_codes={n.label: (job.exit_status if job else None)
                                                       for n in self.nodes if n.record},
                          lifecycle="stopped" if left else "stopping",
                          words=words if left else f"job {self.job_id} still {ans.get('state')}")

    def stop_failed(self, res: StopResult) -> str:
        return f"Slurm job {self.job_id} did not leave the queue after scancel"

    async def gpu_processes_now(self) -> list[GpuProcess] | None:
        return None  # no allocation after the job: nothing cockpit may look at or kill there

    # ------------------------------------------------------------------ processes
    async def process_tree(self, stacks: StackRequest | None = None) -> list[NodeTree]:
        """Each node's processes of the job, looked at from inside the allocation: the host program
        runs as an `srun --jobid=J --overlap` step on the node and lists the tasks of the job's
        server step there (named node<k>) and their descendants. Only while the job runs: queued,
        it has no processes; ended, they are gone (and the nodes are no longer the run's)."""
        run = self.run
        if not self.job_id:
            return [NodeTree(n.label, error=f"no Slurm job of {run.profile.name}") for n in self.nodes]
        job = await self._poll_state()
        if job is None or job.outcome != "running" or not self._steps:
            if job is not None and job.outcome == "running":
                why = f"Slurm job {self.job_id} runs but Slurm has not named its nodes yet"
            else:
                words = job.describe() if job is not None else "its state is unknown"
                why = f"Slurm job {self.job_id} is not running ({words}): its processes are listed only while it runs"
            return [NodeTree(n.label, error=why) for n in self.nodes]

        async def one(step: Node) -> NodeTree:
            where = {"slurm_job": self.job_id, "step_name": NODE_STEP.format(k=step.index)}
            try:
                return NodeTree.from_wire(step.label, await step.ops.tree(where, stacks))
            except (TransportError, OSError) as exc:
                return NodeTree(step.label, error=str(exc))

        return list(await asyncio.gather(*(one(n) for n in self._steps)))
