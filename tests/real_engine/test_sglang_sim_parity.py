"""The simulator reconciled with the REAL SGLang (issue 34, item 4).

One scenario, run once on each: SGLang 0.5.23's CPU engine on the tiny Llama and `cockpit sim
--sim-version 0.5.23` with the same flags, each asked one request, its /health, /get_server_info and
/metrics read, then its scheduler SIGKILLed. What Cockpit reads of them must agree: the start-up
lines' shapes, the facts Cockpit's parser takes from the log, /health, the /get_server_info keys the
simulator serves, the `sglang:` series, the crash ending and the exit. A difference either is fixed
in the simulator or is in DIFFERENCES below and in docs/SIMULATOR.md ("Against the real engine"),
with why it stays. The real engine runs under the machine-wide engine lock, once for the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.sglang.logparse import SGLangLogParser
from cockpit.backends.sglang.metricnames import SERVING_METRICS
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.state import RunState
from tests.conftest import free_port
from tests.real_engine.conftest import RealSglang
from tests.real_engine.lifecycle_kit import READY_TIMEOUT_S, module_engine_lock

pytestmark = pytest.mark.timeout(1500)  # waits for the machine-wide engine lock, then ~1–3 min

# the scenario, identical on both (the context length given: the simulator does not read config.json)
FLAGS = ["--host", "127.0.0.1", "--enable-metrics", "--mem-fraction-static", "0.5", "--max-total-tokens", "4096",
         "--context-length", "2048", "--device", "cpu"]
READY = "The server is fired up and ready to roll!"

# Start-up lines Cockpit reads: (name, the text that finds it).
STARTUP = (
    ("weights_begin", "Load weight begin."),
    ("weights_end", "Load weight end."),
    ("kv_pool", "KV Cache is allocated."),
    ("pool_end", "Memory pool end."),
    ("pool_size", "max_total_num_tokens="),
    ("ready", READY),
)
# The launcher's lines after a scheduler's SIGKILL (0.5.23: srt/utils/watchdog.py, tokenizer_manager.py
# running_phase_sigquit_handler + dump_requests_before_crash, utils/common.py kill_process_tree).
ENDING = (
    "Subprocess scheduler_N (pid=N) crashed with exit code -N. Triggering SIGQUIT for cleanup...",
    "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    "Sleeping N seconds before crash diagnostics to let GPU activity settle.",
    "No live scheduler processes found; skipping py-spy and CUDA coredump.",
    "kill_process_tree called: parent_pid=N, include_parent=True, pid=N",
)

# What differs and stays (docs/SIMULATOR.md, "Against the real engine", says why):
DIFFERENCES = {
    # the simulator models a GPU server; the real engine here is SGLang's CPU engine
    "device_words": {"available_cpu_mem=": "available_gpu_mem="},
    # lines only the GPU server prints (the CPU engine captures no graphs)
    "sim_only_line_starts": ("Capture target prefill CUDA graph", "Capture target decode CUDA graph"),
}


@dataclass
class Served:
    log: str  # everything the server wrote, start to exit
    mark: int  # where the log stood when the scheduler was killed
    health: int
    info: dict[str, Any]
    metrics: str
    exit_code: int | None

    def ending(self) -> list[str]:
        return [shape(ln) for ln in self.log[self.mark:].splitlines() if ln.strip()]


def shape(line: str) -> str:
    """A line as Cockpit matches it: no timestamp or rank prefix, numbers as N, dtypes as one word,
    the device's words as the simulator's."""
    text = re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z]+\d+)*\] ", "", line.strip())
    for real, sim in DIFFERENCES["device_words"].items():
        text = text.replace(real, sim)
    text = re.sub(r"torch\.\w+", "torch.DTYPE", text)
    # the CPU engine's `mem usage` is the host's available memory before minus after: other processes
    # on the host freeing memory meanwhile make it negative (seen: `mem usage=-0.01 GB`)
    return re.sub(r"-?\d+(?:\.\d+)?", "N", text).replace("exit code N", "exit code -N")


def _get(port: int, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _scheduler_pids(server: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        comm, rest = stat[stat.find("(") + 1: stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        if int(rest[1]) == server and (comm.startswith("sglang::schedul") or cmd.startswith("sglang::scheduler")):
            out.append(int(d))
    return out


def serve_and_kill(argv: list[str], env: dict[str, str], log_path: Path, port: int) -> Served:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while READY not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, f"{argv[:3]} ended before ready:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200
        health = _get(port, "/health")[0]
        info = json.loads(_get(port, "/get_server_info")[1])
        metrics = _get(port, "/metrics")[1].decode()
        time.sleep(1.0)  # the request's own lines are written before the mark
        mark = len(log_path.read_text(errors="replace"))
        scheds = _scheduler_pids(proc.pid)
        assert len(scheds) == 1, scheds
        os.kill(scheds[0], signal.SIGKILL)
        code = proc.wait(120)
        # kept beside the log for whoever reads a failure
        log_path.with_suffix(".info.json").write_text(json.dumps(info, indent=1, default=str))
        log_path.with_suffix(".metrics.txt").write_text(metrics)
        return Served(log_path.read_text(errors="replace"), mark, health, info, metrics, code)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.fixture(scope="module")
def both(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served]]:
    tmp = tmp_path_factory.mktemp("parity")
    port = free_port()
    with module_engine_lock(real_sglang):  # type: ignore[arg-type]
        real = serve_and_kill(
            [str(real_sglang.python), "-m", "sglang.launch_server", "--model-path", str(real_sglang.tiny),
             "--port", str(port), *FLAGS],
            {**os.environ, **real_sglang.env()}, tmp / "real.log", port)
    port = free_port()
    sim = serve_and_kill(
        [sys.executable, "-m", "cockpit", "sim", "--sim-version", "0.5.23", "--sim-model", "llama-3.1-8b",
         "--sim-speed", "20", "--sim-dir", str(tmp / "gpus"), "--model-path", str(real_sglang.tiny),
         "--port", str(port), *FLAGS],
        {**os.environ, "COCKPIT_SIM_GPU_DIR": str(tmp / "gpus")}, tmp / "sim.log", port)
    yield real, sim


def _first(log: str, text: str) -> str | None:
    return next((shape(ln) for ln in log.splitlines() if text in ln), None)


def test_start_up_lines_have_the_same_shape(both: tuple[Served, Served]) -> None:
    real, sim = both
    differ = {name: (_first(real.log, text), _first(sim.log, text)) for name, text in STARTUP}
    differ = {k: v for k, v in differ.items() if v[0] != v[1]}
    assert differ == {}, "start-up lines differ (real, simulator):\n" + json.dumps(differ, indent=1)
    sim_only = {shape(ln)[:60] for ln in sim.log[:sim.mark].splitlines()
                if ln.startswith("[") and READY not in ln and "Capture" in ln}
    assert all(any(s.startswith(p) for p in DIFFERENCES["sim_only_line_starts"]) for s in sim_only), sim_only


def _state(log: str) -> RunState:
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(log.encode()) + p.finish():
        apply(st, e)
    end_of_input(st)
    return st


def test_cockpit_reads_the_same_facts_from_both_logs(both: tuple[Served, Served]) -> None:
    real, sim = both
    a, b = _state(real.log[:real.mark]), _state(sim.log[:sim.mark])
    for st in (a, b):
        assert st.format == "sglang-0.5.23" and st.ready_in_log and st.max_total_num_tokens == 4096, st.format
        assert st.context_len == 2048 and list(st.ranks) == ["TP0"]
    known = ("pre_load_avail_gb", "weights_gb", "after_weights_avail_gb", "kv_tokens", "kv_gb", "avail_before_capture_gb")
    ra, rb = a.ranks["TP0"], b.ranks["TP0"]
    if "mem usage=-" in real.log[:real.mark]:
        known = tuple(k for k in known if k != "weights_gb")  # a negative host figure is not a weight size
    assert {k: getattr(ra, k) is not None for k in known} == {k: getattr(rb, k) is not None for k in known}
    assert ra.kv_tokens == rb.kv_tokens == 4096
    assert a.available_gpu_mem_gb is not None and b.available_gpu_mem_gb is not None


def _families(text: str) -> set[str]:
    names = {m.group(1) for m in re.finditer(r"^(sglang:\w+?)(?:_bucket|_count|_sum|_total|_created)?[{ ]", text, re.M)}
    return names


def test_health_server_info_and_series(both: tuple[Served, Served]) -> None:
    """Every difference at once (one real run is minutes under the engine lock)."""
    real, sim = both
    problems = []
    if not real.health == sim.health == 200:
        problems.append(f"/health: real {real.health}, simulator {sim.health}")
    if extra := sorted(set(sim.info) - set(real.info)):
        problems.append(f"/get_server_info keys the simulator invents: {extra}")
    for key in ("internal_states", "version", "max_total_tokens", "tp_size", "mem_fraction_static"):
        if key not in real.info or key not in sim.info:
            problems.append(f"/get_server_info key {key}: real {key in real.info}, simulator {key in sim.info}")
    rs, ss = real.info["internal_states"][0], sim.info["internal_states"][0]
    if extra := sorted(set(ss) - set(rs)):
        problems.append(f"internal_states[0] keys the simulator invents: {extra}")
    if extra := sorted(set(ss.get("memory_usage") or {}) - set(rs.get("memory_usage") or {})):
        problems.append(f"internal_states[0].memory_usage keys the simulator invents: {extra}")
    if extra := sorted(_families(sim.metrics) - _families(real.metrics)):
        problems.append(f"series the simulator exports and SGLang does not: {extra}")
    read = {f"sglang:{n.removesuffix('_total')}" for names in SERVING_METRICS.values() for n in names}
    if gone := sorted(n for n in read & _families(real.metrics) if n not in _families(sim.metrics)):
        problems.append(f"series Cockpit reads that SGLang exports and the simulator does not: {gone}")
    assert problems == [], "\n".join(problems)


def test_a_killed_scheduler_ends_the_same_way(both: tuple[Served, Served]) -> None:
    real, sim = both
    assert real.exit_code == sim.exit_code == -signal.SIGKILL, (real.exit_code, sim.exit_code)
    for served in (real, sim):
        got = [ln for ln in served.ending() if any(ln == e for e in ENDING)]
        assert got == list(ENDING), served.ending()
    # and Cockpit names both endings alike: the signal, not an OOM
    for served in (real, sim):
        st = _state(served.log)
        assert st.crash is not None and st.crash.kind == "killed_by_signal", st.crash
