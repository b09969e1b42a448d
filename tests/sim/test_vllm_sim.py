"""The vLLM simulator (`cockpit sim --sim-backend vllm serve MODEL …`): vLLM's lines, its HTTP
routes and the story — too-high --gpu-memory-utilization starts, dies in prefill under traffic;
Cockpit's advice; the relaunch holds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from cockpit.backends.vllm.diagnosis import diagnose
from cockpit.backends.vllm.logparse import read_log

QWEN = ["--sim-backend", "vllm", "--sim-gpu", "h100", "serve", "Qwen/Qwen3-32B", "-tp", "2"]


def _get(port: int, path: str, body: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_http_routes_and_readiness(sim) -> None:  # type: ignore[no-untyped-def]
    run = sim([*QWEN, "--gpu-memory-utilization", "0.92"], speed=40)
    run.wait_for(r"Capturing CUDA graphs", timeout=30)
    try:  # vLLM binds its port at once but listens only when start-up is over
        _get(run.port, "/health")
        raise AssertionError("the port answered before start-up was over")
    except urllib.error.URLError:
        pass
    run.wait_for(r"^INFO:     Application startup complete\.", timeout=30)
    assert _get(run.port, "/health") == (200, b"")
    assert json.loads(_get(run.port, "/version")[1]) == {"version": "0.33.0"}
    models = json.loads(_get(run.port, "/v1/models")[1])
    assert models["data"][0]["id"] == "Qwen/Qwen3-32B" and models["data"][0]["max_model_len"] == 32768
    code, body = _get(run.port, "/v1/completions", {"prompt": "hello vllm", "max_tokens": 4})
    out = json.loads(body)
    assert code == 200 and out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 4
    code, body = _get(run.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert code == 200 and json.loads(body)["choices"][0]["message"]["role"] == "assistant"
    metrics = _get(run.port, "/metrics")[1].decode()
    assert 'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-32B"}' in metrics
    assert "vllm:kv_cache_usage_perc{" in metrics and "vllm:prompt_tokens_total{" in metrics
    assert 'gpu_memory_utilization="0.92"' in metrics
    assert _get(run.port, "/nope")[0] == 404
    run.wait_for(r'^INFO:     127\.0\.0\.1:\d+ - "GET /health HTTP/1\.1" 200 OK', timeout=5)
    # each worker holds its GPU memory; each writes its own file as it allocates, and on a busy
    # machine the second worker's last write can trail the API server's first answers
    deadline = time.monotonic() + 20
    files = run.proc_files()
    while not (len(files) == 2 and all(f["used_mib"] > 60 * 1024 for f in files)) and time.monotonic() < deadline:
        time.sleep(0.2)
        files = run.proc_files()
    assert len(files) == 2 and all(f["used_mib"] > 60 * 1024 for f in files), files
    st = read_log(run.log_path)
    assert st.backend == "vllm" and st.format == "vllm-0.33.0" and st.phase == "ready"
    assert {r.rank for r in st.ranks.values()} == {"TP0", "TP1"}


def test_flags_refused_like_vllm() -> None:
    for bad, words in ((["--swap-space", "4"], "no longer has it"), (["--gpu-memory-utilisation", "0.9"], "unrecognized"),
                       (["--max-num-seqs", "many"], "invalid int value")):
        proc = subprocess.run([sys.executable, "-m", "cockpit", "sim", *QWEN, *bad], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_port_in_use(sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = sim([*QWEN, "--gpu-memory-utilization", "0.92"], speed=200)
    first.wait_for(r"Application startup complete", timeout=30)
    second = sim([*QWEN, "--gpu-memory-utilization", "0.92"], speed=200, port=first.port, gpu_dir=tmp_path / "g2")
    assert second.wait_exit(20) == 1
    st = read_log(second.log_path)
    assert st.crash is not None and st.crash.kind == "port_in_use"


def test_the_story(sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    crashed = sim([*QWEN, "--gpu-memory-utilization", "0.97", "--sim-traffic", "steady"], speed=200)
    assert crashed.wait_exit(60) == 1
    st = read_log(crashed.log_path)
    assert st.ready_in_log and st.crash is not None
    assert (st.crash.kind, st.crash.phase, st.crash.rank) == ("cuda_oom", "prefill", "TP1")
    (f,) = [f for f in diagnose(st) if f.id == "oom_crash"]
    (change,) = f.changes
    assert (change.flag, change.from_value, change.to_value) == ("--gpu-memory-utilization", 0.97, 0.95)
    assert f.predicted["headroom_gb"] >= 5.0
    pinned = next(a for a in f.alternatives if a.flag == "--kv-cache-memory-bytes")
    # the relaunch holds, with either change, for twice as long as the crash took
    for extra in (["--gpu-memory-utilization", "0.95"], ["--kv-cache-memory-bytes", str(pinned.to_value)]):
        held = sim([*QWEN, *extra, "--sim-traffic", "steady"], speed=200, gpu_dir=tmp_path / f"g{len(extra[1])}")
        held.wait_for(r"Application startup complete", timeout=30)
        time.sleep(4.0)  # > 600 simulated seconds: two long documents
        assert held.proc.poll() is None, held.text()[-2000:]
        st2 = read_log(held.log_path)
        assert st2.crash is None and st2.min_headroom_gb is not None and st2.min_headroom_gb >= 5.0
        assert [f.id for f in diagnose(st2) if f.severity == "critical"] == []
        assert "Engine 000: Avg prompt throughput" in held.text()


def test_016_format(sim) -> None:  # type: ignore[no-untyped-def]
    run = sim([*QWEN, "--gpu-memory-utilization", "0.9", "--sim-version", "0.16.0"], speed=200)
    run.wait_for(r"Application startup complete", timeout=30)
    text = run.text()
    assert "(EngineCore_DP0 pid=" in text and "Starting vLLM API server 0 on http://" in text
    assert f"(APIServer pid={run.pid}) INFO:     Application startup complete." in text
    st = read_log(run.log_path)
    assert st.format == "vllm-0.16.0" and st.phase == "ready"
    assert st.ranks["TP0"].weights_gb == 30.59 and st.ranks["TP0"].graph_gb == 0.86
    assert st.max_total_num_tokens and st.max_total_num_tokens > 300_000  # no graph estimate in 0.16's budget
    assert st.ranks["TP0"].avail_after_capture_gb is None  # 0.16 prints the per-rank summary at DEBUG only


def _sse(port: int, path: str, body: dict) -> tuple[str, list[tuple[float, str]]]:
    """A streamed answer over real HTTP: its Content-Type and each `data:` payload with the moment it arrived."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    events: list[tuple[float, str]] = []
    with urllib.request.urlopen(req, timeout=60) as r:
        ctype = r.headers["Content-Type"]
        for raw in r:  # urllib undoes the chunked transfer encoding
            line = raw.decode().rstrip("\r\n")
            if line.startswith("data: "):
                events.append((time.monotonic(), line[6:]))
    return ctype, events


