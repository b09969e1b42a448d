"""The SGLang log grammar: record prefixes, both versions' lines, chunking, busy-log scanning."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cockpit.backends.sglang import logparse
from cockpit.backends.sglang.logparse import (
    SGLangLogParser,
    classify,
    parse_server_args,
    read_log,
    split_record,
)
from cockpit.core import events as ev
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply
from cockpit.core.state import RunState

# the bulk scan with the SIMD count and with bytes.count: the same answers (core/bytecount.py)
pytestmark = pytest.mark.usefixtures("both_counts")

DATA = Path(__file__).resolve().parents[1] / "data"


def one(text: str) -> ev.Event:
    out = classify(7, text)
    assert len(out) >= 1, text
    return out[0]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[2026-02-24 11:55:44 TP7] Load weight begin.", ("2026-02-24 11:55:44", "TP7", "Load weight begin.")),
        ("[2026-02-24 11:55:44.123 TP7] x", ("2026-02-24 11:55:44.123", "TP7", "x")),
        ("[2026-02-24 11:55:44] The server is fired up", ("2026-02-24 11:55:44", None, "The server is fired up")),
        ("[2026-02-24 11:55:44 DP1 TP3] x", ("2026-02-24 11:55:44", "DP1 TP3", "x")),
        ("[2026-02-24 11:55:44 DP3 PP1 ATTN_CP1 MOE_DP2 TP3 EP3] x",
         ("2026-02-24 11:55:44", "DP3 PP1 ATTN_CP1 MOE_DP2 TP3 EP3", "x")),
        ("[2026-02-24 11:55:44 DisaggregationMode.IGPUDECODE TP1] x",
         ("2026-02-24 11:55:44", "DisaggregationMode.IGPUDECODE TP1", "x")),
        ("[2026-02-24 11:55:44 encode_dp_worker[0]] x", ("2026-02-24 11:55:44", "encode_dp_worker[0]", "x")),
        ("  File \"x.py\", line 3, in forward_extend", (None, None, "  File \"x.py\", line 3, in forward_extend")),
        ("[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] x",
         (None, None, "[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] x")),
        ("Killed", (None, None, "Killed")),
        ("", (None, None, "")),
        ("[", (None, None, "[")),
    ],
)
def test_split_record(line: str, expected: tuple[str | None, str | None, str]) -> None:
    assert split_record(line) == expected


def test_memory_lines_both_versions() -> None:
    e = one("[2026-02-24 11:55:55 TP0] Load weight end. elapsed=42.08 s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=61.72 GB, mem usage=16.49 GB.")
    assert isinstance(e, ev.WeightLoadEnd)
    assert (e.elapsed_s, e.avail_gb, e.weights_gb, e.model_type, e.dtype, e.quant) == (
        42.08, 61.72, 16.49, "LlamaForCausalLM", "torch.bfloat16", None)
    e = one("[2026-10-31 09:12:48 TP0] Load weight end. elapsed=42.02 s, type=DeepseekV3ForCausalLM, quant=fp8, fmt=e4m3, "
            "avail mem=11.72 GB, mem usage=66.49 GB.")
    assert isinstance(e, ev.WeightLoadEnd)
    assert (e.dtype, e.quant, e.weights_gb, e.line, e.rank) == (None, "quant=fp8, fmt=e4m3", 66.49, 7, "TP0")
    e = one("[2026-10-31 09:12:49 TP0] draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1232509, "
            "K size: 23.51 GB, V size: 23.51 GB")
    assert isinstance(e, ev.KvCacheAllocated)
    assert (e.tokens, e.kv_gb, e.label, e.dtype, e.upper_bound) == (1232509, 47.02, "draft", "torch.bfloat16", False)
    e = one("[2026-10-31 09:12:49 TP0] KV Cache VA upper bound. dtype: fp8_e4m3, #tokens: 90000, KV size: 4.00 GB")
    assert isinstance(e, ev.KvCacheAllocated) and e.upper_bound and e.kv_gb == 4.0
    e = one("[2026-02-24 11:55:57 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=13.91 GB")
    assert isinstance(e, ev.GraphCaptureBegin) and (e.what, e.avail_gb) == ("cuda graph", 13.91)
    e = one("[2026-02-24 11:56:15 TP0] Capture cuda graph end. Time elapsed: 18.44 s. mem usage=1.71 GB. avail mem=12.20 GB.")
    assert isinstance(e, ev.GraphCaptureEnd) and (e.elapsed_s, e.graph_gb, e.avail_gb) == (18.44, 1.71, 12.20)
    e = one("[2026-10-31 09:13:20 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=17.90 s, "
            "mem usage=1.68 GB, avail mem=12.21 GB.")
    assert isinstance(e, ev.GraphCaptureEnd)
    assert (e.what, e.elapsed_s, e.graph_gb, e.avail_gb) == ("target decode CUDA graph", 17.9, 1.68, 12.21)
    e = one("[2026-02-24 11:56:00 TP0] Capture piecewise CUDA graph end. Time elapsed: 3.00 s. mem usage=0.40 GB. avail mem=11.80 GB.")
    assert isinstance(e, ev.GraphCaptureEnd) and e.what == "piecewise CUDA graph"
    e = one("[2026-02-24 11:56:16 TP0] max_total_num_tokens=1244811, chunked_prefill_size=-1, max_prefill_tokens=16384, "
            "max_running_requests=4096, context_len=131072, available_gpu_mem=12.20 GB")
    assert isinstance(e, ev.KvPoolSized)
    assert (e.max_total_num_tokens, e.prefill_chunk_tokens, e.prefill_tokens_cap, e.running_requests_cap,
            e.context_len, e.available_gpu_mem_gb) == (1244811, -1, 16384, 4096, 131072, 12.20)
    e = one("[2026-10-31 09:13:22 TP1] Allocating kv hierarchical KV host pool: 2000000 tokens, 48.00 GB host memory.")
    assert isinstance(e, ev.HostCacheAllocating) and (e.host_gb, e.tokens, e.label) == (48.0, 2000000, "kv")
    e = one("[2026-10-31 09:13:21 TP0] KV pool holds 60000 tokens, fewer than --context-length 262144. One full-length "
            "request cannot fit, so long requests will be refused or truncated at serving time.")
    assert isinstance(e, ev.KvPoolBelowContext) and (e.tokens, e.context_len) == (60000, 262144)
    e = one("[2026-02-24 11:55:13 TP0] Init torch distributed ends. elapsed=2.87 s, mem usage=0.97 GB")
    assert isinstance(e, ev.DistInitEnd) and (e.elapsed_s, e.mem_usage_gb, e.fmt) == (2.87, 0.97, "sglang-0.5.9")
    e = one("[2026-10-31 09:12:06 TP0] Memory baseline taken. mem usage=0.97 GB")
    assert isinstance(e, ev.MemoryBaseline) and e.mem_usage_gb == 0.97
    e = one("[2026-02-24 11:55:13 TP3] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
            "min_per_gpu_memory=78.2, local_gpu_memory=87.1, local_gpu_memory * 0.9=78.39")
    assert isinstance(e, ev.MemoryImbalance) and e.rank == "TP3"


def test_batch_lines_both_versions() -> None:
    e = one("[2026-02-24 15:41:07 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.71, "
            "#running-req: 212, #queue-req: 17, #prealloc-req: 0, #inflight-req: 0, input throughput (token/s): 18934.22, "
            "cuda graph: False")
    assert isinstance(e, ev.PrefillBatch)
    assert (e.new_seq, e.new_token, e.cached_token, e.token_usage, e.running_req, e.queue_req, e.input_throughput,
            e.graph_replayed) == (3, 8192, 1024, 0.71, 212, 17, 18934.22, False)
    e = one("[2026-10-31 09:13:23 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
            "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 123.45, "
            "est. prefill TFLOPS/s (per GPU): 12.1")
    assert isinstance(e, ev.PrefillBatch) and (e.input_throughput, e.graph_replayed) == (123.45, True)
    e = one("[2026-02-24 15:41:07 TP0] Decode batch, #running-req: 212, #token: 90000, token usage: 0.08, accept len: 2.31, "
            "accept rate: 0.77, cuda graph: True, gen throughput (token/s): 2874.31, #queue-req: 3")
    assert isinstance(e, ev.DecodeBatch)
    assert (e.running_req, e.tokens, e.token_usage, e.gen_throughput, e.queue_req, e.graph_replayed) == (
        212, 90000, 0.08, 2874.31, 3, True)
    e = one("[2026-02-24 15:41:07 DP2 TP2] Decode batch, #running-req: 5, #full token: 9000, full token usage: 0.10, "
            "#swa token: 100, swa token usage: 0.50, cuda graph: True, gen throughput (token/s): 99.00, #queue-req: 0")
    assert isinstance(e, ev.DecodeBatch) and (e.tokens, e.token_usage, e.rank) == (9000, 0.10, "DP2 TP2")


def test_uvicorn_and_ansi() -> None:
    e = one('[2026-02-24 11:57:43] INFO:     127.0.0.1:51744 - "GET /health HTTP/1.1" 503 Service Unavailable')
    assert isinstance(e, ev.HttpAccess) and (e.method, e.path, e.status, e.rank) == ("GET", "/health", 503, None)
    e = one("[2026-02-24 11:56:17] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    assert isinstance(e, ev.UvicornRunning) and e.port == 30000
    p = ByteReader(SGLangLogParser())
    evs = p.feed(b'[2026-02-24 11:57:43] \x1b[32mINFO\x1b[0m:     127.0.0.1:51744 - "\x1b[1mPOST /generate HTTP/1.1\x1b[0m" '
                 b"\x1b[32m200 OK\x1b[0m\n")
    assert evs == [ev.HttpAccess(1, "2026-02-24 11:57:43", None, "POST", "/generate", 200)]


def test_failure_lines() -> None:
    assert isinstance(one("[2026-02-24 15:41:08] SIGQUIT received. signum=None, frame=None. It usually means one child failed."),
                      ev.SigquitReceived)
    e = one("[2026-02-24 16:21:09] Received sigquit from a child process. It usually means the child failed.")
    assert isinstance(e, ev.SigquitReceived) and e.from_child
    e = one("[2026-02-24 16:21:09] Subprocess scheduler_3 (pid=4412) crashed with exit code -9. Triggering SIGQUIT for cleanup...")
    assert isinstance(e, ev.RankDead) and (e.rank_index, e.exit_code, e.how) == (3, -9, "crashed")
    e = one("[2026-02-24 16:21:09] Scheduler or DataParallelController 4412 terminated with -9")
    assert isinstance(e, ev.RankDead) and (e.rank_index, e.exit_code, e.how) == (None, -9, "terminated")
    e = one("[2026-02-24 16:21:09 TP2] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)")
    assert isinstance(e, ev.EngineWatchdogFired)
    # issue 11: an NCCL error that does not say it timed out is not a timeout (it was read as one)
    e = one("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268")
    assert isinstance(e, ev.NcclError)
    e = one("torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)")
    assert isinstance(e, ev.NcclTimeout)
    e = one("OSError: [Errno 98] Address already in use")
    assert isinstance(e, ev.PortInUse)
    e = one("Exception: Capture prefill CUDA graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            "total capacity of 79.19 GiB of which 1.00 GiB is free.")
    assert isinstance(e, ev.GraphCaptureFailed)
    e = one("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.19 GiB total "
            "capacity; 77.10 GiB already allocated; 9.06 MiB free; 78.00 GiB reserved in total by PyTorch)")
    assert isinstance(e, ev.CudaOom) and (e.gpu, e.total_gib) == (0, 79.19)
    e = one("ValueError: Not enough host memory available. Requesting 200.00 GB but only have 128.41 GB free. "
            "Please reduce the size of the hierarchical cache.")
    assert isinstance(e, ev.HostCacheShortOfMemory)
    assert isinstance(one("Killed"), ev.Killed)
    assert classify(1, "[2026-02-24 11:00:00 TP0] Killed requests: 0") == []
    e = one('  File "/x/sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend')
    assert isinstance(e, ev.TracebackFrame) and (e.function, e.file) == ("forward_extend", "/x/sglang/srt/model_executor/model_runner.py")
    e = one("[2026-02-24 15:41:08 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 4, #new_tokens_gained: 9, "
            "#new_token_ratio: 0.4100 -> 0.7000")
    assert isinstance(e, ev.KvRetract) and e.n == 4


def test_server_args_both_forms() -> None:
    a = parse_server_args("server_args=ServerArgs(model_path='/m', tp_size=8, mem_fraction_static=0.93, "
                          "cuda_graph_bs=[1, 2, 4], json_model_override_args='{\"a\": 1, \"b\": 2}', lora_paths=None, "
                          "load_format=<LoadFormat.AUTO: 'auto'>, chat_template='a, b (c)')")
    assert a is not None
    args, form = a
    assert form == "ServerArgs"
    assert args["model_path"] == "/m" and args["tp_size"] == 8 and args["mem_fraction_static"] == 0.93
    assert args["cuda_graph_bs"] == [1, 2, 4] and args["lora_paths"] is None
    assert args["json_model_override_args"] == '{"a": 1, "b": 2}'
    assert args["load_format"] == "<LoadFormat.AUTO: 'auto'>"  # not a literal: kept as text
    assert args["chat_template"] == "a, b (c)"
    b = parse_server_args("server_args={'model_path': '/m', 'tp_size': 8, 'hicache_ratio': None, 'x': [1, 2]}")
    assert b == ({"model_path": "/m", "tp_size": 8, "hicache_ratio": None, "x": [1, 2]}, "dict")
    c = parse_server_args("server_args={'model_path': '/m', 'device': device(type='cuda'), 'tp_size': 4}")
    assert c is not None and c[0]["tp_size"] == 4 and c[0]["device"] == "device(type='cuda')"


def _events(data: bytes, sizes: list[int]) -> list[ev.Event]:
    p = ByteReader(SGLangLogParser())
    out: list[ev.Event] = []
    pos = 0
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        out += p.feed(data[pos:pos + n])
        pos += n
        i += 1
    return out + p.finish()


@pytest.mark.parametrize("name", ["sglang-0.5.9-kimi-0.93-prefill-oom.log", "sglang-0.5.23-llama70b-graph-capture-oom.log",
                                  "sglang-0.5.9-qwen7b-single-gpu.log"])
def test_any_chunking_gives_the_same_events(name: str) -> None:
    data = (DATA / name).read_bytes()
    whole = _events(data, [len(data)])
    rnd = random.Random(7)
    assert _events(data, [1]) == whole
    assert _events(data, [rnd.randint(1, 300) for _ in range(50)]) == whole
    assert _events(data, [4096]) == whole


def test_partial_last_line_waits_for_its_newline() -> None:
    p = ByteReader(SGLangLogParser())
    assert p.feed(b"[2026-02-24 11:55:13 TP0] Load weight begin. avail mem=78.") == []
    assert p.lines_seen == 0
    assert p.feed(b"21 GB\n[2026-02-24 11:55:13 TP1] Load weight begin. avail mem=77.00 GB") == [
        ev.WeightLoadBegin(1, "2026-02-24 11:55:13", "TP0", 78.21)]
    assert p.finish() == [ev.WeightLoadBegin(2, "2026-02-24 11:55:13", "TP1", 77.0)]
    assert p.lines_seen == 2


def test_tqdm_carriage_returns_and_crlf() -> None:
    p = ByteReader(SGLangLogParser())
    evs = p.feed(b"Loading safetensors checkpoint shards:  40% Completed | 12/30\r"
                 b"[2026-02-24 11:55:55 TP0] Load weight begin. avail mem=78.21 GB\r\n"
                 b"[2026-02-24 11:55:56 TP0] Memory pool end. avail mem=14.20 GB\r\n")
    assert evs == [ev.WeightLoadBegin(1, "2026-02-24 11:55:55", "TP0", 78.21),
                   ev.MemoryPoolEnd(2, "2026-02-24 11:55:56", "TP0", 14.20)]


def busy_log(n_routine: int, crash: bool = True) -> tuple[bytes, int]:
    """A busy log: a full startup, then routine access and batch lines, then a crash. Returns (data, crash line)."""
    head = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes()
    cut = head.index(b" TP0] Prefill batch, #new-seq: 3, #new-token: 8192")
    cut = head.rindex(b"\n", 0, cut) + 1
    start, tail = head[:cut], head[cut:]
    rnd = random.Random(1)
    body = []
    for i in range(n_routine):
        r = rnd.random()
        if r < 0.5:
            body.append(f'[2026-02-24 11:52:{i % 60:02d}] INFO:     10.0.0.2:{40000 + i % 20000} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        elif r < 0.8:
            body.append(f"[2026-02-24 11:52:{i % 60:02d} TP0] Decode batch, #running-req: {i % 300}, #token: {i}, token usage: 0.55, "
                        f"cuda graph: True, gen throughput (token/s): {1000 + i % 977:.2f}, #queue-req: 0\n")
        else:
            body.append(f"[2026-02-24 11:52:{i % 60:02d} TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, "
                        f"token usage: 0.55, #running-req: 9, #queue-req: 0, input throughput (token/s): 9000.00, cuda graph: False\n")
        if i == n_routine // 2:
            body.append("[2026-02-24 11:52:30 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                        "#new_tokens_gained: 1, #new_token_ratio: 0.4100 -> 0.7000\n")
    data = start + "".join(body).encode() + (tail if crash else b"")
    crash_line = data[: data.index(b"torch.OutOfMemoryError")].count(b"\n") + 1 if crash else 0
    return data, crash_line


def test_busy_log_windows_keep_exact_line_numbers_and_the_story() -> None:
    data, crash_line = busy_log(60_000)
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for chunk in range(0, len(data), 1 << 20):
        for e in p.feed(data[chunk:chunk + (1 << 20)]):
            apply(st, e)
    for e in p.finish():
        apply(st, e)
    assert p.lines_seen == data.count(b"\n")
    assert st.crash is not None
    assert (st.crash.kind, st.crash.phase, st.crash.rank, st.crash.line) == ("cuda_oom", "prefill", "TP3", crash_line)
    assert st.min_headroom_gb == 0.82 and st.ranks["TP3"].avail_after_capture_gb == 0.82
    assert st.retractions == 2
    # routine windows are sampled, not dropped: the series has points and a believable peak
    assert len(st.gen_throughput) > 20
    assert st.peak_gen_throughput is not None and 1000 <= st.peak_gen_throughput <= 2976
    assert st.last_batch_kind == "prefill"
    # the same text read line by line (every line classified) tells the same story
    q = ByteReader(SGLangLogParser())
    st2 = RunState()
    for raw in data.splitlines(keepends=True)[:2000]:
        for e in q.feed(raw):
            apply(st2, e)
    assert st2.ranks["TP3"].avail_after_capture_gb == 0.82


def test_sampled_lines_have_their_true_line_numbers() -> None:
    data, _ = busy_log(20_000, crash=False)
    lines = data.split(b"\n")
    p = ByteReader(SGLangLogParser())
    evs = p.feed(data) + p.finish()
    batches = [e for e in evs if isinstance(e, (ev.DecodeBatch, ev.PrefillBatch))]
    assert len(batches) > 5
    for e in batches:
        raw = lines[e.line - 1]
        assert (b"Decode batch" if isinstance(e, ev.DecodeBatch) else b"Prefill batch") in raw
        assert e.ts is not None and e.ts.encode() in raw


def test_read_log_accepts_paths_and_streams(tmp_path: Path) -> None:
    name = DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log"
    a = read_log(name)
    b = read_log(str(name))
    with open(name, "rb") as f:
        c = read_log(f)
    assert a.to_json() == b.to_json() == c.to_json()
    st = RunState()
    assert read_log(name, st) is st


def test_module_constants_are_sane() -> None:
    assert logparse.LINE_CAP == 64 * 1024
    assert logparse.TAIL_SAMPLE < logparse.WINDOW


def _routine(rnd: random.Random, i: int, kind: str | None = None) -> str:
    k = kind or rnd.choice(["access", "access", "decode", "prefill"])
    if k == "access":
        return f'[2026-02-24 12:00:{i % 60:02d}] INFO:     10.0.0.3:{30000 + i % 9999} - "GET /health HTTP/1.1" 200 OK\n'
    if k == "decode":
        return (f"[2026-02-24 12:00:{i % 60:02d} TP0] Decode batch, #running-req: 3, #token: {i}, token usage: 0.20, "
                f"cuda graph: True, gen throughput (token/s): {i % 500 + 1}.00, #queue-req: 0\n")
    return (f"[2026-02-24 12:00:{i % 60:02d} TP0] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, "
            f"token usage: 0.20, #running-req: 1, #queue-req: 0, input throughput (token/s): 1.00, cuda graph: False\n")


NEWS = [
    "[2026-02-24 12:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 5, "
    "#new_token_ratio: 0.4100 -> 0.7000\n",
    "[2026-02-24 12:00:00 TP5] Load weight begin. avail mem=70.00 GB\n",
    '  File "/x/model_runner.py", line 1, in forward_decode\n',
    "[2026-02-24 12:00:00 TP2] Memory pool end. avail mem=3.00 GB\n",
    '[2026-02-24 12:00:00] INFO:     10.0.0.3:1 - "GET /health HTTP/1.1" 503 Service Unavailable\n',
]


@pytest.mark.parametrize("seed", range(6))
def test_bulk_scan_finds_every_line_with_news_at_its_true_number(seed: int) -> None:
    rnd = random.Random(seed)
    lines: list[str] = []
    for i in range(rnd.randint(3000, 12000)):
        lines.append(rnd.choice(NEWS) if rnd.random() < 0.002 else _routine(rnd, i))
    data = "".join(lines).encode()
    p = ByteReader(SGLangLogParser())
    got: list[ev.Event] = []
    step = rnd.choice([1 << 20, 100_000, 65_537])
    for k in range(0, len(data), step):
        got += p.feed(data[k:k + step])
    got += p.finish()
    assert p.lines_seen == len(lines)
    # every event sits on the line that, classified alone, gives exactly that event
    for e in got:
        assert e in classify(e.line, lines[e.line - 1].rstrip("\n"))
    # every line with news was found (routine lines are only sampled)
    expected = {i + 1 for i, line in enumerate(lines) if line in NEWS and "503" not in line}
    found = {e.line for e in got if not isinstance(e, (ev.DecodeBatch, ev.PrefillBatch, ev.HttpAccess))}
    assert expected <= found


@pytest.mark.parametrize(("last", "phase"), [("decode", "decode"), ("prefill", "prefill"), ("access", "decode")])
@pytest.mark.parametrize("n", [700, 5000, 20011])
def test_crash_phase_from_the_last_batch_in_a_busy_log(last: str, phase: str, n: int) -> None:
    rnd = random.Random(n)
    head = (DATA / "sglang-0.5.9-llama70b-tp8-healthy.log").read_text()
    body = [_routine(rnd, i) for i in range(n)]
    body += [_routine(rnd, n, "prefill"), _routine(rnd, n + 1, "decode"), _routine(rnd, n + 2, last)]
    text = head + "".join(body) + "[2026-02-24 12:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
    st = read_log(__import__("io").BytesIO(text.encode()))
    assert st.crash is not None
    assert (st.crash.kind, st.crash.phase, st.crash.line) == ("unknown", phase, text.count("\n"))


def test_bulk_scan_classifies_few_routine_lines() -> None:
    """The design promise behind the benchmark: routine lines are counted in C, not parsed one by one."""
    data, _ = busy_log(100_000)
    p = ByteReader(SGLangLogParser())
    evs = p.feed(data) + p.finish()
    routine = [e for e in evs if isinstance(e, (ev.DecodeBatch, ev.PrefillBatch, ev.HttpAccess))]
    assert p.lines_seen > 100_000
    assert len(routine) < p.lines_seen / 200


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_200_ok_shortcut_finds_what_the_access_mark_count_finds(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A half window is proved routine by counting `" HTTP/1.1" 200 OK\\n` (faster) before the access
    mark itself; the events, line numbers and recognition counts are those of the mark's own count,
    whatever the mix: other statuses, HTTP/1.0, CRLF, news between them, lines holding two marks."""
    from cockpit.backends.sglang import scanner

    rnd = random.Random(seed)
    odd = [
        '[2026-02-24 11:52:00] INFO:     10.0.0.2:4242 - "GET /metrics HTTP/1.1" 404 Not Found\n',
        '[2026-02-24 11:52:00] INFO:     10.0.0.2:4242 - "POST /generate HTTP/1.0" 200 OK\n',
        '[2026-02-24 11:52:00] INFO:     10.0.0.2:4242 - "POST /generate HTTP/1.1" 200 OK\r\n',
        '[2026-02-24 11:52:00] INFO:     10.0.0.2:4242 - "POST /generate HTTP/1.1" 500 Internal Server Error\n',
        '[2026-02-24 11:52:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 1, '
        '#new_token_ratio: 0.4100 -> 0.7000\n',
        "[2026-02-24 11:52:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n",
        'ValueError: bad request "POST /x HTTP/1.1" 200 OK\n',  # news that holds the access mark
        '[2026-02-24 11:52:00 TP0] Decode batch, #running-req: 3, #token: 9, #running-req: 4 "GET / HTTP/1.1" 200 OK\n',
        "\n",
    ]
    body = []
    for i in range(40_000):
        r = rnd.random()
        if r < 0.004:
            body.append(rnd.choice(odd))
        elif r < 0.5:
            body.append(f'[2026-02-24 11:52:{i % 60:02d}] INFO:     10.0.0.2:{40000 + i % 20000} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        else:
            body.append(f"[2026-02-24 11:52:{i % 60:02d} TP0] Decode batch, #running-req: {i % 300}, #token: {i}, token usage: 0.55, "
                        f"cuda graph: True, gen throughput (token/s): {1000 + i % 977:.2f}, #queue-req: 0\n")
    data = "".join(body).encode()

    def parse() -> tuple[list[ev.Event], int, int, int, int]:
        p = ByteReader(SGLangLogParser())
        evs = [e for c in range(0, len(data), 1 << 20) for e in p.feed(data[c : c + (1 << 20)])] + p.finish()
        return evs, p.lines_seen, p.strong, p.generic, p.foreign

    fast = parse()
    monkeypatch.setattr(scanner, "_ACCESS_OK", scanner._ACCESS_MARK)  # every half counts the mark itself
    assert parse() == fast
    assert fast[1] == data.count(b"\n")
    assert any(isinstance(e, ev.KvRetract) for e in fast[0])


def test_read_log_from_standard_input() -> None:
    import subprocess
    import sys

    code = ("import json, sys; from cockpit.backends.sglang.logparse import read_log; "
            "s = read_log('-'); print(json.dumps([s.phase, s.crash.kind, s.crash.line, s.lines_seen]))")
    with open(DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log", "rb") as f:
        out = subprocess.run([sys.executable, "-c", code], stdin=f, capture_output=True, check=True, text=True)
    import json

    phase, kind, line, lines = json.loads(out.stdout)
    text = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes()
    assert (phase, kind, lines) == ("crashed", "cuda_oom", text.count(b"\n"))
    assert text.split(b"\n")[line - 1].startswith(b"torch.OutOfMemoryError")


@pytest.mark.parametrize("workers", ["2", "3"])
def test_parallel_read_of_a_big_file_tells_the_same_story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          workers: str) -> None:
    data, crash_line = busy_log(40_000)
    log = tmp_path / "busy.log"
    log.write_bytes(data + b"[2026-02-24 11:59:59 TP0] Load weight begin. avail mem=1.00 GB")  # no final newline
    monkeypatch.setattr(logparse, "PARALLEL_MIN_BYTES", 1 << 16)
    monkeypatch.setenv("COCKPIT_LOG_WORKERS", "1")
    one = read_log(log)
    monkeypatch.setenv("COCKPIT_LOG_WORKERS", workers)
    assert logparse._workers(len(data)) == int(workers)
    many = read_log(log)
    a, b = one.to_json(), many.to_json()
    a.pop("peak_gen_throughput")
    b.pop("peak_gen_throughput")
    assert a == b
    assert many.lines_seen == data.count(b"\n") + 1
    assert many.crash is not None and many.crash.line == crash_line
    assert many.retractions == 2 and many.min_headroom_gb == 0.82
    assert len(many.gen_throughput) > 10


def test_parallel_cuts_fall_on_line_starts(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    data = b"".join(b"line %d " % i + b"x" * (i % 50) + b"\n" for i in range(5000)) + b"tail"
    log.write_bytes(data)
    with open(log, "rb") as f:
        cuts = logparse._line_starts(f, len(data), 7)
    assert cuts[0] == 0 and cuts[-1] == len(data) and cuts == sorted(cuts)
    assert all(c == len(data) or data[c - 1:c] == b"\n" for c in cuts[1:-1])


def test_flag_value_stated_outside_the_dump() -> None:
    """Issue 11: the value in force is read from every place the log states it."""
    e = one("[2025-03-07 23:50:27 TP0] Automatically reduce --mem-fraction-static to 0.760 because this is a multimodal model.")
    assert isinstance(e, ev.FlagStated) and (e.dest, e.value) == ("mem_fraction_static", 0.76)
    st = RunState(backend="sglang", memory_flag="mem_fraction_static")
    apply(st, e)
    assert st.memory_setting == ("mem_fraction_static", 0.76)
    e = one("[2026-02-24 11:56:00 TP2] ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.912 (minimum viable = 1 - available/pre = 0.8921).")
    assert isinstance(e, ev.NotEnoughMemory) and e.setting == 0.88 and e.suggested == 0.912
    out = classify(8, "[2026-02-24 11:56:00 TP2] ValueError: Loaded weights leave no GPU memory for the KV cache under "
                      "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.912 (minimum viable = 1 - available/pre = 0.8921).")
    advice = [x for x in out if isinstance(x, ev.EngineAdvice)]
    assert advice and advice[0].bound == 0.912 and "Raise --mem-fraction-static above 0.912" in advice[0].text


def test_wrapper_prefixes_are_learned_not_listed() -> None:
    """Any launcher's prefix in front of the records is learned from the file and stripped from the
    traceback lines under it too (no product named in the parser)."""
    for prefix in ("sglang-1  | ", "2026-06-17T16:25:18.5969653Z ", "0: ", "(SGLangEngine pid=6680) ",
                   "Dec 01 05:00:00 gpu-7 python3[1234]: ", "2026-02-26 13:55:38  INFO launcher::sglang: ",
                   "> ", "[pod/sglang-7d9f8b-x2k4/sglang] "):
        text = "".join(prefix + ln + "\n" for ln in (
            "[2026-02-24 12:02:08 TP3] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend',
            "    return self.model.forward(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
            "of 94.97 GiB of which 1.05 GiB is free.",
        ))
        p = ByteReader(SGLangLogParser())
        st = RunState()
        for e in p.feed(text.encode()) + p.finish():
            apply(st, e)
        assert st.crash is not None, prefix
        assert (st.crash.kind, st.crash.phase, st.crash.rank) == ("cuda_oom", "prefill", "TP3"), prefix


def test_older_and_damaged_record_forms() -> None:
    """Issue 11: 0.1-0.4 forms, trimmed stamps and broken pastes still read as records."""
    cases = {
        "[gpu_id=0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 417": ("", "TP0"),
        "[gpu=1] Decode batch. #running-req: 381, #token: 344397, token usage: 0.96, gen throughput (token/s): 93.97, #queue-req: 1549": ("", "TP1"),
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):": ("", "TP0"),
        "[16:43:29 TP0] Prefill batch. #new-seq: 1, #new-token: 2062, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0": ("16:43:29", "TP0"),
        "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.": ("12-16 14:27:08", None),
        "2025-02-09 10:14:05 TP0] Decode batch. #running-req: 2, #token: 3698, token usage: 0.01, gen throughput (token/s): 50.46, #queue-req: 0": ("2025-02-09 10:14:05", "TP0"),
        "2025-04-13 14:53:38 INFO 511 [pynccl.py:78] sglang is using nccl==2.25.1": ("2025-04-13 14:53:38", None),
    }
    for line, (ts, rank) in cases.items():
        got = split_record(line)
        assert got[:2] == (ts, rank), line
    e = one("[gpu_id=0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 417")
    assert isinstance(e, ev.DecodeBatch) and (e.running_req, e.tokens, e.token_usage) == (233, 370959, 0.82)
    e = one("[2024-12-13 01:44:59 TP0] Load weight end. type=MistralForCausalLM, dtype=torch.bfloat16, avail mem=9.69 GB")
    assert isinstance(e, ev.WeightLoadEnd) and e.avail_gb == 9.69 and e.weights_gb is None
    e = one("[2024-12-13 01:45:01 TP0] Capture cuda graph end. Time elapsed: 2.19 s")
    assert isinstance(e, ev.GraphCaptureEnd) and e.elapsed_s == 2.19 and e.graph_gb is None and e.avail_gb is None
    e = one("[2024-10-22 06:31:49 TP0] KV Cache is allocated. K size: 27.40 GB, V size: 27.40 GB.")
    assert isinstance(e, ev.KvCacheAllocated) and e.tokens is None and e.kv_gb == 54.8


def test_a_record_glued_to_a_tqdm_bar_or_cut_from_its_prefix() -> None:
    text = (b"Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.31it/s]"
            b"[2025-06-19 15:12:27 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=21.96 GB, mem usage=8.81 GB.\n"
            b"[2026-04-10 13:17:24] L\n"
            b" Load weight begin. avail mem=60.89 GB \n")
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(text) + p.finish():
        apply(st, e)
    assert st.ranks["TP0"].weights_gb == 8.81 and st.ranks["TP0"].after_weights_avail_gb == 21.96
    assert st.ranks["TP0"].pre_load_avail_gb == 60.89  # the message that lost its prefix


def test_decode_retraction_is_a_warning_never_a_crash() -> None:
    text = (b"[2025-01-06 02:58:33 TP0] Decode batch. #running-req: 2, #token: 307721, token usage: 1.00, gen throughput (token/s): 10.94, #queue-req: 0\n"
            b"[2025-03-07 21:49:33 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845\n"
            b"[2025-03-07 21:49:45 TP0] Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.0980 -> 0.1919\n")
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(text) + p.finish():
        apply(st, e)
    assert st.crash is None and st.decode_retractions == 2 and st.retractions == 3
    assert st.decode_retraction_usage == 1.0


def test_a_traceback_the_server_survives_is_not_a_crash() -> None:
    """A bare traceback waits: the server serving afterwards drops it (a note stays); the input
    ending or the process exiting right after it makes it the crash."""
    tb = (b"[2026-02-24 12:00:00 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, cuda graph: True, gen throughput (token/s): 12.0, #queue-req: 0\n"
          b"Traceback (most recent call last):\n"
          b'  File "/x/sglang/srt/managers/tokenizer_manager.py", line 10, in handle_loop\n'
          b"    raise ValueError(x)\n"
          b"ValueError: bad request\n")
    after = b"[2026-02-24 12:00:05 TP0] Decode batch, #running-req: 3, #token: 950, token usage: 0.01, cuda graph: True, gen throughput (token/s): 12.0, #queue-req: 0\n"
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(tb + after) + p.finish():
        apply(st, e)
    assert st.crash is None and st.phase == "ready"
    assert any("survived" in w for w in st.log_warnings)
    for tail in (b"", None):
        p = ByteReader(SGLangLogParser())
        st = RunState()
        for e in p.feed(tb + (tail or b"")) + p.finish():
            apply(st, e)
        if tail is None:
            assert st.crash is None  # live: nothing came after yet, the process has not exited
            apply(st, ev.ProcessExited(0, None, None, 1))
        else:
            from cockpit.core.reducer import end_of_input

            end_of_input(st)
        assert st.crash is not None and st.crash.message == "ValueError: bad request"
        assert st.crash.phase == "decode"  # the last batch line before it


@pytest.mark.parametrize(("line", "kind"), [
    ("RuntimeError: CUDA error: out of memory", ev.CudaOom),
    ("torch.OutOfMemoryError: NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total capacity)", ev.CudaOom),
    ("RuntimeError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 GiB of which 1.2 GiB is free.", ev.CudaOom),
    ("RuntimeError: MUSA out of memory. Tried to allocate 1.00 GiB.", ev.CudaOom),
    ("[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
     "Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info.", ev.NcclTimeout),
    ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", ev.NcclError),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error", ev.NcclError),
    ("[2025-08-13 10:59:23 DP0 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):", ev.SchedulerException),
    ("[2024-10-22 06:31:49 TP0] Traceback (most recent call last):", ev.SchedulerException),
    ("Exception in ControllerSingle:", ev.SchedulerException),
    ("Exception in thread Thread-3 (forward_thread_func):", ev.SchedulerException),
    ("[2025-03-09 00:57:15 TP4] Watchdog timeout (self.watchdog_timeout=300)", ev.EngineWatchdogFired),
    ("[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845", ev.DecodeRetraction),
])
def test_crash_headers_and_wordings(line: str, kind: type) -> None:
    assert isinstance(one(line), kind), line


