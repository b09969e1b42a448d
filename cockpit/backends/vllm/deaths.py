"""vLLM's words for an engine that died, every generation (issue 35), and the method a worker ran.

V0 (≤0.10): the multiprocessing client's heartbeat `Engine loop has died`, the launcher's
`MQLLMEngine is already dead, terminating server process`, `MQEngineDeadError: Engine loop is not
running …`; the AsyncLLMEngine's `Engine background task failed`, `AsyncEngineDeadError: Background
loop has errored already` / `Task finished unexpectedly`. V1's EngineCore wordings are read in
logparse (`EngineCore encountered a fatal error`, `EngineDeadError`). Each is a crash whose cause is
the first real one above it (the reducer keeps the first specific kind); each happens only to an
engine that was serving. The engine's own iteration timer (`Engine iteration timed out. This should
never happen!`, VLLM_ENGINE_ITERATION_TIMEOUT_S) is its watchdog.

A gloo / TCP peer that closed its connection (`[…/gloo/transport/tcp/pair.cc:534] Connection closed
by peer [192.168.2.2]:39075`, `Connection reset by peer`) is not this rank's fault: a peer died, the
address names the node it was on.

The method a worker was running when it raised names the phase when no frame does: V0's
`Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks`, a
`collective_rpc("execute_dummy_batch")` call in a trace's source line.
"""

from __future__ import annotations

import re

from cockpit.backends import peers
from cockpit.backends.framephase import frame_phase
from cockpit.core import events as ev
from cockpit.core.events import Event

_DEATHS = ("Engine loop has died", "MQLLMEngine is already dead", "Engine background task failed",
           "AsyncEngineDeadError", "MQEngineDeadError", "Background loop has errored already",
           "Engine loop is not running")
_ITERATION_TIMEOUT = "Engine iteration timed out"
_RX_METHOD = re.compile(r"while processing method (\w+)|collective_rpc\(\s*[\"'](\w+)[\"']")


def classify(line: int, ts: str | None, rank: str | None, msg: str) -> list[Event]:
    """The events of an engine-death, iteration-timeout or peer-closed line; [] for any other."""
    if _ITERATION_TIMEOUT in msg:
        return [ev.EngineWatchdogFired(line, ts, rank, msg.strip()),
                ev.PhaseEvidence(line, ts, None, "serving")]
    if any(w in msg for w in _DEATHS):
        return [ev.SchedulerException(line, ts, None, msg.strip()), ev.PhaseEvidence(line, ts, None, "serving")]
    if "by peer" in msg and ("gloo" in msg or "pair.cc" in msg or "Worker failed" in msg or "remote worker" in msg):
        peer = peers.peer_closed(line, ts, rank, msg)
        if peer is not None:
            return [peer]
    return []


def method_frame(line: int, ts: str | None, rank: str | None, msg: str) -> Event | None:
    """A frame for the method a worker ran, when the text names it and the map knows its phase."""
    if "while processing method" not in msg and "collective_rpc(" not in msg:
        return None
    m = _RX_METHOD.search(msg)
    if m is None:
        return None
    name = m[1] or m[2]
    phase = frame_phase("vllm", None, name)
    return ev.TracebackFrame(line, ts, rank, name, None, phase) if phase is not None else None