def test_streaming_completions_as_vllm_sends_them(sim) -> None:  # type: ignore[no-untyped-def]
    """`stream: true` (what `cockpit bench` sends): one event per token as the engine makes it, the
    usage vLLM adds for `stream_options`, then `[DONE]`; the tokens are the non-streamed answer's."""
    run = sim([*QWEN, "--gpu-memory-utilization", "0.92"], speed=40)
    run.wait_for(r"^INFO:     Application startup complete\.", timeout=60)
    n = 700  # 20 simulated seconds of decode at 35 tok/s: 0.5 s real at speed 40
    whole = json.loads(_get(run.port, "/v1/completions", {"prompt": "hello vllm", "max_tokens": n})[1])
    ctype, events = _sse(run.port, "/v1/completions", {
        "prompt": "hello vllm", "max_tokens": n, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert ctype.startswith("text/event-stream")
    assert events[-1][1] == "[DONE]"
    *tokens, final = [json.loads(d) for _, d in events[:-1]]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == n
    assert len(tokens) == n and all(len(e["choices"]) == 1 and e["object"] == "text_completion" for e in tokens)
    assert [e["usage"]["completion_tokens"] for e in tokens] == list(range(1, n + 1))
    assert [e["choices"][0]["finish_reason"] for e in tokens] == [None] * (n - 1) + ["length"]
    assert "".join(e["choices"][0]["text"] for e in tokens) == whole["choices"][0]["text"]
    assert events[n - 1][0] - events[0][0] > 0.25  # streamed as produced, not all at the end

    # without stream_options: no usage anywhere (vLLM leaves it out), still one event per token
    _, plain = _sse(run.port, "/v1/completions", {"prompt": "hello vllm", "max_tokens": 5, "stream": True})
    assert plain[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in plain[:-1]]
    assert len(chunks) == 5 and all("usage" not in c for c in chunks)

    # chat: the role first with empty content, then the text
    whole_chat = json.loads(_get(run.port, "/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6})[1])
    _, chat = _sse(run.port, "/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True})
    first, *rest = [json.loads(d) for _, d in chat[:-1]]
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"]["content"] for c in rest) == whole_chat["choices"][0]["message"]["content"]
    assert len(rest) == 6 and rest[-1]["choices"][0]["finish_reason"] == "length"


def test_bench_request_measures_a_streamed_answer(sim) -> None:  # type: ignore[no-untyped-def]
    """`cockpit bench`'s request against the vLLM stand-in: streamed, so the first token comes before
    the end and every later token has its own gap (it used to be one JSON answer: TTFT = E2E)."""
    import asyncio

    from cockpit.serving.answers import http_client, one_request
    from cockpit.serving.workload import BenchSpec, Prompt

    run = sim([*QWEN, "--gpu-memory-utilization", "0.92"], speed=40)
    run.wait_for(r"^INFO:     Application startup complete\.", timeout=60)

    async def go():  # type: ignore[no-untyped-def]
        async with http_client() as c:
            return await one_request(c, f"http://127.0.0.1:{run.port}", BenchSpec(model="Qwen/Qwen3-32B"),
                                     Prompt(None, "hello vllm", 350), lambda k: None)

    res = asyncio.run(go())
    assert res.ok and res.streamed and res.output_tokens == 350, res
    assert res.ttft_s is not None and res.e2e_s is not None and res.ttft_s < res.e2e_s / 2
    assert res.itl_s is not None and 0 < res.itl_s < (res.e2e_s - res.ttft_s)  # decode time per token
