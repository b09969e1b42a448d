"""Cockpit's footprint on a server (issue 39 item 1): its own requests are marked, never shown in
the log pane nor by `cockpit logs`, /metrics backs off on an idle server, /health is not sent while
/metrics answers, and the hang probe never goes to an idle server. The per-minute figures are
bench/footprint.py's (docs/PERFORMANCE.md)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.ownlines import OWN_QUERY, USER_AGENT, is_own_line, own_path
from cockpit.core.profile import load_profile
from cockpit.supervisor.nodelog import NodeLog
from cockpit.supervisor.servingwatch import IDLE_SAMPLE_INTERVAL_S, SAMPLE_INTERVAL_S, next_interval
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.watch import ReadinessProbe
from tests.conftest import free_port

PY = sys.executable
ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/1\.1" \d{3}')


def test_the_marker_and_what_it_hides() -> None:
    assert own_path("/metrics") == "/metrics?by=cockpit" and own_path("/x?a=1") == "/x?a=1&by=cockpit"
    assert OWN_QUERY in own_path("/health") and USER_AGENT.startswith("cockpit-monitor")
    assert is_own_line('INFO:     127.0.0.1:52576 - "GET /metrics?by=cockpit HTTP/1.1" 200 OK')
    assert is_own_line('[2026-02-24 11:57:43] INFO:     127.0.0.1:1 - "GET /ready?by=cockpit HTTP/1.1" 200 OK')
    # anyone else's request is the server's news, even from 127.0.0.1
    assert not is_own_line('INFO:     127.0.0.1:52576 - "GET /metrics HTTP/1.1" 200 OK')
    assert not is_own_line('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK')
    assert not is_own_line("a log line that mentions by=cockpit in prose")


def test_the_log_reader_leaves_own_lines_out_and_keeps_the_files_numbering() -> None:
    text = (b'INFO:     Application startup complete.\n'
            b'INFO:     127.0.0.1:1 - "GET /health?by=cockpit HTTP/1.1" 200 OK\n'
            b'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 200 OK\n'
            b'INFO:     127.0.0.1:3 - "GET /metrics?by=cockpit HTTP/1.1" 200 OK\n'
            b'INFO 12-01 14:48:54 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s\n')
    for raw in (False, True):  # the pane's reading and `cockpit logs` into a pipe
        nl = NodeLog(get_backend("vllm"), "local", parse=False, raw=raw)
        _ev, lines = nl.feed_lines(text)
        assert [ln.number for ln in lines] == [1, 3, 5] and nl.own_lines == 2
        assert not any("by=cockpit" in ln.text for ln in lines)


def test_metrics_back_off_on_an_idle_server_and_return_to_full_rate() -> None:
    pauses = [SAMPLE_INTERVAL_S]
    for _ in range(8):
        pauses.append(next_interval(pauses[-1], busy=False))
    assert pauses[:5] == [2.0, 4.0, 8.0, 16.0, 30.0] and pauses[-1] == IDLE_SAMPLE_INTERVAL_S == 30.0
    assert next_interval(30.0, busy=True) == SAMPLE_INTERVAL_S


def test_a_recent_metrics_answer_vouches_for_a_ready_server_only() -> None:
    probe = ReadinessProbe(lambda: None)
    assert not probe.vouched(100.0, 100.0)  # /health never said 200 for this run: READY needs it
    probe.health = "200"
    assert probe.vouched(100.0, 120.0) and not probe.vouched(100.0, 200.0) and not probe.vouched(None, 1.0)


def _vllm_sim_profile(tmp_path: Path, sim_dir: Path) -> Path:
    program = [PY, "-m", "cockpit", "sim", "--sim-backend", "vllm", "--sim-gpu", "h100", "--sim-speed", "20",
               "--sim-startup-speed", "200", "--sim-traffic", "none", "--sim-dir", str(sim_dir), "serve"]
    p = tmp_path / "fp.yaml"
    p.write_text("name: fp\nbackend: vllm\nversion: 0.33.0\nhosts:\n  - ssh: local\n"
                 f"program: {json.dumps(program)}\nworkdir: {tmp_path / 'work'}\nlog: logs/vllm.log\n"
                 f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
                 "server:\n  model: Qwen/Qwen3-32B\n  tensor-parallel-size: 2\n  max-model-len: 32768\n"
                 f"  port: {free_port()}\n")
    return p


async def test_an_idle_simulated_server_sees_only_marked_metrics_reads_and_none_is_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    for name, value in {"COCKPIT_RUNS_ROOT": "runs", "COCKPIT_SIM_GPU_DIR": "gpus", "XDG_DATA_HOME": "data"}.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    path = _vllm_sim_profile(tmp_path, sim_dir)
    shown: list[str] = []
    own_counted = [0]

    def on_logs(batch: object) -> None:
        shown.extend(ln.text for ln in batch.lines)  # type: ignore[attr-defined]
        own_counted[0] += batch.own  # type: ignore[attr-defined]

    sup = Supervisor(load_profile(path), on_logs=on_logs)
    info = await sup.launch()
    runner = asyncio.create_task(sup.run())
    try:
        assert await sup.wait_until(lambda s: s.is_ready(), 90), sup.snapshot().state.phase
        await asyncio.sleep(20)  # busy for 10 s after READY, then backing off: 2, 4, 8 s…
        assert sup.serving.interval > SAMPLE_INTERVAL_S  # idle: backing off
        sup.serving.watching = True  # the operator tabs to the Throughput panel: full rate again
        await asyncio.sleep(3)
        assert sup.serving.interval == SAMPLE_INTERVAL_S
    finally:
        await sup.stop(timeout=10)
        await sup.close()
        await runner
    log_text = Path(info.log_path).read_text()
    access = [(m[1], m[2]) for m in ACCESS.finditer(log_text)]
    assert access, log_text[-2000:]
    # nobody else talks to this server: every access line is Cockpit's, and each carries its marker
    assert all("by=cockpit" in target for _m, target in access), access
    assert not any(target.startswith("/v1/completions") for _m, target in access)  # no probe: idle
    ready_at = next(i for i, (_m, t) in enumerate(access) if t.startswith("/health"))
    after_ready = [t.split("?")[0] for _m, t in access[ready_at + 1:]]
    assert after_ready.count("/health") <= 1, after_ready  # /metrics vouches: one request, not two
    assert not any("by=cockpit" in t for t in shown)  # the pane's lines
    assert own_counted[0] >= len(access) - 1  # counted for the pane's title (the last may come after)
    # `cockpit logs` reads through the same reader: the same lines left out
    out = subprocess.run([PY, "-m", "cockpit", "logs", str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert "Application startup complete" in out.stdout and "by=cockpit" not in out.stdout
