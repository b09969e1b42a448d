"""A Slurm profile's run: submitted with sbatch on the login node, followed through it.

Everything the base Supervisor does with one host per node, this one does through the login
node: node k's log is `node<k>.log` in the run directory on the shared filesystem, followed by
byte offset with the same LogFollower (so the same no-loss reconnects); the job's state comes from
Slurm (`scontrol`, then `sacct`, then the job-completion record) at a modest rate and decides
when the server has ended and why; telemetry runs the agent as an `srun --overlap` step on each
node. Only start/attach/stop and the loops differ; parsing, the state, diagnosis, snapshots and
the journal are the base class's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import replace
from typing import Any

from cockpit.core.profile import Host, Profile, normalise_flag_name
from cockpit.slurm.client import SlurmLogin, SubmitRejected
from cockpit.slurm.jobstate import SlurmJob
from cockpit.slurm.script import DIST_ADDR, NODE_LOG, render_batch_script, sbatch_argv
from cockpit.slurm.steps import SrunStepTransport
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import RunInfo, RunSnapshot
from cockpit.supervisor.host import HostOps, ServerExited
from cockpit.supervisor.supervisor import (
    RunRefused,
    StopResult,
    Supervisor,
    _flag,
    _Glue,
    _Node,
    changes_to_overrides,
    merged_flags,
    new_run_id,
)
from cockpit.transport.base import Transport, TransportError

log = logging.getLogger(__name__)

# squeue/scontrol load slurmctld on a big cluster: poll at a modest rate (tests set it faster)
POLL_ENV = "COCKPIT_SLURM_POLL_S"
DEFAULT_POLL_S = 5.0
JOB_PREFIX = "slurm job "  # RunInfo.hosts entry that carries the job id


def _login_transport(profile: Profile) -> Transport:
    assert profile.target is not None
    host = Host(ssh=profile.target.login)
    if host.is_local:
        from cockpit.transport.local import LocalTransport

        return LocalTransport()
    from cockpit.transport import transport_for

    return transport_for(host)


class SlurmSupervisor(Supervisor):
    """The Supervisor of a `target: {kind: slurm}` profile (Supervisor(profile) returns one)."""

    def __init__(self, profile: Profile, **kw: Any):
        super().__init__(profile, **kw)
        assert profile.target is not None
        self.target = profile.target
        given = kw.get("transports")
        self._login_t: Transport = given[0] if given else _login_transport(profile)
        self.login = SlurmLogin(self._login_t, runs_root=self._runs_root)
        self.job: SlurmJob | None = None
        self.job_id: str | None = None
        self._job_at = 0.0  # time.time() of the last state answer
        self._telemetry_note: str | None = None  # why GPUs are not measured, when they are not
        self._follow_tasks: dict[int, asyncio.Task[Any]] = {}
        self._step_ops: dict[int, HostOps] = {}  # node index -> the agent's srun --overlap step
        self.poll_s = float(os.environ.get(POLL_ENV) or DEFAULT_POLL_S)

    # ------------------------------------------------------------------ nodes
    def _nodes_or_make(self) -> list[_Node]:
        if self._nodes is None:
            ops = HostOps(self._login_t, runs_root=self._runs_root)
            self._nodes = [
                _Node(k, Host.model_construct(ssh=f"node{k}"), self._login_t, ops, key=self.profile.name, log="")
                for k in range(self.target.nodes)
            ]
        return self._nodes

    def _name_nodes(self, names: list[str] | tuple[str, ...]) -> None:
        """Once the allocation is known, node k is called by its name (logs, GPUs, ranks)."""
        for node, name in zip(self.nodes, names, strict=False):
            if node.host.ssh != name:
                node.host = Host.model_construct(ssh=name)
                if self.job_id:
                    # telemetry runs on the node as a job step; logs stay on the shared filesystem,
                    # read through the login node (node.ops)
                    self._step_ops[node.index] = HostOps(SrunStepTransport(self._login_t, self.job_id, name),
                                                         runs_root=self._runs_root)
        self._dirty = True

    def _node_run(self, facts: dict[str, Any], k: int) -> dict[str, Any]:
        return {
            "run_id": facts["run_id"],
            "run_dir": facts["run_dir"],
            "log_path": f"{facts['run_dir']}/{NODE_LOG.format(k=k)}",
            "log_offset": 0,
            "log_inode": None,
            "pid": None,
            "alive": self.job is None or not self.job.ended,
            "meta": facts.get("meta") or {},
            "job_id": facts.get("job_id"),
        }

    def _adopt(self, facts: dict[str, Any]) -> RunInfo:
        self._reset_for_run()
        self.job_id = str(facts.get("job_id") or "") or None
        for node in self.nodes:
            node.run = self._node_run(facts, node.index)
        if facts.get("nodes"):
            self._name_nodes(facts["nodes"])
        meta = facts.get("meta") or {}
        self._flags = dict(meta.get("flags") or self._flags)
        self._overrides = dict(meta.get("overrides") or {})
        self._run = RunInfo(
            # the journal keeps hosts: the job id rides there (`cockpit runs` shows it)
            id=str(facts["run_id"]), profile=self.profile.name,
            hosts=(self.target.login, f"{JOB_PREFIX}{self.job_id}") if self.job_id else (self.target.login,),
            pid=None, pgid=None,
            started_at=str(facts.get("submitted_at") or ""), run_dir=str(facts["run_dir"]),
            log_path=self.nodes[0].run["log_path"] if self.nodes[0].run else "", flags=dict(self._flags),
            version=self.profile.version,
        )
        return self._run

    # ------------------------------------------------------------------ preflight
    async def host_facts(self) -> dict[str, Any]:
        """The nodes are not known before the allocation: nothing measured (never a guess)."""
        return {}

    # ------------------------------------------------------------------ launch / attach
    async def start(self, overrides: dict[str, Any] | None = None, *, attach: bool = True,
                    kill_leftovers: bool = False) -> RunInfo:
        """Submit the job (sbatch --parsable on the login node). A queued or running job of the
        profile is attached to when `attach`, else refused (RunRefused)."""
        overrides = {normalise_flag_name(k): v for k, v in (overrides or {}).items()}
        live = await self.attach()
        if live is not None:
            if attach:
                return live
            raise RunRefused(f"{self.profile.name} is already {self._job_words()} (run {live.id}, job {self.job_id})", live)
        flags = merged_flags(self.profile, overrides)
        given = _flag(flags, "dist-init-addr", "nccl-init-addr")
        dist = None if self.target.nodes == 1 else (str(given) if given else DIST_ADDR)
        argvs = _Glue.build_argvs(self.profile, overrides, dist)
        run_id = new_run_id()
        script = render_batch_script(argvs, env=dict(self.profile.env), profile=self.profile.name, run_id=run_id)
        meta = {"flags": flags, "overrides": overrides, "nodes": self.target.nodes, "target": "slurm"}
        self._set("launching", f"submitting to Slurm on {self.target.login}")
        try:
            ans = await self.login.submit(self.profile.name, run_id, workdir=self.profile.workdir, script=script,
                                          sbatch=sbatch_argv(self.target, job_name=f"cockpit-{self.profile.name}"),
                                          meta=meta)
        except SubmitRejected as exc:
            self._set("failed", str(exc))
            raise
        if ans.get("refused"):
            self._set("idle", "")
            found = await self.attach()
            if found is not None and attach:
                return found
            raise RunRefused(f"{self.profile.name} has a job in the queue already (job {ans['run'].get('job_id')})",
                             found)
        info = self._adopt(ans["run"])
        self._overrides, self._flags = overrides, flags
        self._run = replace(info, flags=dict(flags))
        await self._poll_state()
        self._journal_start()
        return self._run

    def _job_words(self) -> str:
        return self.job.describe() if self.job is not None else "submitted"

    async def attach(self, *, include_ended: bool = False) -> RunInfo | None:
        facts = await self.login.find(self.profile.name, self.profile.workdir)
        if facts is None or not facts.get("job_id"):
            return None
        job = (await self.login.query([str(facts["job_id"])]))[str(facts["job_id"])]
        if job.ended and not include_ended:
            return None
        if self._run is not None and self._run.id == facts["run_id"]:
            self._take_job(job)
            return self._run
        self.job = job
        info = self._adopt(facts)
        self.job = job
        self._take_job(job)
        if not job.ended:
            self._journal_start()
        return info

    # ------------------------------------------------------------------ Slurm state
    async def _poll_state(self) -> SlurmJob | None:
        if not self.job_id:
            return None
        try:
            job = (await self.login.query([self.job_id]))[self.job_id]
        except (TransportError, OSError, KeyError) as exc:
            self._set(progress=f"Slurm state unknown: {exc}")
            return None
        self._take_job(job)
        return job

    def _take_job(self, job: SlurmJob) -> None:
        """Slurm's answer → lifecycle and progress words (the end itself is applied by _job_ended)."""
        self.job = job
        self._job_at = time.time()
        if job.nodes:
            self._name_nodes(job.nodes)
        for node in self.nodes:
            if node.run is not None:
                node.run["alive"] = not job.ended
        if job.outcome == "queued":
            self._set("launching", job.describe())
        elif job.outcome == "running":
            if self._lifecycle in ("idle", "launching", "preflight"):
                self._set("running", "")
            else:
                self._dirty = True
        elif job.ended and not self._stopping:
            self._set(progress=job.describe())
        else:
            self._dirty = True

    async def _state_loop(self) -> None:
        while True:
            job = await self._poll_state()
            if job is not None and job.ended:
                await self._job_ended(job, drain=True)
                return
            await asyncio.sleep(self.poll_s)

    async def _job_ended(self, job: SlurmJob, *, drain: bool) -> None:
        """Deliver every node's last lines, then apply the end with Slurm's words."""
        if drain:
            tasks = [t for t in self._follow_tasks.values() if not t.done()]
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            self._follow_tasks.clear()
            await asyncio.gather(*(self._follow(n, follow=False) for n in self.nodes if n.run),
                                 return_exceptions=True)
        self._apply_end(job)

    def _apply_end(self, job: SlurmJob) -> None:
        stop = job.outcome == "stop" or self._stopping
        for node in self.nodes:
            if node.run is not None and node.exited is None:
                self._server_exited(node, ServerExited(0, job.exit_status, "slurm" if stop else None))
        crash = self._state.crash
        words = job.describe()
        if crash is not None and not stop:
            if words not in crash.decisive_lines:
                crash.decisive_lines.append(words)
            if crash.kind == "unknown":
                crash.message = words
        if not self._stopping:
            self._set("stopped" if stop or crash is None else "failed", words)
        self._diag_dirty = self._dirty = True

    # ------------------------------------------------------------------ monitoring
    async def run(self) -> None:
        from cockpit.errors import CockpitError

        if self._run is None:
            raise CockpitError(f"{self.profile.name}: no run to follow", hint="start() or attach() first")
        self._start_tasks()
        try:
            await self._closed.wait()
        finally:
            await self._cancel_tasks()
            self._publish(force=True)

    def _start_tasks(self) -> None:
        self._follow_tasks = {n.index: asyncio.create_task(self._follow(n, follow=True)) for n in self.nodes if n.run}
        self._tasks = [*self._follow_tasks.values(),
                       asyncio.create_task(self._publisher()),
                       asyncio.create_task(self._probe_loop()),
                       asyncio.create_task(self._telemetry_loop()),
                       asyncio.create_task(self._state_loop())]

    async def refresh_once(self) -> RunSnapshot:
        job = await self._poll_state()
        await asyncio.gather(*(self._follow(n, follow=False) for n in self.nodes if n.run), return_exceptions=True)
        if job is not None and job.ended:
            self._apply_end(job)
        elif job is not None and job.outcome == "running":
            await self._probe_once()
            await self._telemetry_once()
        if self.journal is not None and self._run is not None:
            if job is not None and job.ended:
                outcome = "crashed" if self._state.phase == "crashed" else "stopped"
                self._journal_call("complete_from_state", self._run.id, self._state,
                                   list(self._current_findings()), outcome)
                self._journal_ended = True
            else:
                self._journal_tick(force=True)
        return self.snapshot()

    def _head(self) -> str | None:
        return self.job.nodes[0] if self.job is not None and self.job.nodes else None

    async def _probe_once(self) -> None:
        """Readiness on the head node, through an SSH forward from the login node to it."""
        from cockpit.telemetry.probes import probe_readiness

        head = self._head()
        if head is None or self.job is None or self.job.outcome != "running":
            return
        try:
            if self._health_port is None:
                self._health_port = await self._login_t.forward_port(self._port(), head)
            health = await probe_readiness(f"http://127.0.0.1:{self._health_port}", self._version())
        except (TransportError, OSError):
            health = "unreachable"
        if health != self._health:
            self._health = health
            self._dirty = True
            self._notify()

    async def _telemetry_loop(self) -> None:
        """The agent as an `srun --overlap` step per node, once the job runs."""
        while self.job is None or self.job.outcome != "running" or not self._head():
            await asyncio.sleep(self.poll_s / 2)

        async def one(node: _Node) -> None:
            while True:
                ops = self._step_ops.get(node.index)
                if ops is None:
                    await asyncio.sleep(self.poll_s)
                    continue
                try:
                    async for sample in telemetry_feed.stream_samples(ops, interval=self.telemetry_interval,
                                                                       sim_dir=self._sim_dir):
                        if sample.source == "none":
                            why = "; ".join(sample.errors) or "no GPU source on the node"
                            self._telemetry_note = f"not measured on {node.label}: {why}"
                        else:
                            self._telemetry_note = None
                        self._take_telemetry(node, sample)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._telemetry_note = f"not measured: {exc}"
                await asyncio.sleep(max(1.0, self.poll_s))

        await asyncio.gather(*(one(n) for n in self.nodes))

    async def _telemetry_once(self) -> None:
        if not self._head():
            self._telemetry_note = "not measured: the job has no nodes yet"
            return
        for node in self.nodes:
            ops = self._step_ops.get(node.index)
            if ops is None:
                continue
            try:
                sample = await telemetry_feed.sample_once(ops, sim_dir=self._sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                self._telemetry_note = f"not measured: srun --overlap on {node.label} failed: {exc}"
                continue
            self._take_telemetry(node, sample)

    async def gpu_processes_now(self) -> list[Any] | None:
        return None  # the allocation is released with the job: Slurm's epilog owns the GPUs then

    # ------------------------------------------------------------------ snapshots
    def slurm_json(self) -> dict[str, Any] | None:
        if self.job_id is None:
            return None
        job = self.job
        return {
            "job_id": self.job_id,
            "state": job.state if job else None,
            "reason": (job.reason or None) if job else None,
            "nodes": list(job.nodes) if job else [],
            "node_list": (job.node_list or None) if job else None,
            "time_left": job.time_left if job else None,
            "time_limit": (job.time_limit or None) if job else None,
            "exit_code": (job.exit_code or None) if job else None,
            "words": job.describe() if job else None,
            "login": self.target.login,
            "telemetry": self._telemetry_note,
            "checked_at": self._job_at or None,
        }

    def snapshot(self) -> RunSnapshot:
        snap = replace(Supervisor.snapshot(self), slurm=self.slurm_json())
        self._last_snapshot = snap
        return snap

    # ------------------------------------------------------------------ stop / restart
    async def stop(self, timeout: float = 30.0, kill_leftovers: bool = False) -> StopResult:
        """`scancel`, then wait until the job has left the queue (reached an end state)."""
        if self._run is None:
            await self.attach()
        if self._run is None or not self.job_id:
            return StopResult(True, False, [])
        self._crash_before_stop = self._state.crash is not None
        self._stopping = True
        self._set("stopping", f"scancel {self.job_id}; waiting until it has left the queue")
        try:
            ans = await self.login.cancel(self.job_id, timeout=max(timeout, 5.0) + 30)
        except TransportError as exc:
            self._set("failed", f"scancel {self.job_id} failed: {exc}")
            return StopResult(False, False, [])
        job = await self._poll_state()
        if job is not None and job.ended:
            await self._job_ended(job, drain=bool(self._follow_tasks))
        self._mark_stopped()
        left = bool(ans.get("left_queue"))
        words = job.describe() if job is not None else f"job {self.job_id} cancelled"
        self._set("stopped" if left else "stopping", words if left else f"job {self.job_id} still {ans.get('state')}")
        res = StopResult(left, False, [], exit_codes={n.label: (job.exit_status if job else None)
                                                      for n in self.nodes if n.run})
        self._journal_end()
        self._publish(force=True)
        return res

    async def restart(self, changes: Any, *, kill_leftovers: bool = False, timeout: float = 30.0) -> RunInfo:
        """A new job with the changed flags (the old one is cancelled first)."""
        overrides = {**self._overrides, **changes_to_overrides(changes)}
        was_running = bool(self._tasks)
        await self.stop(timeout=timeout)
        await self._cancel_tasks()
        info = await self.start(overrides, attach=False)
        if was_running and not self._closed.is_set():
            self._start_tasks()
        return info

    async def _cancel_tasks(self) -> None:
        self._follow_tasks.clear()
        await Supervisor._cancel_tasks(self)