def test_source_text_in_a_traceback_is_not_an_error() -> None:
    """`raise RuntimeError(f"NCCL error: …")` under a frame quotes an error; it is not one."""
    p = ByteReader(SGLangLogParser())
    out = p.feed(b'  File "/x/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 350, in NCCL_CHECK\n'
                 b'    raise RuntimeError(f"NCCL error: {error_str}")\n'
                 b"RuntimeError: NCCL error: unhandled system error\n") + p.finish()
    nccl = [e for e in out if isinstance(e, ev.NcclError)]
    assert [e.line for e in nccl] == [3]


def test_level_tags_and_headers_without_their_prefix() -> None:
    e = one("[2025-05-25 19:45:03] [ERROR] Scheduler hit an exception: Traceback (most recent call last):")
    assert isinstance(e, ev.SchedulerException) and e.ts == "2025-05-25 19:45:03"
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(b"Scheduler hit an exception: Traceback (most recent call last):\n"
                    b'  File ".../model_loader/loader.py", line 1426, in load_model\n'
                    b"    param_data = state_dict[key].data\n"
                    b"KeyError: 'model.layers.47.input_layernorm.weight'\n") + p.finish():
        apply(st, e)
    assert st.crash is not None and st.crash.phase == "startup"
    assert st.crash.kind == "startup_error" and "KeyError" in st.crash.message


