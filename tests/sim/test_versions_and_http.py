"""SGLang 0.5.23's log formats and endpoints, the readiness ladder, and the other model presets."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time

import pytest

from cockpit.backends.sglang.logparse import read_log

from .conftest import KIMI, assert_lines_intact

pytestmark = pytest.mark.timeout(60)


def status_of(port: int, path: str, method: str = "GET", timeout: float = 10.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path)
    r = conn.getresponse()
    r.read()
    return r.status


def test_0523_log_formats_and_ready_endpoint(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-version", "0.5.23", "--enable-metrics"])
    run.wait_for("The server is fired up and ready to roll!")
    text = run.text()
    first = text.splitlines()[0]
    assert re.match(r"\[[\d-]+ [\d:]+\] server_args=\{'model_path': '/models/Kimi-K2\.5', ", first)
    for rank in range(8):
        assert f"TP{rank}] Init parallel begin." in text
        assert re.search(rf"TP{rank}\] Init parallel ends\. elapsed=[\d.]+ s\n", text)
        assert re.search(rf"TP{rank}\] Memory baseline taken\. mem usage=[\d.]+ GB\n", text)
    assert "Init torch distributed" not in text
    assert re.search(r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, KV size: [\d.]+ GB", text)
    assert re.search(r"Load weight end\. elapsed=[\d.]+ s, type=DeepseekV3ForCausalLM, avail mem=", text)
    prefill = text.index("TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 12,")
    decode = text.index("TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=")
    assert prefill < decode
    assert re.search(r"Capture target decode CUDA graph end\. bs=\[1, 2, 4, .*512\], elapsed=[\d.]+ s, mem usage=3\.75 GB, avail mem=", text)
    assert re.search(r"Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0\.00, #running-req: 0, "
                     r"#queue-req: 0, #pending-token: 0, cuda graph: True, input throughput \(token/s\): 0\.00", text)

    assert status_of(run.port, "/ready") == 200
    assert status_of(run.port, "/ping") == 200
    info = json.loads(_get(run.port, "/server_info"))
    assert info["version"] == "0.5.23"
    mem = info["internal_states"][0]["memory_usage"]
    assert set(mem["graph"]) == {"prefill", "decode"} and mem["startup_available"] < mem["kvcache"] + 5
    metrics = _get(run.port, "/metrics").decode()
    assert "sglang:startup_available_gpu_memory_gb{" in metrics and 'phase="decode"' in metrics

    assert_lines_intact(run.text())
    state = read_log(run.log_path)
    assert state.format == "sglang-0.5.23" and state.phase == "ready"
    assert len(state.ranks) == 8
    tp3 = state.ranks["TP3"]
    assert tp3.pre_load_avail_gb == pytest.approx(94.6, abs=0.01)
    assert tp3.graph_gb is not None and tp3.graph_gb > 3.75  # prefill + decode graphs
    assert state.server_args["mem_fraction_static"] == 0.88


def test_0523_prefill_oom(sim) -> None:
    # 0.5.23 also captures prefill graphs, so the same crash needs a slightly lower mfs than 0.93
    run = sim([*KIMI, "--mem-fraction-static", "0.915", "--sim-version", "0.5.23", "--sim-traffic", "steady"],
              speed=100)
    assert run.wait_exit(30) == -9
    text = run.text()
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in text
    assert "kill_process_tree called: parent_pid=" in text
    state = read_log(run.log_path)
    assert state.crash is not None
    assert (state.crash.kind, state.crash.phase, state.crash.rank) == ("cuda_oom", "prefill", "TP3")


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    return conn.getresponse().read()


def test_readiness_ladder_0_5_9(sim) -> None:
    """Connection refused while loading, 503 during warmup, 200 once up; no /ready before 0.5.23."""
    run = sim([*KIMI, "--mem-fraction-static", "0.88"], speed=100)
    refused = 0
    codes = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", run.port), timeout=0.2):
                pass
        except OSError:
            refused += 1
            time.sleep(0.02)
            continue
        codes.append(status_of(run.port, "/health"))
        if codes[-1] == 200:
            break
    assert refused > 0
    assert codes[0] == 503 and codes[-1] == 200
    text = run.text()
    assert re.search(r'INFO:     127\.0\.0\.1:\d+ - "GET /health HTTP/1\.1" 503 Service Unavailable', text)
    assert re.search(r'INFO:     127\.0\.0\.1:\d+ - "GET /health HTTP/1\.1" 200 OK', text)
    assert status_of(run.port, "/ready") == 404
    assert status_of(run.port, "/metrics") == 404  # no --enable-metrics
    assert status_of(run.port, "/model_info") == 200
    assert json.loads(_get(run.port, "/v1/models"))["data"][0]["id"] == "/models/Kimi-K2.5"


@pytest.mark.parametrize(
    ("args", "model", "rank", "weights"),
    [
        (["--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp", "8", "--sim-gpu", "h100"], "llama-3.1-70b", "TP0", 16.49),
        (["--model-path", "Qwen/Qwen3-235B-A22B-FP8", "--tp", "4", "--sim-gpu", "h200"], "qwen3-235b-fp8", "TP0", 59.2),
        (["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--sim-gpu", "h100"], "llama-3.1-8b", "TP0", 14.96),
    ],
)
def test_model_presets_start_up(sim, args: list[str], model: str, rank: str, weights: float) -> None:
    run = sim([*args, "--sim-model", model])
    run.wait_for("The server is fired up and ready to roll!")
    state = read_log(run.log_path)
    assert state.phase == "ready"
    r = state.ranks[rank]
    assert r.weights_gb == pytest.approx(weights, abs=0.01)
    # the KV pool follows SGLang's formula from the numbers the log printed
    p = state.min_pre_load_avail_gb
    assert p is not None and r.kv_gb is not None
    mfs = state.server_args["mem_fraction_static"]
    assert r.kv_gb == pytest.approx(p * mfs - weights, abs=0.05)
    if model == "llama-3.1-70b":
        assert mfs == 0.818  # SGLang's default on H100 TP8
        assert state.ranks["TP0"].pre_load_avail_gb == pytest.approx(78.21, abs=0.02)  # the reference log's P
        assert r.kv_tokens == pytest.approx(1244811, rel=0.002)
    if model == "llama-3.1-8b":
        assert "TP0]" not in run.text()  # a single GPU prints no rank prefix


def test_second_node_runs_its_ranks_and_a_dummy_health(sim) -> None:
    run = sim(["--model-path", "/models/Kimi-K2.5", "--tp", "16", "--nnodes", "2", "--node-rank", "1",
               "--dist-init-addr", "10.0.0.1:5000", "--mem-fraction-static", "0.88"])
    run.wait_for(r"TP15\] max_total_num_tokens=|TP8\] Capture cuda graph end", timeout=20)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if status_of(run.port, "/health") == 200:
                break
        except OSError:
            time.sleep(0.05)
    assert status_of(run.port, "/health") == 200
    assert status_of(run.port, "/generate", method="GET") == 404
    text = run.text()
    assert "TP8] Init torch distributed begin." in text and "TP15]" in text and " TP0]" not in text
    assert "fired up" not in text
    assert len(run.children()) == 8


def test_bad_requests_do_not_disturb_the_server(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88"])
    run.wait_for("The server is fired up and ready to roll!")
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=10)
    conn.request("POST", "/generate", body=b"{not json", headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["meta_info"]["completion_tokens"] == 128
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"messages": "oops", "max_tokens": "many"}))
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 128
    # a client that hangs up mid-request
    with socket.create_connection(("127.0.0.1", run.port)) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
    assert status_of(run.port, "/nope") == 404
    assert status_of(run.port, "/health") == 200
    assert "Traceback" not in run.text()


def test_plain_data_parallel_prefixes(sim) -> None:
    run = sim(["--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp", "4", "--dp", "2", "--sim-gpu", "h100",
               "--mem-fraction-static", "0.85", "--sim-traffic", "steady"])
    run.wait_for("The server is fired up and ready to roll!")
    run.wait_for(r"\[[^\]]* DP0 TP0\] Decode batch")
    text = run.text()
    assert "DP1 TP3] Capture cuda graph end." in text and len(run.children()) == 8
    state = read_log(run.log_path)
    assert state.phase == "ready" and len(state.ranks) == 8
