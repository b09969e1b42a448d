"""The story on the simulator: Kimi-K2.5 on 8 x RTX PRO 6000, TP8, at mfs 0.93 (crash) and 0.88 (fine).

Real processes: the sim's main process, eight rank processes, a real HTTP port, the real log
parser of the backend reading the log the sim wrote.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import time
from datetime import datetime
from pathlib import Path

import pytest

from cockpit.backends.sglang.logparse import read_log
from cockpit.sim import gpus

from .conftest import KIMI, assert_lines_intact

pytestmark = pytest.mark.timeout(60)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def get(port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def post(port: int, path: str, body: dict, timeout: float = 30.0) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")


def ts(line: str) -> datetime:
    return datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")


def test_mfs_093_crashes_in_prefill_on_tp3(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.93", "--sim-traffic", "steady"], speed=50)
    run.wait_for(r"TP\d\] Load weight begin")
    assert not port_open(run.port), "the port must stay closed while the model loads"
    # the process tree: main + one child per rank, all in the main process's group
    kids = run.children()
    assert len(kids) == 8
    assert {os.getpgid(k) for k in kids} == {os.getpgid(run.pid)}
    run.wait_for(r"The server is fired up and ready to roll!")
    text = run.text()
    ends = re.findall(r"\[[^\]]* (TP\d)\] Capture cuda graph end\. .*avail mem=([\d.]+) GB\.", text)
    assert len(ends) == 8
    after = {rank: float(v) for rank, v in ends}
    assert after["TP3"] == pytest.approx(0.82, abs=0.03)
    assert min(after, key=lambda r: after[r]) == "TP3"
    assert all(v < 1.0 for v in after.values())

    code = run.wait_exit(timeout=30)
    assert code == -signal.SIGKILL  # the main process SIGKILLed itself: a shell reports 137
    text = run.text()
    assert re.search(r"\[[^\]]* TP3\] Scheduler hit an exception: Traceback \(most recent call last\):", text)
    assert "in forward_extend" in text
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " in text
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in text
    ready = next(line for line in text.splitlines() if "fired up" in line)
    crash = next(line for line in text.splitlines() if "Scheduler hit an exception" in line)
    # at --sim-speed 50 "within a minute of readiness" (at speed 20) is well under 24 s
    assert (ts(crash) - ts(ready)).total_seconds() <= 24

    assert_lines_intact(text)
    state = read_log(run.log_path)
    assert state.phase == "crashed"
    assert state.crash is not None
    assert (state.crash.kind, state.crash.phase, state.crash.rank) == ("cuda_oom", "prefill", "TP3")
    assert state.ranks["TP3"].pre_load_avail_gb == pytest.approx(94.6, abs=0.01)
    assert state.ranks["TP3"].weights_gb == pytest.approx(71.82, abs=0.01)
    assert state.ranks["TP3"].avail_before_capture_gb == pytest.approx(6.62, abs=0.03)
    # every process is gone; their GPU files stay behind with dead pids, which readers ignore
    time.sleep(0.2)
    assert run.children() == []
    assert len(run.proc_files()) == 8
    assert gpus.read_procs(run.gpu_dir) == []


def test_mfs_088_serves_steady_traffic(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-traffic", "steady", "--enable-metrics"], speed=100)
    run.wait_for(r"Uvicorn running on")
    run.wait_for(r"The server is fired up and ready to roll!")
    t0 = time.monotonic()
    status, _ = get(run.port, "/health")
    assert status == 200
    assert time.monotonic() - t0 >= 0.01  # /health is never instant (1 s / speed)
    status, body = post(run.port, "/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 16}})
    assert status == 200 and body["meta_info"]["completion_tokens"] == 16 and body["text"]
    status, body = post(run.port, "/v1/chat/completions",
                        {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    assert status == 200 and body["choices"][0]["message"]["content"] and body["usage"]["completion_tokens"] == 5
    # 400 simulated seconds: past the first long document (at 240 s) that kills the 0.93 run
    run.wait_for(r"Prefill batch, #new-seq: \d+, #new-token: 8192,", timeout=15)
    time.sleep(1.0)
    assert run.proc.poll() is None
    status, metrics = get(run.port, "/metrics")
    assert status == 200
    from prometheus_client.parser import text_string_to_metric_families

    names = {f.name for f in text_string_to_metric_families(metrics.decode())}
    assert {"sglang:token_usage", "sglang:gen_throughput", "sglang:num_running_reqs", "sglang:prompt_tokens"} <= names
    status, info = get(run.port, "/server_info")
    info = json.loads(info)
    assert info["mem_fraction_static"] == 0.88 and info["internal_states"][0]["memory_usage"]["weight"] == 71.82

    text = run.text()
    assert "Scheduler hit an exception" not in text
    assert_lines_intact(text)
    state = read_log(run.log_path)
    assert state.phase == "ready"
    tp3 = state.ranks["TP3"]
    assert tp3.avail_after_capture_gb == pytest.approx(5.55, abs=0.05)
    assert tp3.graph_gb == pytest.approx(3.75, abs=0.01)
    assert state.max_total_num_tokens and 170000 < state.max_total_num_tokens < 180000
    tps = [float(v) for v in re.findall(r"gen throughput \(token/s\): ([\d.]+)", text)]
    assert len(tps) > 10 and max(tps) > 500

    # the simulated GPUs: one live file per rank, each on its own GPU, memory as the log says
    procs = gpus.read_procs(run.gpu_dir)
    assert sorted(p["gpu_index"] for p in procs) == list(range(8))
    assert set(run.children()) == {p["pid"] for p in procs}
    free3 = gpus.free_gib(run.gpu_dir, 3, 97887)
    assert 2.0 < free3 <= 5.56  # headroom after capture, minus the prefill activations kept cached

    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_exit(10) == 0
    assert run.proc_files() == []
    assert run.children() == []


def test_foreign_process_lowers_that_ranks_p(sim, tmp_path) -> None:
    gdir = tmp_path / "gpus"
    gdir.mkdir()
    # a "foreign" process holding 4 GiB on GPU 5: our own pid is a live one
    (gdir / f"proc-{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "gpu_index": 5, "used_mib": 4096.0, "updated": time.time()}))
    # and a leftover from a dead run, which must be ignored
    (gdir / "proc-999999.json").write_text(json.dumps({"pid": 999999, "gpu_index": 2, "used_mib": 50000.0, "updated": 0}))
    run = sim([*KIMI, "--mem-fraction-static", "0.88"], speed=200, gpu_dir=gdir)
    run.wait_for(r"max_total_num_tokens=")
    state = read_log(run.log_path)
    assert state.ranks["TP5"].pre_load_avail_gb == pytest.approx(94.68 - 4.0, abs=0.02)
    assert state.ranks["TP2"].pre_load_avail_gb == pytest.approx(94.67, abs=0.02)
    # the KV pool is sized from the minimum over ranks, so every rank's pool shrinks: (A − P·(1 − mfs)) / cell
    # with TP5's P = 90.68 instead of TP3's 94.60 (174,617 tokens without the foreign process)
    shrunk = ((90.68 - 71.82) - 90.68 * (1 - 0.88)) * 2**30 / ((512 + 64) * 61 * 2)
    assert state.max_total_num_tokens == pytest.approx(shrunk, rel=0.005)


def test_idle_ranks_do_not_spin(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88"], speed=200)
    run.wait_for(r"The server is fired up and ready to roll!")
    time.sleep(0.5)

    def cpu() -> float:
        total = 0
        for pid in [run.pid, *run.children()]:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    before = cpu()
    time.sleep(2.0)
    used = cpu() - before
    assert used < 0.4, f"9 idle processes used {used:.2f} s of CPU in 2 s"


def test_telemetry_agent_sees_the_simulated_gpus(sim) -> None:
    """The agent's "sim" source reads the run as it would read NVML: per-GPU and per-process memory."""
    import subprocess
    import sys

    from cockpit.telemetry.client import agent_source

    def sample() -> dict:
        out = subprocess.run([sys.executable, "-", "--once", "--sim-dir", str(run.gpu_dir), "--source", "sim"],
                             input=agent_source(), capture_output=True, timeout=30, check=True)
        return json.loads(out.stdout.decode().splitlines()[-1])

    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-traffic", "steady"], speed=100)
    run.wait_for("The server is fired up and ready to roll!")
    run.wait_for(r"Decode batch, #running-req: [1-9]")
    s = sample()
    assert s["source"] == "sim" and len(s["gpus"]) == 8
    g3 = next(g for g in s["gpus"] if g["index"] == 3)
    assert g3["mem_total_mib"] == 97887
    # used = total − free after capture (5.55 GiB), plus the prefill activations kept cached
    assert 97887 - 5.56 * 1024 <= g3["mem_used_mib"] <= 97887 - 2.0 * 1024
    assert g3["util_pct"] is not None and g3["util_pct"] > 50  # busy serving the steady traffic
    assert {p["pid"] for p in s["procs"]} == set(run.children())
    run.proc.send_signal(signal.SIGTERM)
    run.wait_exit(10)
    s = sample()
    assert all(g["mem_used_mib"] == 0 for g in s["gpus"]) and s["procs"] == []


def test_concurrent_clients_during_steady_traffic(sim) -> None:
    """Real clients while the built-in traffic runs: every request is answered (no lost messages)."""
    import threading

    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-traffic", "steady"], speed=100)
    run.wait_for("The server is fired up and ready to roll!")
    failures: list[str] = []

    def client(n: int) -> None:
        for k in range(12):
            try:
                status, body = post(run.port, "/generate", {"text": "x " * (10 + k), "sampling_params": {"max_new_tokens": 8 + n}},
                                    timeout=15)
                if status != 200 or body["meta_info"]["completion_tokens"] != 8 + n:
                    failures.append(f"{n}/{k}: {status} {body}")
            except OSError as exc:
                failures.append(f"{n}/{k}: {exc!r}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
