"""Waits that end on the event, not the clock: `cockpit status`'s one bounded look at a serving run
(ServingWatch.check, against a real HTTP server on loopback: how many scrapes of /metrics it takes),
and the readiness probe's pause, cut short when the log says the server is ready."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.profile import load_profile, parse_profile
from cockpit.core.state import RunState
from cockpit.supervisor.servingwatch import ServingWatch
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.watch import ReadinessProbe
from tests.supervisor.test_supervisor import env  # noqa: F401 - a simulated profile, stopped after

METRICS = (
    "# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total 1200\n"
    "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total 5000\n"
    "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0\n"
    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"
)


class Idle(BaseHTTPRequestHandler):
    """An idle engine: its counters still, its model listed, a one-token completion answered."""

    scrapes: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/metrics":
            Idle.scrapes.append(self.path)
            self._send(METRICS.encode(), "text/plain")
        else:
            self._send(json.dumps({"data": [{"id": "m"}]}).encode(), "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(json.dumps({"choices": [{"text": "x"}]}).encode(), "application/json")


@pytest.fixture
def idle_server() -> Iterator[str]:
    Idle.scrapes = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Idle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_status_answers_after_two_scrapes_once_the_probe_is_answered(idle_server: str) -> None:
    """docs/OPERATIONS.md: `cockpit status` takes its own scrapes, at least two, half a second apart.
    An idle server answering the probe is settled then: a third scrape a second later (every status
    of a ready run paid it) tells nothing more."""
    state = RunState(backend="sglang")
    state.phase = "ready"
    profile = parse_profile({"name": "idle", "server": {"model-path": "/m"}})
    watch = ServingWatch(get_backend("sglang"), profile, lambda: state, lambda: None)
    asyncio.run(watch.check(idle_server, {}))
    assert Idle.scrapes == ["/metrics?by=cockpit", "/metrics?by=cockpit"]  # marked as Cockpit's own
    assert state.phase == "ready" and state.hang is None
    assert watch.serving is not None and watch.serving.get("gen_tok_s") == 0.0  # a rate from the two


def test_the_readiness_pause_ends_when_nudged() -> None:
    """The log said ready while /health last answered 503: the next probe goes at once, not at the
    end of the interval (HEALTH_INTERVAL_S); an un-nudged pause still lasts its interval."""

    async def go() -> None:
        probe = ReadinessProbe(lambda: None)
        probe.nudge()  # before the loop's first pause: nothing to cut short, nothing kept
        short = asyncio.create_task(probe.pause(0.05))
        await asyncio.wait_for(short, 5)
        waiting = asyncio.create_task(probe.pause(600))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        probe.nudge()
        await asyncio.wait_for(waiting, 5)  # ended by the nudge, far before its 600 s
        again = asyncio.create_task(probe.pause(600))  # the nudge was used up: the next pause waits
        await asyncio.sleep(0.05)
        assert not again.done()
        again.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await again

    asyncio.run(go())


async def test_the_log_turning_ready_nudges_the_probe_once(env: Path) -> None:  # noqa: F811
    """Once per turn to ready, not for every batch of lines after it: a /health that keeps failing
    on a busy server must be probed at its interval, not at the log's batch rate."""
    sup = Supervisor(load_profile(env))
    nudges: list[str | None] = []
    real = sup.readiness.nudge

    def counted() -> None:
        nudges.append(sup.readiness.health)
        real()

    sup.readiness.nudge = counted  # type: ignore[method-assign]
    try:
        sup.readiness.health = "503"
        sup._probe_when_the_log_says_ready([])  # still starting: nothing
        sup.fold.state.phase = "ready"
        for _ in range(50):  # the log turned ready, then keeps writing
            sup._probe_when_the_log_says_ready([])
        assert nudges == ["503"]
        sup.readiness.health = "unreachable"
        for _ in range(50):
            sup._probe_when_the_log_says_ready([])
        assert nudges == ["503"]  # still the one: the probe's own interval does the rest
        sup.fold.state.phase = "starting"  # a restart
        sup._probe_when_the_log_says_ready([])
        sup.fold.state.phase = "ready"
        sup._probe_when_the_log_says_ready([])
        assert nudges == ["503", "unreachable"]
    finally:
        await sup.close()
