"""HTTP probes against a real local HTTP server (directly and through an SSH port forward)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from cockpit.backends import get_backend
from cockpit.serving.probes import (
    metrics,
    parse_metrics,
    probe_health,
    probe_ready,
    probe_status,
    server_info,
    should_probe_readiness,
)
from cockpit.transport.ssh import SSHTransport

SGLANG = get_backend("sglang")
readiness_path = SGLANG.launch.readiness_path

if TYPE_CHECKING:
    from tests.conftest import SshHome

METRICS = """\
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",tp_rank="0"} 0.31
sglang:token_usage{engine_type="unified",model_name="m",tp_rank="1"} 0.45
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 3.0
sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="1"} 4.0
# HELP sglang:gen_throughput The generation throughput (token/s)
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="m",tp_rank="0"} 2874.5
# HELP sglang:startup_available_gpu_memory_gb free GPU memory after startup
# TYPE sglang:startup_available_gpu_memory_gb gauge
sglang:startup_available_gpu_memory_gb{tp_rank="0"} 5.51
sglang:startup_available_gpu_memory_gb{tp_rank="1"} 5.49
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 12345.0
# HELP sglang:e2e_request_latency_seconds Histogram
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 3.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0
sglang:e2e_request_latency_seconds_count{model_name="m"} 4.0
sglang:e2e_request_latency_seconds_sum{model_name="m"} 2.5
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 100.0
"""


@dataclass
class FakeServer:
    port: int
    health: int = 200
    health_delay: float = 0.0
    ready: int = 404
    routes: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer(port=0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.path = self.path.split("?", 1)[0]  # a query string is ignored, as engines do
            if self.path == "/health":
                time.sleep(state.health_delay)
                self._send(state.health, "text/plain", b"")
            elif self.path == "/ready":
                self._send(state.ready, "text/plain", b"")
            elif self.path in state.routes:
                self._send(*state.routes[self.path])
            else:
                self._send(404, "application/json", b'{"detail":"Not Found"}')

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    state.port = srv.server_address[1]
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield state
    srv.shutdown()
    srv.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_health_ladder(server: FakeServer) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert await probe_health(f"http://127.0.0.1:{closed_port()}") == "refused"
    server.health = 503
    assert await probe_health(base) == "503"
    server.health = 200
    assert await probe_health(base) == "200"
    server.health_delay = 1.5  # a healthy /health takes >= 1 s: still a 200 with the default timeout
    assert await probe_health(base) == "200"
    assert await probe_health(base, timeout=0.3) == "timeout"


async def test_ready_and_version_choice(server: FakeServer) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert await probe_ready(base) == "404"
    server.ready, server.health = 503, 200
    assert readiness_path("0.5.23") == "/ready" and readiness_path("0.5.9") == "/health"
    assert readiness_path(None) == "/health" and readiness_path("0.6.0") == "/ready"
    assert await probe_status(base, readiness_path("0.5.23")) == "503"
    assert await probe_status(base, readiness_path("0.5.9")) == "200"
    assert should_probe_readiness(0) and not should_probe_readiness(1)


async def test_server_info_and_fallback(server: FakeServer) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert await server_info(base) is None
    server.routes["/get_server_info"] = (200, "application/json", json.dumps({"version": "0.5.9"}).encode())
    assert await server_info(base) == {"version": "0.5.9"}
    server.routes["/server_info"] = (200, "application/json", json.dumps({"version": "0.5.23"}).encode())
    assert (await server_info(base) or {})["version"] == "0.5.23"
    server.routes["/server_info"] = (200, "text/html", b"<html>")
    assert await server_info(base) is None
    assert await server_info(f"http://127.0.0.1:{closed_port()}") is None


async def test_metrics(server: FakeServer) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert await metrics(base, SGLANG.metrics.path(), SGLANG.metrics.prefix()) is None  # --enable-metrics off: 404
    server.routes["/metrics"] = (200, "text/plain; version=0.0.4", METRICS.encode())
    m = await metrics(base, SGLANG.metrics.path(), SGLANG.metrics.prefix())
    assert m is not None
    assert m["sglang:token_usage"] == 0.45  # the worst rank
    assert m["sglang:num_running_reqs"] == 7.0  # summed over ranks
    assert m["sglang:gen_throughput"] == 2874.5
    assert m["sglang:startup_available_gpu_memory_gb"] == 5.49  # the worst rank: least free
    assert m["sglang:prompt_tokens_total"] == 12345.0
    assert not any(k.startswith("python_") for k in m)
    assert not any("_bucket" in k for k in m)


def test_parse_metrics_survives_garbage() -> None:
    m = parse_metrics("garbage line\n" + METRICS.splitlines()[2] + "\n", SGLANG.metrics.prefix())
    assert m == {"sglang:token_usage": 0.31} or m == {}


async def test_probes_through_ssh_forward(ssh_env: SshHome, server: FakeServer) -> None:
    async with SSHTransport("gpu-box-1") as t:
        port = await t.forward_port(server.port)
        assert await probe_health(f"http://127.0.0.1:{port}") == "200"
        server.health = 503
        assert await probe_health(f"http://127.0.0.1:{port}") == "503"
        # Nothing listens on the remote port: through the tunnel this reads as refused too.
        dead = await t.forward_port(closed_port())
        assert await probe_health(f"http://127.0.0.1:{dead}") == "refused"
