"""Writes the golden SGLang logs in this folder from the reference's format strings.

Run `python tests/data/make_golden.py` after changing a scenario; the .log files are committed so
that a reader can open them. Every number is chosen to tell the story the test asserts (see
README.md in this folder): the test reads the expected values from here, not from the parser.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
V9, V23 = "0.5.9", "0.5.23"

OOM_TAIL = (
    " Of the allocated memory {alloc} is allocated by PyTorch, with 1.62 GiB allocated in private pools (e.g., CUDA "
    "Graphs), and 1.03 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)


def oom_text(req: str, gpu: int, total: str, free: str, inuse: str, alloc: str = "75.83 GiB") -> str:
    return (f"CUDA out of memory. Tried to allocate {req}. GPU {gpu} has a total capacity of {total} of which {free} "
            f"is free. Including non-PyTorch memory, this process has {inuse} memory in use."
            + OOM_TAIL.format(alloc=alloc))


class Log:
    def __init__(self, day: str, hms: tuple[int, int, int], ms: bool = False) -> None:
        self.day = day
        self.t: float = hms[0] * 3600 + hms[1] * 60 + hms[2]
        self.ms = ms
        self.lines: list[str] = []

    def tick(self, s: float = 1) -> None:
        self.t += s

    def ts(self) -> str:
        t = int(self.t)
        base = f"{self.day} {t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}"
        if self.ms:
            base += f".{int((self.t - t) * 1000):03d}"
        return base

    def rec(self, rank: str | None, msg: str) -> None:
        self.lines.append(f"[{self.ts()}{' ' + rank if rank else ''}] {msg}")

    def raw(self, text: str) -> None:
        self.lines.append(text)

    def line_of(self, prefix: str) -> int:
        """1-based number of the first line containing `prefix` (used by the tests)."""
        for i, line in enumerate(self.lines, 1):
            if prefix in line:
                return i
        raise KeyError(prefix)

    def write(self, name: str, crlf: bool = False) -> None:
        text = "\n".join(self.lines) + "\n"
        if crlf:
            text = text.replace("\n", "\r\n")
        (HERE / name).write_bytes(text.encode("utf-8"))


def args_09(**kw: object) -> str:
    base: dict[str, object] = dict(
        model_path="meta-llama/Llama-3.1-70B-Instruct", tokenizer_path="meta-llama/Llama-3.1-70B-Instruct",
        tokenizer_mode="auto", trust_remote_code=False, dtype="auto", kv_cache_dtype="auto", host="0.0.0.0",
        port=30000, mem_fraction_static=0.818, max_running_requests=None, max_total_tokens=None,
        chunked_prefill_size=8192, max_prefill_tokens=16384, context_length=None, tp_size=8, pp_size=1, dp_size=1,
        ep_size=1, enable_dp_attention=False, nnodes=1, node_rank=0, dist_init_addr=None, cuda_graph_max_bs=512,
        cuda_graph_bs=None, disable_cuda_graph=False, enable_hierarchical_cache=False, hicache_ratio=2.0,
        hicache_size=0, watchdog_timeout=300, log_level="info", decode_log_interval=40,
        json_model_override_args="{}", speculative_algorithm=None,
    )
    base.update(kw)
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in base.items()) + ")"


def args_23(**kw: object) -> str:
    base: dict[str, object] = dict(
        model_path="meta-llama/Llama-3.1-70B-Instruct", tokenizer_path="meta-llama/Llama-3.1-70B-Instruct",
        trust_remote_code=False, kv_cache_dtype="auto", host="0.0.0.0", port=30000, mem_fraction_static=0.812,
        max_running_requests=4096, max_total_tokens=None, chunked_prefill_size=8192, max_prefill_tokens=16384,
        context_length=131072, tp_size=8, pp_size=1, dp_size=1, attn_dp_size=1, ep_size=1, nnodes=1, node_rank=0,
        cuda_graph_max_bs_decode=512, cuda_graph_max_bs_prefill=8192, cuda_graph_backend_decode="full",
        cuda_graph_backend_prefill="breakable", enable_hierarchical_cache=False, hicache_ratio=None,
        hicache_size=0, watchdog_timeout=300.0, log_level="info", speculative_algorithm=None,
    )
    base.update(kw)
    return f"server_args={base!r}"


def startup(log: Log, version: str, ranks: list[str], *, pre: dict[str, float], weights: float,
            kv_tokens: int, kv_line: str, pool_end: dict[str, float], graph: float | tuple[float, float],
            model_type: str = "LlamaForCausalLM", shards: int = 30, upto: str = "ready",
            max_total: tuple[int, int, int, int, int] | None = None, port: int = 30000,
            hicache_gb: float | None = None, hicache_tokens: int | None = None, server_ranks_print_max: bool = True,
            gap: float = 0.29, cr: bool = True) -> dict[str, float]:
    """The memory lifecycle of every rank, in the order SGLang prints it. Returns free-after-capture per rank."""
    first = ranks[0]
    for r in ranks:
        log.rec(r, "Init torch distributed begin." if version == V9 else "Init parallel begin.")
    log.tick(3)
    for r in ranks:
        if version == V9:
            log.rec(r, "Init torch distributed ends. elapsed=2.87 s, mem usage=0.97 GB")
        else:
            log.rec(r, "Init parallel ends. elapsed=2.87 s")
            log.rec(r, "Memory baseline taken. mem usage=0.97 GB")
    for r in ranks:
        log.rec(r, f"Load weight begin. avail mem={pre[r]:.2f} GB")
    if upto == "load":
        return {}
    # tqdm redraws its bar with \r on one physical line; the last segment is what a terminal shows
    segs = [f"Loading safetensors checkpoint shards: {p:3d}% Completed | {p * shards // 100}/{shards} [00:16<00:24,  1.36s/it]"
            for p in (0, 40, 100)]
    log.raw(("\r" if cr else "").join(segs) if cr else segs[-1])
    log.tick(42)
    for r in ranks:
        if version == V9:
            log.rec(r, f"Load weight end. elapsed=42.08 s, type={model_type}, dtype=torch.bfloat16, "
                       f"avail mem={pre[r] - weights:.2f} GB, mem usage={weights:.2f} GB.")
        else:
            log.rec(r, f"Load weight end. elapsed=42.02 s, type={model_type}, "
                       f"avail mem={pre[r] - weights:.2f} GB, mem usage={weights:.2f} GB.")
    if upto == "weights":
        return {}
    log.tick(1)
    for r in ranks:
        log.rec(r, kv_line)
    for r in ranks:
        log.rec(r, f"Memory pool end. avail mem={pool_end[r]:.2f} GB")
    if upto == "kv":
        return {}
    log.tick(1)
    after: dict[str, float] = {}
    if version == V9:
        assert isinstance(graph, float)
        for r in ranks:
            log.rec(r, f"Capture cuda graph begin. This can take up to several minutes. avail mem={pool_end[r] - gap:.2f} GB")
        log.rec(first, "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]")
        if cr:
            log.raw("\r".join(f"Capturing batches (bs={bs} avail_mem={pool_end[first] - gap - 0.01:.2f} GB):   {p}%|▏  | {i}/52 [00:0{i % 10}<00:30,  1.7it/s]"
                              for i, (bs, p) in enumerate(((512, 2), (256, 50), (1, 100)), 1)))
        if upto == "capture":
            return {}
        log.tick(18)
        for r in ranks:
            after[r] = round(pool_end[r] - gap - graph, 2)
            log.rec(r, f"Capture cuda graph end. Time elapsed: 18.44 s. mem usage={graph:.2f} GB. avail mem={after[r]:.2f} GB.")
    else:
        assert isinstance(graph, tuple)
        gp, gd = graph
        for r in ranks:
            log.rec(r, "Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 7680, 8192], "
                       f"avail mem={pool_end[r] - gap:.2f} GB")
        if upto == "capture":
            return {}
        log.tick(12)
        for r in ranks:
            log.rec(r, f"Capture target prefill CUDA graph end. elapsed=12.31 s, mem usage={gp:.2f} GB, avail mem={pool_end[r] - gap - gp:.2f} GB.")
        for r in ranks:
            log.rec(r, f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem={pool_end[r] - gap - gp:.2f} GB")
        if cr:
            log.raw("\r".join(f"Capturing batches (bs={bs} avail_mem={pool_end[first] - gap - 0.01 - gp:.2f} GB):   {p}%|▏  | {i}/52 [00:0{i}<00:30,  1.7it/s]"
                              for i, (bs, p) in enumerate(((512, 2), (1, 100)), 1)))
        if upto == "capture2":
            return {}
        log.tick(18)
        for r in ranks:
            after[r] = round(pool_end[r] - gap - gp - gd, 2)
            log.rec(r, f"Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16, 24, 32], elapsed=17.90 s, "
                       f"mem usage={gd:.2f} GB, avail mem={after[r]:.2f} GB.")
    if upto == "captured":
        return after
    log.tick(1)
    mt = max_total or (kv_tokens, 8192, 16384, 4096, 131072)
    if "TP0" in first or first == "":
        pass
    if server_ranks_print_max:
        log.rec(first or None, f"max_total_num_tokens={mt[0]}, chunked_prefill_size={mt[1]}, max_prefill_tokens={mt[2]}, "
                               f"max_running_requests={mt[3]}, context_len={mt[4]}, available_gpu_mem={after[first]:.2f} GB")
    if hicache_gb is not None:
        for r in ranks:
            if version == V9:
                log.rec(r, f"Allocating {hicache_gb:.2f} GB host memory for hierarchical KV cache.")
            else:
                log.rec(r, f"Allocating kv hierarchical KV host pool: {hicache_tokens} tokens, {hicache_gb:.2f} GB host memory.")
    if upto == "allocated":
        return after
    log.tick(1)
    log.rec(None, "INFO:     Started server process [40121]")
    log.rec(None, "INFO:     Waiting for application startup.")
    log.rec(None, "INFO:     Application startup complete.")
    log.rec(None, f"INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)")
    if upto == "uvicorn":
        return after
    log.tick(1)
    log.rec(None, 'INFO:     127.0.0.1:51744 - "GET /model_info HTTP/1.1" 200 OK')
    pending = ", #pending-token: 0" if version == V23 else ""
    if version == V9:
        log.rec(first or None, "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
                               "#queue-req: 0, input throughput (token/s): 0.00, cuda graph: False")
    else:
        log.rec(first or None, f"Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
                               f"#queue-req: 0{pending}, cuda graph: True, input throughput (token/s): 0.00")
    if upto == "warmup":
        return after
    log.rec(None, 'INFO:     127.0.0.1:51750 - "POST /generate HTTP/1.1" 200 OK')
    log.rec(None, "The server is fired up and ready to roll!")
    return after


def serve(log: Log, version: str, rank: str | None, n: int, usage: float = 0.3, thr: float = 2874.31) -> None:
    """Some traffic: access lines, prefill and decode batch lines (logged by the first rank)."""
    for i in range(n):
        log.tick(1)
        log.rec(None, f'INFO:     10.0.0.{i % 9 + 2}:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
        if version == V9:
            log.rec(rank, f"Prefill batch, #new-seq: 2, #new-token: {1024 + i}, #cached-token: 512, token usage: {usage:.2f}, "
                          f"#running-req: {10 + i}, #queue-req: 0, input throughput (token/s): 8123.45, cuda graph: False")
            log.rec(rank, f"Decode batch, #running-req: {12 + i}, #token: {4000 + 40 * i}, token usage: {usage:.2f}, "
                          f"cuda graph: True, gen throughput (token/s): {thr + i:.2f}, #queue-req: 0")
        else:
            log.rec(rank, f"Prefill batch, #new-seq: 2, #new-token: {1024 + i}, #cached-token: 512, token usage: {usage:.2f}, "
                          f"#running-req: {10 + i}, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                          f"input throughput (token/s): 8123.45")
            log.rec(rank, f"Decode batch, #running-req: {12 + i}, #token: {4000 + 40 * i}, token usage: {usage:.2f}, "
                          f"cuda graph: True, gen throughput (token/s): {thr + i:.2f}, #queue-req: 0")


TP8 = [f"TP{i}" for i in range(8)]
LLAMA_PRE = {r: 78.21 for r in TP8}
LLAMA_KV09 = "KV Cache is allocated. #tokens: 1244811, K size: 23.74 GB, V size: 23.74 GB"
LLAMA_KV23 = "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1232509, K size: 23.51 GB, V size: 23.51 GB"


def healthy_llama() -> None:
    log = Log("2026-02-24", (11, 55, 2))
    log.rec(None, args_09())
    log.tick(8)
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=LLAMA_KV09,
            pool_end={r: 14.20 for r in TP8}, graph=1.71)
    serve(log, V9, "TP0", 5)
    log.write("sglang-0.5.9-llama70b-tp8-healthy.log")

    log = Log("2026-10-31", (9, 12, 1))
    log.rec(None, args_23())
    log.tick(2)
    startup(log, V23, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1232509, kv_line=LLAMA_KV23,
            pool_end={r: 14.70 for r in TP8}, graph=(0.52, 1.68), max_total=(1232509, 8192, 16384, 4096, 131072))
    serve(log, V23, "TP0", 5)
    log.write("sglang-0.5.23-llama70b-tp8-healthy.log")


def low_headroom() -> None:
    log = Log("2026-02-24", (14, 2, 20))
    log.rec(None, args_09(mem_fraction_static=0.95))
    log.tick(8)
    pool = {r: 3.88 for r in TP8}
    pool["TP3"] = 3.41
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1515441,
            kv_line="KV Cache is allocated. #tokens: 1515441, K size: 28.90 GB, V size: 28.90 GB",
            pool_end=pool, graph=1.71, max_total=(1515441, 8192, 16384, 4096, 131072), gap=0.26)
    serve(log, V9, "TP0", 3)
    log.write("sglang-0.5.9-llama70b-tp8-low-headroom.log")


KIMI_PRE = {r: 95.00 for r in TP8}
KIMI_PRE["TP3"] = 94.60
# Weights per rank: the published Kimi-K2.5 checkpoint (595.1 GB: INT4 group-32 experts, the rest
# bf16, a ~0.9 GB vision tower) held as SGLang's TP8 sharding holds it on NVIDIA cards: experts,
# embeddings, lm_head and the attention heads split by 8; MLA's q_a/kv_a projections, norms, routers
# and the vision tower whole (tests/data/models/kimi-k2.5). The marlin INT4 MoE path repacks the
# packed weights into tensors of the same size and empties its g_idx buffers when the checkpoint has
# no act-order, so nothing else stays resident. A real ROCm log of the same checkpoint loads 73.58
# (docs/PLAN.md, "Where it misses").
KIMI_W = 71.82
KIMI_CELL = (512 + 64) * 61 * 2  # MLA: (kv_lora_rank + qk_rope_head_dim) × layers × bf16, not split by TP


def kimi_tokens(mfs: float) -> int:
    """SGLang's profile_max_num_token on the worst rank: (A − P·(1 − mfs)) / cell, page size 1."""
    p = min(KIMI_PRE.values())
    return int(((p - KIMI_W) - p * (1 - mfs)) * 2**30 // KIMI_CELL)


def host_pool_tokens(gb: float) -> int:
    """HiCache's host pool holds `--hicache-size` GB per rank of the same cells."""
    return int(gb * 2**30 // KIMI_CELL)


def kimi(version: str, mfs: float) -> None:
    """The acceptance story: Kimi-K2.5 (MLA), TP8 on 96 GB cards, TP3 sharing its GPU with a stray process."""
    day = "2026-02-24" if version == V9 else "2026-10-31"
    log = Log(day, (11, 50, 2))
    kw = dict(model_path="/models/Kimi-K2.5", tokenizer_path="/models/Kimi-K2.5", trust_remote_code=True,
              mem_fraction_static=mfs, port=8000, enable_hierarchical_cache=True, hicache_size=48,
              context_length=262144 if version == V23 else None)
    log.rec(None, args_09(**kw, cuda_graph_max_bs=256) if version == V9 else args_23(**kw, cuda_graph_max_bs_decode=256))
    log.tick(8)
    healthy = mfs < 0.9
    tokens = kimi_tokens(mfs)
    kv_gb = tokens * KIMI_CELL / 2**30
    before = 9.26 if healthy else 4.57  # TP3's `Memory pool end`; the other ranks have 0.40 GiB more
    pool = {r: round(before + 0.40, 2) for r in TP8}
    pool["TP3"] = before
    # graphs take 3.75 GiB in both versions (0.5.23 splits them over the prefill and decode captures)
    graph: float | tuple[float, float] = 3.75 if version == V9 else (0.52, 3.23)
    kv_line = (f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gb:.2f} GB" if version == V9 else
               f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, KV size: {kv_gb:.2f} GB")
    startup(log, version, TP8, pre=KIMI_PRE, weights=KIMI_W, kv_tokens=tokens, kv_line=kv_line, pool_end=pool,
            graph=graph, model_type="KimiK25ForConditionalGeneration", shards=64, port=8000, gap=0.0,
            max_total=(tokens, 8192, 16384, 2048, 262144), hicache_gb=48.0, hicache_tokens=host_pool_tokens(48.0))
    serve(log, version, "TP0", 6, usage=0.41)
    name = f"sglang-{version}-kimi-{mfs:.2f}-{'healthy' if healthy else 'prefill-oom'}.log"
    if not healthy:
        log.tick(1)
        if version == V9:
            log.rec("TP0", "Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.71, #running-req: 212, "
                           "#queue-req: 17, input throughput (token/s): 18934.22, cuda graph: False")
        else:
            log.rec("TP0", "Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.71, #running-req: 212, "
                           "#queue-req: 17, #pending-token: 0, cuda graph: False, input throughput (token/s): 18934.22")
        log.tick(1)
        log.rec("TP3", "Scheduler hit an exception: Traceback (most recent call last):")
        for frame, code in [
            ('File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process', "scheduler.event_loop_overlap()"),
            ('File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 1093, in event_loop_overlap', "batch_result = self.run_batch(batch)"),
            ('File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 2188, in run_batch', "batch_result = self.model_worker.forward_batch_generation("),
            ('File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2442, in forward', "return self._forward_raw("),
            ('File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend', "return self.model.forward("),
            ('File "/opt/sglang/python/sglang/srt/models/deepseek_v2.py", line 2911, in forward', "hidden_states = self.model("),
        ]:
            log.raw("  " + frame)
            log.raw("    " + code)
        log.raw("torch.OutOfMemoryError: " + oom_text("1.75 GiB", 3, "94.97 GiB", "412.56 MiB", "94.55 GiB",
                                                   # weights + KV pool + req_to_token + the batch's activations
                                                   alloc=f"{KIMI_W + kimi_tokens(0.93) * KIMI_CELL / 2**30 + 2.14:.2f} GiB"))
        log.raw("")
        log.rec(None, "SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        if version == V23:
            log.rec(None, "kill_process_tree called: parent_pid=40121, include_parent=True, pid=40121")
        log.raw("Killed")
    log.write(name)


def graph_capture_oom() -> None:
    for version in (V9, V23):
        log = Log("2026-02-25", (10, 0, 0))
        log.rec(None, args_09(mem_fraction_static=0.97) if version == V9 else args_23(mem_fraction_static=0.97))
        pool = {r: 1.52 for r in TP8}
        kv = LLAMA_KV09 if version == V9 else LLAMA_KV23
        startup(log, version, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1560000, kv_line=kv, pool_end=pool,
                graph=1.71 if version == V9 else (0.52, 1.68), upto="capture" if version == V9 else "capture2")
        log.tick(3)
        log.rec("TP5", "Scheduler hit an exception: Traceback (most recent call last):")
        runner = "cuda_graph_runner.py" if version == V9 else "decode_cuda_graph_runner.py"
        for frame in [
            'File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3160, in run_scheduler_process',
            'File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 412, in __init__',
            'File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2101, in init_device_graphs',
            f'File "/opt/sglang/python/sglang/srt/model_executor/{runner}", line 388, in __init__',
            f'File "/opt/sglang/python/sglang/srt/model_executor/{runner}", line 512, in capture',
            f'File "/opt/sglang/python/sglang/srt/model_executor/{runner}", line 601, in capture_one_batch_size',
        ]:
            log.raw("  " + frame)
        log.raw("torch.OutOfMemoryError: " + oom_text("512.00 MiB", 5, "79.19 GiB", "201.06 MiB", "78.98 GiB"))
        log.raw("")
        log.raw("During handling of the above exception, another exception occurred:")
        log.raw("")
        log.raw("Traceback (most recent call last):")
        log.raw(f'  File "/opt/sglang/python/sglang/srt/model_executor/{runner}", line 395, in __init__')
        log.raw("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 5 has a total capacity of 79.19 GiB of which 201.06 MiB is free.")
        log.raw("Possible solutions:")
        log.raw("1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)")
        if version == V9:
            log.raw("2. set --cuda-graph-max-bs to a smaller value (e.g., 16)")
            log.raw("3. disable torch compile by not using --enable-torch-compile")
            log.raw("4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)")
        else:
            log.raw("2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)")
            log.raw("3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)")
        log.raw("Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose")
        log.raw("")
        log.rec(None, "Received sigquit from a child process. It usually means the child failed.")
        log.raw("Killed")
        log.write(f"sglang-{version}-llama70b-graph-capture-oom.log")


def kv_exhausted() -> None:
    for version, stage in ((V9, "Prefill"), (V23, "Decode")):
        log = Log("2026-02-26", (8, 0, 0))
        log.rec(None, args_09() if version == V9 else args_23())
        kv = LLAMA_KV09 if version == V9 else LLAMA_KV23
        startup(log, version, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811 if version == V9 else 1232509,
                kv_line=kv, pool_end={r: 14.20 for r in TP8}, graph=1.71 if version == V9 else (0.52, 1.68))
        serve(log, version, "TP0", 4, usage=0.97)
        log.tick(1)
        log.rec("TP0", "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 24576, #new_token_ratio: 0.4100 -> 0.7000")
        log.rec("TP0", "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 16384, #new_token_ratio: 0.7000 -> 0.9000")
        serve(log, version, "TP0", 1, usage=0.99)
        log.tick(1)
        tok = 8192 if stage == "Prefill" else 96
        log.rec("TP0", f"{stage} out of memory. Try to lower your batch size.")
        log.raw(f"Try to allocate {tok} tokens.")
        log.raw("#available_tokens: 1021, #evictable_tokens: 0")
        log.rec("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
        log.raw('  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process')
        fn = "prepare_for_extend" if stage == "Prefill" else "prepare_for_decode"
        log.raw(f'  File "/opt/sglang/python/sglang/srt/managers/schedule_batch.py", line 1402, in {fn}')
        log.raw(f'  File "/opt/sglang/python/sglang/srt/mem_cache/common.py", line 211, in alloc_for_{stage.lower()}')
        log.raw(f"RuntimeError: {stage} out of memory. Try to lower your batch size.")
        log.raw(f"Try to allocate {tok} tokens.")
        log.raw("#available_tokens: 1021, #evictable_tokens: 0")
        log.raw("")
        log.rec(None, "SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        log.write(f"sglang-{version}-llama70b-kv-pool-exhausted-{stage.lower()}.log")


def init_not_enough() -> None:
    log = Log("2026-02-27", (9, 0, 0))
    log.rec(None, args_09(mem_fraction_static=0.2))
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=0, kv_line="", pool_end={}, graph=1.71,
            upto="weights")
    log.tick(1)
    log.rec("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
    log.raw('  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3160, in run_scheduler_process')
    log.raw('  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 1650, in init_memory_pool')
    log.raw("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.2")
    log.raw("")
    log.rec(None, "Received sigquit from a child process. It usually means the child failed.")
    log.write("sglang-0.5.9-llama70b-init-not-enough-memory.log")

    log = Log("2026-10-31", (10, 0, 0))
    log.rec(None, args_23(mem_fraction_static=0.5, model_path="/models/Kimi-K2.5"))
    startup(log, V23, TP8, pre=KIMI_PRE, weights=KIMI_W, kv_tokens=0, kv_line="", pool_end={}, graph=(0.5, 2.9),
            model_type="KimiK25ForConditionalGeneration", shards=64, upto="weights")
    log.tick(1)
    log.rec("TP2", "Scheduler hit an exception: Traceback (most recent call last):")
    log.raw('  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3301, in run_scheduler_process')
    log.raw('  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 1777, in init_memory_pool')
    log.raw('  File "/opt/sglang/python/sglang/srt/model_executor/memory_sizing.py", line 88, in profile_max_num_token')
    log.raw("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5. Raise "
            "--mem-fraction-static above 0.845 (minimum viable = 1 - available/pre = 0.8358). If using speculative "
            "decoding, draft weights are now counted.")
    log.raw("")
    log.rec(None, "Received sigquit from a child process. It usually means the child failed.")
    log.rec(None, "kill_process_tree called: parent_pid=50211, include_parent=True, pid=50211")
    log.write("sglang-0.5.23-kimi-init-not-enough-memory.log")


def hicache_value_error() -> None:
    for version in (V9, V23):
        log = Log("2026-02-24", (16, 19, 30))
        kw = dict(enable_hierarchical_cache=True, hicache_size=200)
        log.rec(None, args_09(**kw) if version == V9 else args_23(**kw))
        kv = LLAMA_KV09 if version == V9 else LLAMA_KV23
        startup(log, version, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=kv,
                pool_end={r: 14.20 for r in TP8}, graph=1.71 if version == V9 else (0.52, 1.68), upto="captured")
        log.tick(1)
        tokens = 1244811 if version == V9 else 1232509
        log.rec("TP0", f"max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, "
                       "context_len=131072, available_gpu_mem=12.20 GB")
        if version == V9:
            for r in ("TP0", "TP2", "TP1", "TP4", "TP5"):
                log.rec(r, "Allocating 200.00 GB host memory for hierarchical KV cache.")
            failing, free = "TP6", "128.41"
        else:
            log.rec("TP0", "HiCache memory headroom: host 1006.2 GiB, cgroup 1024.0 GiB")
            failing, free = "TP6", "133.70"
        log.tick(17)
        log.rec(failing, "Scheduler hit an exception: Traceback (most recent call last):")
        log.raw('  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 702, in init_cache_with_memory_pool')
        log.raw("    self.tree_cache = HiRadixCache(params=params, server_args=server_args)")
        log.raw('  File "/opt/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 179, in __init__')
        log.raw("    raise ValueError(")
        log.raw(f"ValueError: Not enough host memory available. Requesting 200.00 GB but only have {free} GB free. "
                "Please reduce the size of the hierarchical cache.")
        log.raw("")
        log.rec(None, "Received sigquit from a child process. It usually means the child failed.")
        log.raw("Killed")
        log.write(f"sglang-{version}-llama70b-hicache-host-memory.log")


def hicache_smaller_than_device() -> None:
    """0.5.9 asserts the host pool is larger than the device pool (memory_pool_host.py
    HostKVCache.__init__); `--hicache-ratio 0.5` makes it half as large, on every rank."""
    log = Log("2026-02-24", (16, 40, 0))
    log.rec(None, args_09(enable_hierarchical_cache=True, hicache_ratio=0.5))
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=LLAMA_KV09,
            pool_end={r: 14.20 for r in TP8}, graph=1.71, upto="captured")
    log.tick(1)
    log.rec("TP0", "max_total_num_tokens=1244811, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, "
                   "context_len=131072, available_gpu_mem=12.20 GB")
    log.rec("TP0", "Scheduler hit an exception: Traceback (most recent call last):")
    log.raw('  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 702, in init_cache_with_memory_pool')
    log.raw("    self.tree_cache = HiRadixCache(params=params, server_args=server_args)")
    log.raw('  File "/opt/sglang/python/sglang/srt/mem_cache/hiradix_cache.py", line 70, in __init__')
    log.raw("    self.token_to_kv_pool_host = MHATokenToKVPoolHost(")
    log.raw('  File "/opt/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 288, in __init__')
    log.raw("    super().__init__(")
    log.raw('  File "/opt/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 168, in __init__')
    log.raw("    assert (")
    log.raw("AssertionError: The host memory should be larger than the device memory with the current protocol")
    log.raw("")
    log.rec(None, "Received sigquit from a child process. It usually means the child failed.")
    log.raw("Killed")
    log.write("sglang-0.5.9-llama70b-hicache-smaller-than-device.log")


def host_oom_kill() -> None:
    for version in (V9, V23):
        log = Log("2026-02-24", (17, 0, 0))
        kw = dict(enable_hierarchical_cache=True, hicache_size=300, model_path="/models/Kimi-K2.5")
        log.rec(None, args_09(**kw) if version == V9 else args_23(**kw))
        pool = {r: 9.66 for r in TP8}
        tok = kimi_tokens(0.88)
        kv_gb = tok * KIMI_CELL / 2**30
        kv = (f"KV Cache is allocated. #tokens: {tok}, KV size: {kv_gb:.2f} GB" if version == V9 else
              f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tok}, KV size: {kv_gb:.2f} GB")
        startup(log, version, TP8, pre=KIMI_PRE, weights=KIMI_W, kv_tokens=tok, kv_line=kv, pool_end=pool,
                graph=3.46 if version == V9 else (0.52, 2.94), model_type="KimiK25ForConditionalGeneration",
                shards=64, max_total=(tok, 8192, 16384, 2048, 262144), hicache_gb=300.0,
                hicache_tokens=host_pool_tokens(300.0), upto="allocated")
        log.tick(40)
        if version == V9:
            log.rec(None, "Rank 6 scheduler is dead. Please check if there are relevant logs.")
            log.rec(None, "Exit code: -9")
            log.raw("Traceback (most recent call last):")
            log.raw('  File "/opt/sglang/python/sglang/srt/entrypoints/engine.py", line 904, in _wait_for_scheduler_ready')
            log.raw("EOFError")
        else:
            log.rec(None, "Rank 6 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common "
                          "cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.")
        log.raw("Killed")
        log.write(f"sglang-{version}-kimi-host-oom-killed.log")


def nccl_timeout() -> None:
    log = Log("2026-03-04", (12, 40, 0))
    log.rec(None, args_09())
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=LLAMA_KV09,
            pool_end={r: 14.20 for r in TP8}, graph=1.71)
    serve(log, V9, "TP0", 3)
    log.tick(600)
    log.raw("[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, NumelIn=8080, NumelOut=129280, Timeout(ms)=600000) ran for "
            "600049 milliseconds before timing out.")
    log.raw("[rank4]:[E304 12:54:52.123011234 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 4] Exception (either an "
            "error or timeout) detected by watchdog at work: 151721, last enqueued NCCL work: 151721, last completed NCCL work: 151720.")
    log.raw("terminate called after throwing an instance of 'c10::DistBackendError'")
    log.rec(None, "SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    log.raw("Killed")
    log.write("sglang-0.5.9-llama70b-nccl-watchdog-timeout.log")


def warmup_failed() -> None:
    log = Log("2026-03-05", (9, 0, 0))
    log.rec(None, args_09())
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=LLAMA_KV09,
            pool_end={r: 14.20 for r in TP8}, graph=1.71, upto="uvicorn")
    log.tick(120)
    log.rec(None, "Initialization failed. warmup error: Traceback (most recent call last):")
    log.raw('  File "/opt/sglang/python/sglang/srt/entrypoints/http_server.py", line 1409, in _wait_and_warmup')
    log.raw('  File "/opt/sglang/python/sglang/srt/entrypoints/http_server.py", line 1350, in _execute_server_warmup')
    log.raw("AssertionError: Warmup request failed: model_info returned 500")
    log.raw("")
    log.raw("Killed")
    log.write("sglang-0.5.9-llama70b-warmup-failed.log")


def port_in_use() -> None:
    log = Log("2026-03-06", (9, 0, 0))
    log.rec(None, args_09())
    startup(log, V9, TP8, pre=LLAMA_PRE, weights=16.49, kv_tokens=1244811, kv_line=LLAMA_KV09,
            pool_end={r: 14.20 for r in TP8}, graph=1.71, upto="allocated")
    log.rec(None, "INFO:     Started server process [40121]")
    log.rec(None, "INFO:     Waiting for application startup.")
    log.rec(None, "INFO:     Application startup complete.")
    log.rec(None, "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use")
    log.rec(None, "INFO:     Waiting for application shutdown.")
    log.rec(None, "INFO:     Application shutdown complete.")
    log.write("sglang-0.5.9-llama70b-port-in-use.log")


def single_gpu() -> None:
    pre = {"": 22.05}
    for version in (V9, V23):
        log = Log("2026-03-07", (9, 0, 0), ms=version == V23)
        kw = dict(model_path="Qwen/Qwen2.5-7B-Instruct", tp_size=1, mem_fraction_static=0.85, chunked_prefill_size=2048)
        log.rec(None, args_09(**kw) if version == V9 else args_23(**kw))
        kv = ("KV Cache is allocated. #tokens: 99072, K size: 2.65 GB, V size: 2.65 GB" if version == V9 else
              "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 99072, K size: 2.65 GB, V size: 2.65 GB")
        log.tick(0.123)
        startup(log, version, [""], pre=pre, weights=14.25, kv_tokens=99072, kv_line=kv, pool_end={"": 2.46},
                graph=0.31 if version == V9 else (0.11, 0.20), model_type="Qwen2ForCausalLM", shards=4,
                max_total=(99072, 2048, 16384, 2048, 32768))
        serve(log, version, None, 3)
        log.write(f"sglang-{version}-qwen7b-single-gpu.log", crlf=version == V9)


def dp_attention() -> None:
    ranks = [f"DP{i} TP{i} EP{i}" for i in range(8)]
    pre = {r: 77.90 for r in ranks}
    log = Log("2026-03-08", (9, 0, 0))
    log.rec(None, args_09(model_path="deepseek-ai/DeepSeek-V3", tp_size=8, dp_size=8, ep_size=8, enable_dp_attention=True,
                          mem_fraction_static=0.8))
    startup(log, V9, ranks, pre=pre, weights=67.10, kv_tokens=61952,
            kv_line="KV Cache is allocated. #tokens: 61952, KV size: 4.05 GB", pool_end={r: 6.60 for r in ranks},
            graph=1.20, model_type="DeepseekV3ForCausalLM", shards=163, max_total=(61952, 8192, 16384, 256, 163840))
    serve(log, V9, "DP0 TP0 EP0", 2)
    serve(log, V9, "DP5 TP5 EP5", 2, thr=1500.0)
    log.write("sglang-0.5.9-deepseek-dp-attention.log")


def node1_tp16() -> None:
    ranks = [f"TP{i}" for i in range(8, 16)]
    pre = {r: 78.21 for r in ranks}
    log = Log("2026-03-09", (9, 0, 0))
    # node 1 prints no server_args dump and no batch lines; it serves a dummy /health
    startup(log, V9, ranks, pre=pre, weights=8.25, kv_tokens=2600000,
            kv_line="KV Cache is allocated. #tokens: 2600000, K size: 24.80 GB, V size: 24.80 GB",
            pool_end={r: 13.10 for r in ranks}, graph=1.52, server_ranks_print_max=False, upto="allocated")
    log.rec(None, "INFO:     Started server process [7781]")
    log.rec(None, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    log.rec(None, 'INFO:     10.0.0.1:55100 - "GET /health HTTP/1.1" 200 OK')
    log.write("sglang-0.5.9-llama405b-tp16-node1.log")


def main() -> None:
    healthy_llama()
    low_headroom()
    for version in (V9, V23):
        kimi(version, 0.93)
        kimi(version, 0.88)
    graph_capture_oom()
    kv_exhausted()
    init_not_enough()
    hicache_value_error()
    hicache_smaller_than_device()
    host_oom_kill()
    nccl_timeout()
    warmup_failed()
    port_in_use()
    single_gpu()
    dp_attention()
    node1_tp16()


if __name__ == "__main__":
    main()