_IMPORT_AT_START = {
    "bare traceback": ('Traceback (most recent call last):\n'
                       '  File "<frozen runpy>", line 189, in _run_module_as_main\n'
                       '  File "/opt/venv/lib/python3.11/site-packages/sglang/__init__.py", line 3, in <module>\n'
                       '    import torch\n'
                       "ModuleNotFoundError: No module named 'torch'\n", 5, "No module named 'torch'"),
    "python -c": ('Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
                  "ImportError: cannot import name 'launch_server' from 'sglang'\n", 3, "cannot import name"),
    "interpreter": ("/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
                    "(ModuleNotFoundError: No module named 'sglang')\n", 1, "No module named 'sglang'"),
    "no module": ("/opt/venv/bin/python3.11: No module named sglang\n", 1, "No module named sglang"),
    "first line": ("ModuleNotFoundError: No module named 'sglang'\n", 1, "No module named 'sglang'"),
    "argparse": ("usage: launch_server.py [-h] --model-path MODEL_PATH\n"
                 "launch_server.py: error: unrecognized arguments: --foo\n", 2, "unrecognized arguments: --foo"),
    "vllm argparse": ("usage: vllm serve [model_tag] [options]\n"
                      "vllm serve: error: unrecognized arguments: --foo\n", 2, "unrecognized arguments: --foo"),
}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("case", sorted(_IMPORT_AT_START))
def test_an_import_or_usage_error_at_start_is_a_startup_error(tmp_path: Path, engine: str, case: str) -> None:
    """Issue 17, defect 2: a server that died at once with a Python import/usage error was
    `crash_unclassified` in an unknown phase (or no crash at all when the line stood alone)."""
    from cockpit.backends import get_backend
    text, line, quote = _IMPORT_AT_START[case]
    if engine == "sglang" and case == "vllm argparse":
        pytest.skip("vLLM's own argparse prefix")
    log = tmp_path / "server.log"
    log.write_text(text)
    st = get_backend(engine).logs.read(log)
    assert st.crash is not None and st.crash.kind == "startup_error", (st.phase, st.crash)
    assert st.crash.phase == "startup" and st.crash.line == line
    assert quote in st.crash.message


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_import_error_while_serving_is_not_a_startup_error(engine: str) -> None:
    """A `<module>` frame proves start-up only when nothing sharper in the log names the phase."""
    from cockpit.backends import get_backend
    b = get_backend(engine)
    p, st = ByteReader(b.logs.new_parser()), b.logs.new_state()
    ready = (b"[2025-05-25 19:45:03] The server is fired up and ready to roll!\n" if engine == "sglang"
             else b"INFO 05-25 19:45:03 [api_server.py:1024] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
                  b"INFO:     Application startup complete.\n")
    tb = (b"Traceback (most recent call last):\n  File \"/x/plugin.py\", line 1, in <module>\n"
          b"ModuleNotFoundError: No module named 'late_plugin'\n")
    for e in p.feed(ready + tb) + p.finish():
        apply(st, e)
    assert st.crash is None or st.crash.kind != "startup_error", st.crash
