"""The `hosts:` target: one node per host, reached over SSH (or this machine), the server a
detached process group there that the host program launches, finds and stops.

Each node's log is followed by byte offset, node 0's API is probed for readiness, and telemetry
samples every host; a stop SIGTERMs the run's process groups, SIGKILLs after the timeout, then
waits until the run's GPU memory is released. The run's processes on a host are its recorded
process group, session and tree (the host program's `tree`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from cockpit.core.overrides import Overrides
from cockpit.preflight.launchplan import GatedLaunch, check_gated
from cockpit.remote.host import ServerExited
from cockpit.remote.hostresults import LaunchReply, NodeTree, RunRecord, StackRequest, StopReply, run_or_none
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import GpuProcess, HostsView, RunInfo
from cockpit.supervisor.nodes import Node, make_nodes, resolve_program
from cockpit.supervisor.targets.base import (
    LaunchFailed,
    LeftoversHoldGpus,
    Run,
    RunFound,
    RunRefused,
    StopResult,
    new_run_id,
)
from cockpit.supervisor.watch import GpuWatch
from cockpit.transport.base import Transport, TransportError

log = logging.getLogger(__name__)


# how often `status` reads node k > 0's record while it looks at the head (a dead node named
# within a few seconds of its exit, whatever the head's look waits for)
NODE_LOOK_S = 2.0


class HostsTarget:
    """The run's nodes are the profile's hosts."""

    kind = "hosts"

    def __init__(self, run: Run, *, transports: list[Transport] | None, runs_root: str | None,
                 telemetry_interval: float):
        self.run = run
        self.nodes: list[Node] = make_nodes(run.profile, transports, runs_root)
        self.telemetry: GpuWatch = GpuWatch(self.nodes, interval=telemetry_interval,
                                            sim_dir=telemetry_feed.sim_dir_of(run.profile), changed=run.changed)

    # ------------------------------------------------------------------ launch / attach
    async def start(self, plan: GatedLaunch, *, attach: bool, kill_leftovers: bool,
                    env: Mapping[str, str]) -> RunFound:
        """Launch the gate's argvs detached on every node. Processes already holding memory on
        the GPUs the run will use refuse the launch (LeftoversHoldGpus) unless kill_leftovers: a
        server started on top of them would size its KV pool from what is left and die, or starve them."""
        run, profile = self.run, self.run.profile
        gated = check_gated(plan, profile.name, len(self.nodes))  # nothing the gate did not pass
        overrides, argvs, flags = gated.overrides, gated.argvs, gated.flags
        if profile.groups:  # two groups are never launched as one plain server (the TUI, `up`)
            name = profile.name
            raise LaunchFailed(f"{name} declares a prefill group and a decode group: launch each as its own "
                               f"profile, {name}.prefill and {name}.decode")
        nodes = self.nodes
        live = await self.attach()
        if live is not None:
            if attach:
                return live
            n0, info = nodes[0].record, live.info
            if n0 is not None and not n0.alive and n0.members:
                raise RunRefused(
                    f"{profile.name}: the server of run {info.id} has exited but its processes "
                    f"{list(n0.members)} are still alive on {info.hosts[0]} (and may hold GPU memory)", info, live)
            raise RunRefused(f"{profile.name} is already running on {info.hosts[0]} (run {info.id}, pid {info.pid})",
                             info, live)
        gpus = run.backend.launch.gpus([n.label for n in nodes], flags, profile.env)
        busy = await self.telemetry.wait_release(gpus, kill_leftovers, run.say)
        if busy:
            raise LeftoversHoldGpus(busy)
        run.set_lifecycle("launching", "launching the server")
        run_id = new_run_id()
        env = {**profile.env, **env, **run.backend.launch.secret_env(profile, overrides)}
        launched: list[tuple[Node, RunRecord]] = []
        for node, argv in zip(nodes, argvs, strict=True):
            argv = resolve_program(list(argv), local=node.host.is_local)
            meta = {"flags": flags, "overrides": overrides.as_dict(), "node_rank": node.index, "hosts": [n.label for n in nodes]}
            node_env = {**env, **run.backend.launch.node_env(profile, node.index), **node.host.env}
            res = LaunchReply.from_wire(await node.ops.launch(
                node.key, run_id, argv, env=node_env, cwd=profile.workdir,
                log=node.log_file, meta=meta))
            if res.refused:
                # lost a race with another cockpit: theirs wins, we attach
                await self._stop_nodes(launched, timeout=10)
                run.set_lifecycle("idle", "")
                found = await self.attach()
                if found is not None and attach:
                    return found
                raise RunRefused(f"{profile.name} is already running on {node.label}",
                                 found.info if found is not None else None, found)
            if res.error is not None or res.record is None:
                await self._stop_nodes(launched, timeout=10)
                run.set_lifecycle("failed", f"launch failed on {node.label}: {res.error}")
                raise LaunchFailed(f"{node.label}: the server did not start: {res.error}",
                                   hint="check the profile's python/program and workdir")
            launched.append((node, res.record))
        for node in nodes:
            node.reset()
        for node, record in launched:
            node.record = record
        return RunFound(self._run_info(flags), flags, overrides, lifecycle="running", progress="starting", journal=True)

    async def _stop_nodes(self, launched: list[tuple[Node, RunRecord]], timeout: float) -> None:
        for node, record in launched:
            with contextlib.suppress(TransportError):
                await node.ops.stop(node.key, record.run_id, timeout)

    async def attach(self, *, include_ended: bool = False) -> RunFound | None:
        """The profile's live run (pid alive, still our process) on its hosts, resumed; with
        include_ended, the newest run even if it has ended (status of a crashed run)."""
        run, nodes = self.run, self.nodes
        first = run_or_none(await nodes[0].ops.find(nodes[0].key))
        if first is None:
            return None
        # a multi-node run lives while any node's processes do: node 1 left waiting for a head that
        # died at start-up is still the run's, for `down` to stop
        others = [run_or_none(await node.ops.find(node.key, first.run_id)) for node in nodes[1:]]
        alive = first.has_processes or any(o is not None and o.has_processes for o in others)
        if not alive and not include_ended:
            return None
        if run.info is not None and run.info.id == first.run_id:
            return RunFound(run.info, run.flags, run.overrides, new=False)  # the run followed already
        for node in nodes:
            node.reset()
        nodes[0].record = first
        for node, record in zip(nodes[1:], others, strict=True):
            node.record = record
        flags = dict(first.flags or run.profile.server)
        info = self._run_info(flags)
        if alive:
            return RunFound(info, flags, Overrides.of(first.overrides), lifecycle="running", progress="", journal=True)
        # the exit is applied to the state once the log has been read (refresh_once / run)
        return RunFound(info, flags, Overrides.of(first.overrides),
                        lifecycle="stopped" if first.stopped_by else "failed", progress="the run has ended")

    def _run_info(self, flags: dict[str, Any]) -> RunInfo:
        n0 = self.nodes[0].record or RunRecord(run_id="None")
        run = self.run
        return RunInfo(
            id=n0.run_id,
            profile=run.profile.name,
            hosts=tuple(n.label for n in self.nodes),
            pid=n0.pid,
            pgid=n0.pgid,
            started_at=n0.started_at,
            run_dir=n0.run_dir,
            log_path=n0.log_path,
            flags=dict(flags),
            version=run.profile.version,
        )

    # ------------------------------------------------------------------ monitoring
    def watchers(self) -> list[asyncio.Task[Any]]:
        """The one list of what watches a run: each node's log, node 0's readiness, telemetry."""
        run, n0 = self.run, self.nodes[0]
        spawn: list[Coroutine[Any, Any, None]] = [run.follow.follow(n, follow=True) for n in self.nodes if n.record]
        spawn.append(run.readiness.loop(
            n0, lambda: run.backend.launch.api_port(run.flags), run.readiness_path,
            lambda: n0.exited is None and not run.stopping, lambda: run.serving.answered_at))
        spawn.append(self.telemetry.loop())
        spawn.append(run.serving.loop(run.api_base_url, lambda: run.flags,
                                      lambda: n0.exited is None and not run.stopping))
        return [asyncio.create_task(c) for c in spawn]

    async def refresh_once(self) -> bool:
        """Read each node's log of the run to its current end, one probe (`status`): whether every
        node's server has ended."""
        run = self.run
        await asyncio.gather(*(run.follow.follow(node, follow=False) for node in self.nodes if node.record))
        if any(n.exited is None for n in self.nodes if n.record) and run.lifecycle == "running":

            try:  # the tunnel once, before the two looks that share it
                url: str | None = await run.api_base_url()
            except (TransportError, OSError) as exc:
                log.debug("serving check: %s", exc)
                url = None

            async def serving_look() -> None:
                if url is None:
                    return
                try:
                    await run.serving.check(url, run.flags)
                except (TransportError, OSError) as exc:
                    log.debug("serving check: %s", exc)

            # together, not one after the other: SGLang's /health runs a generation (a hung SGLang
            # answers it with a timeout, not 200) and a slow /metrics must not add to it; the look
            # ends at once when the log does not say the server serves
            look = asyncio.ensure_future(asyncio.gather(
                run.readiness.probe(self.nodes[0], run.backend.launch.api_port(run.flags), run.readiness_path()),
                serving_look()))
            await self._look_unless_a_node_ends(look)
        await self.telemetry.once()
        return all(n.exited is not None for n in self.nodes if n.record)

    async def _look_unless_a_node_ends(self, look: asyncio.Future[Any]) -> None:
        """The head's look (its probe, the hang window) while node k > 0's record is read every few
        seconds: when node 1 dies the head can leave the probe unanswered for the whole hang window
        (vLLM's DP head routes it to the dead engine; 67 s seen), and the answer `status` owes is
        that the node died, not that the head looks hung a minute later. A node that ended ends the
        look: its log read to its end and its exit taken, the node_died the supervisor makes of it."""
        watched = [n for n in self.nodes[1:] if n.record is not None and n.exited is None]
        if not watched:
            await look
            return

        async def a_node_ended() -> None:
            while True:
                await asyncio.sleep(NODE_LOOK_S)
                for node in watched:
                    assert node.record is not None
                    try:
                        rec = run_or_none(await node.ops.find(node.key, node.record.run_id))
                    except TransportError as exc:
                        log.debug("node %s: %s", node.label, exc)
                        continue
                    if rec is not None and not rec.alive and (rec.exit_code is not None or rec.lost):
                        node.record = rec
                        await self.run.follow.follow(node, follow=False)
                        return

        watch = asyncio.ensure_future(a_node_ended())
        try:
            await asyncio.wait({look, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (look, watch):
                if not task.done():
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def ready(self) -> bool:
        return True  # the log and node 0's probe say it all

    def view(self) -> HostsView:
        return HostsView(hosts=tuple(n.label for n in self.nodes))

    def end_watch(self) -> Callable[[], Awaitable[str]] | None:
        return None  # the server's pid on each host says when it ended

    # ------------------------------------------------------------------ stop
    async def stop(self, timeout: float, kill_leftovers: bool, by: str) -> StopResult:
        """SIGTERM the run's process groups, SIGKILL after `timeout`, then wait until its GPU
        memory is released; leftovers still holding memory are reported (and killed on request)."""
        run = self.run
        run.set_lifecycle("stopping", f"stopping {run.profile.name} (SIGTERM, SIGKILL after {timeout:g} s)")
        gpus_of_run = run.run_gpus()
        running = [n for n in self.nodes if n.record]
        results = await asyncio.gather(
            *(n.ops.stop(n.key, n.record.run_id if n.record else None, timeout, by) for n in running),
            return_exceptions=True,
        )
        res = StopResult(True, False, [])
        for node, r in zip(running, results, strict=True):
            if isinstance(r, BaseException):
                res.stopped = False
                run.say(f"{node.label}: stop failed: {r}")
                continue
            reply = StopReply.from_wire(r)
            res.killed |= reply.killed
            res.left += list(reply.left)
            res.stopped &= reply.stopped
            exit_code = reply.record.exit_code if reply.record is not None else None
            res.exit_codes[node.label] = exit_code
            if node.exited is None:
                pid = reply.record.pid if reply.record is not None else None
                run.server_exited(node, ServerExited(pid or 0, exit_code,
                                                     (reply.record.stopped_by if reply.record is not None else None) or by,
                                                     reply.record.oom_evidence if reply.record is not None else None))
        run.set_lifecycle("waiting_gpu_release", "waiting for the run's GPU memory to be released")
        res.leftovers = await self.telemetry.wait_release(gpus_of_run, kill_leftovers, run.say)
        if res.leftovers:
            res.words = "GPU memory still held by pid " + ", ".join(str(p.pid) for p in res.leftovers)
        return res

    def stop_failed(self, res: StopResult) -> str:
        return f"processes of the old run survived SIGKILL: {res.left}"

    async def gpu_processes_now(self) -> list[GpuProcess] | None:
        """Processes on the GPUs of every node now (None when telemetry cannot tell)."""
        return await self.telemetry.processes_now()

    # ------------------------------------------------------------------ processes
    async def process_tree(self, stacks: StackRequest | None = None) -> list[NodeTree]:
        """Each host's processes of the run the Supervisor follows (Supervisor.process_tree finds it
        first): its recorded process group, session and tree (proctree.py), read by the host program."""
        run = self.run
        info = run.info
        if info is None:
            return [NodeTree(n.label, error=f"no run of {run.profile.name} on {n.label}") for n in self.nodes]

        async def one(node: Node) -> NodeTree:
            where = {"profile": node.key, "run_id": node.record.run_id if node.record else info.id}
            try:
                return NodeTree.from_wire(node.label, await node.ops.tree(where, stacks))
            except (TransportError, OSError) as exc:
                return NodeTree(node.label, error=str(exc))

        return list(await asyncio.gather(*(one(n) for n in self.nodes)))
