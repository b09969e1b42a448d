"""What the supervisor watches besides the logs: each node's GPUs and host memory (the telemetry
agent), and node 0's readiness endpoint.

Telemetry also answers "which processes hold memory on the run's GPUs now", which guards every
launch (never on top of memory someone holds) and ends every stop (wait for the release).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from cockpit.backends.base import HostFacts
from cockpit.serving.probes import probe_status
from cockpit.supervisor import telemetry_feed
from cockpit.supervisor.api import GpuProcess, GpuSample, HostSample
from cockpit.supervisor.nodes import Node
from cockpit.telemetry.hostfacts import facts_from_sample
from cockpit.telemetry.samples import TelemetrySample
from cockpit.transport.base import TransportError

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 2.0  # SGLang's /health costs ≥ 1 s: don't poll fast
# once /health says 200, a slow probe: each one is a line in the server's own access log (its
# death is seen sooner in the log and the process's exit than by the probe), and SGLang's runs a
# generation: twice a minute (docs/OPERATIONS.md "Footprint")
READY_HEALTH_INTERVAL_S = 30.0
# a /metrics answer this recent vouches for a ready server's front end: no /health is sent
VOUCHED_S = 45.0
GPU_RELEASE_TIMEOUT_S = 60.0


def _run_pids(node: Node) -> list[int]:
    return [node.record.pid] if node.record is not None and node.record.pid else []


class GpuWatch:
    """The latest telemetry of every node: GPUs, processes on them, host memory."""

    def __init__(self, nodes: list[Node], *, interval: float, sim_dir: str | None,
                 changed: Callable[[], None]) -> None:
        self.nodes = nodes
        self.interval = interval
        self.sim_dir = sim_dir
        self.changed = changed
        self.gpus: dict[tuple[str, int], GpuSample] = {}
        self.procs: dict[str, tuple[GpuProcess, ...]] = {}
        self.hosts: dict[str, HostSample] = {}

    def take(self, node: Node, sample: TelemetrySample) -> None:
        for g in sample.gpus:
            self.gpus[(node.label, g.index)] = g
        members = set(node.record.members if node.record is not None else ()) | set(_run_pids(node))
        self.procs[node.label] = tuple(
            GpuProcess(node.label, p.pid, p.gpu_index, p.used_gb, p.belongs_to_run or p.pid in members)
            for p in sample.processes
        )
        if sample.host is not None:
            self.hosts[node.label] = sample.host
        self.changed()

    async def loop(self) -> None:
        async def one(node: Node) -> None:
            while True:
                try:
                    async for sample in telemetry_feed.stream_samples(
                        node.ops, interval=self.interval, pids=_run_pids(node), sim_dir=self.sim_dir
                    ):
                        self.take(node, sample)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the agent died or the link dropped: restart it
                    log.debug("telemetry on %s: %s", node.label, exc)
                await asyncio.sleep(1.0)

        await asyncio.gather(*(one(n) for n in self.nodes))

    async def once(self) -> None:
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, pids=_run_pids(node), sim_dir=self.sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                log.debug("telemetry on %s: %s", node.label, exc)
                continue
            self.take(node, sample)

    async def host_facts(self) -> dict[str, HostFacts]:
        """HostFacts per node label, measured now (unreachable nodes left out)."""
        out: dict[str, HostFacts] = {}
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, sim_dir=self.sim_dir)
            except (TransportError, OSError, ValueError) as exc:
                log.debug("host facts on %s: %s", node.label, exc)
                continue
            self.take(node, sample)
            out[node.label] = facts_from_sample(sample)
        return out

    def host_facts_now(self) -> list[HostFacts]:
        """Host memory as last sampled (for diagnosis while the run goes on)."""
        return [HostFacts(host=label, mem_total_gb=hs.mem_total_gb, mem_available_gb=hs.mem_available_gb,
                          source=hs.source) for label, hs in self.hosts.items()]

    async def processes_now(self) -> list[GpuProcess] | None:
        """Processes on the GPUs of every node now (None when telemetry cannot tell)."""
        out: list[GpuProcess] = []
        for node in self.nodes:
            try:
                sample = await telemetry_feed.sample_once(node.ops, pids=_run_pids(node), sim_dir=self.sim_dir)
            except (TransportError, OSError, ValueError):
                return None
            if sample.source == "none":
                return None
            self.take(node, sample)
            out += list(self.procs.get(node.label, ()))
        return out

    async def kill(self, procs: Iterable[GpuProcess]) -> None:
        by_host: dict[str, list[int]] = {}
        for p in procs:
            by_host.setdefault(p.host, []).append(p.pid)
        for node in self.nodes:
            if node.label in by_host:
                await node.ops.kill(by_host[node.label])

    async def wait_release(self, gpus: set[tuple[str, int]], kill: bool,
                           say: Callable[[str], None]) -> list[GpuProcess]:
        """Wait until no process holds memory on `gpus` (any GPU when empty); returns those that
        still do when waiting cannot help (foreign processes, or the timeout)."""
        deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
        killed_once = False
        while True:
            procs = await self.processes_now()
            if procs is None:
                return []  # unknown: process death was verified, memory can't be
            on_ours = [p for p in procs if not gpus or (p.host, p.gpu_index) in gpus]
            if not on_ours:
                return []
            if kill and not killed_once:
                killed_once = True
                await self.kill(on_ours)
            elif time.monotonic() > deadline or (not any(p.belongs_to_run for p in on_ours) and not kill):
                # foreign/leftover processes: waiting won't free them; the operator decides
                return on_ours
            say("waiting for GPU memory: pid " + ", ".join(str(p.pid) for p in on_ours))
            await asyncio.sleep(0.5)


def probe_interval(health: str | None) -> float:
    """Seconds to the next readiness probe: soon while the port refuses (start-up), slowly once
    /health says 200."""
    return {"refused": 1.0, "200": READY_HEALTH_INTERVAL_S}.get(health or "", HEALTH_INTERVAL_S)


class ReadinessProbe:
    """Readiness on node 0 only (other nodes serve a dummy /health that always says 200)."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.changed = changed
        self.health: str | None = None  # "refused", "503", "200", "unreachable"; None: not probed yet
        self._local_port: int | None = None
        self._nudged: asyncio.Event | None = None  # made in the loop's event loop

    def nudge(self) -> None:
        """Probe now, not at the end of the interval: the log says the server is ready (its
        /health answered 503 a moment before, during the warmup)."""
        if self._nudged is not None:
            self._nudged.set()

    async def pause(self, seconds: float) -> None:
        """The wait between probes, cut short by nudge()."""
        if self._nudged is None:
            self._nudged = asyncio.Event()
        # not asyncio.wait_for: on 3.11 it can swallow a cancel that lands as the event is set, and
        # stopping the watchers would then wait for this loop for ever (as Publisher.run says)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._nudged.wait()
        self._nudged.clear()

    def reset(self) -> None:
        self.health = None
        self._local_port = None  # a restart may have changed the port

    async def base_url(self, node: Node, port: int) -> str:
        """`http://127.0.0.1:PORT` reaching node 0's API: the port itself locally, the SSH local
        forward for a remote node (the tunnel the probe uses; raises TransportError when down)."""
        if self._local_port is None:
            self._local_port = await node.transport.forward_port(port)
        return f"http://127.0.0.1:{self._local_port}"

    async def probe(self, node: Node, port: int, path: str) -> None:

        try:
            if self._local_port is None:
                self._local_port = await node.transport.forward_port(port)
            health = await probe_status(f"http://127.0.0.1:{self._local_port}", path)
        except (TransportError, OSError):
            health = "unreachable"
        if health != self.health:
            self.health = health
            self.changed()

    def vouched(self, answered_at: float | None, now: float) -> bool:
        """A ready server whose /metrics answered lately needs no /health as well (one request
        where there were two): only once /health itself said 200 for this run."""
        return self.health == "200" and answered_at is not None and now - answered_at < VOUCHED_S

    async def loop(self, node: Node, port: Callable[[], int], path: Callable[[], str],
                   active: Callable[[], bool], answered_at: Callable[[], float | None] = lambda: None) -> None:
        """`answered_at`: when the serving watch's /metrics last answered (monotonic; None: never)."""
        while True:
            try:
                if active() and not self.vouched(answered_at(), time.monotonic()):
                    await self.probe(node, port(), path())
            except Exception:  # one bad look must not end the readiness watch for the run
                log.warning("readiness probe: one look failed; going on", exc_info=True)
            await self.pause(probe_interval(self.health))
