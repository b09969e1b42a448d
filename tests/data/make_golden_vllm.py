"""Writes the golden vLLM logs in this folder (`vllm-*.log`) from vLLM's format strings.

Run `python tests/data/make_golden_vllm.py` after changing a scenario; the .log files are committed
so a reader can open them. The strings are vLLM's own (shared/reference/vllm.md §2, §3, §7, §8,
checked against vLLM's source); the numbers tell the story tests/backends/test_vllm_golden.py asserts.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

OOM_TAIL = (" Including non-PyTorch memory, this process has {inuse} memory in use. Of the allocated memory 75.92 GiB is "
            "allocated by PyTorch, with 1.63 GiB allocated in private pools (e.g., CUDA Graphs), and 402.50 MiB is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")


def oom(req: str, gpu: int, total: str, free: str, inuse: str) -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU {gpu} has a total capacity of "
            f"{total} of which {free} is free." + OOM_TAIL.format(inuse=inuse))


class Log:
    def __init__(self, day: str, h: int, m: int, s: int) -> None:
        self.day, self.t, self.lines = day, h * 3600 + m * 60 + s, []  # type: ignore[var-annotated]

    def tick(self, s: float = 1) -> None:
        self.t += s

    def ts(self) -> str:
        t = int(self.t)
        return f"{self.day} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"

    def rec(self, proc: str | None, level: str, where: str, msg: str) -> None:
        head = f"({proc}) " if proc else ""
        for part in msg.split("\n"):  # vLLM repeats the whole header on every line of a message
            self.lines.append(f"{head}{level} {self.ts()} [{where}] {part}")

    def raw(self, text: str) -> None:
        self.lines.extend(text.split("\n"))

    def write(self, name: str) -> None:
        (HERE / name).write_text("\n".join(self.lines) + "\n", encoding="utf-8")


API, ENG = "APIServer pid=41877", "EngineCore pid=41990"
W0, W1 = "Worker_TP0 pid=42101", "Worker_TP1 pid=42102"


def startup_033(log: Log, util: float, *, kv: float, tokens: int, capture_gb: float, summary: dict[str, float] | None,
                crash_in_capture: bool = False) -> None:
    log.raw("(APIServer pid=41877) INFO 11-29 08:11:58 [utils.py:299] \n"
            "(APIServer pid=41877) INFO 11-29 08:11:58 [utils.py:299]        █     █     █▄   ▄█\n"
            "(APIServer pid=41877) INFO 11-29 08:11:58 [utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0")
    log.rec(API, "INFO", "utils.py:233", "non-default args: {'model_tag': 'Qwen/Qwen3-32B', 'model': 'Qwen/Qwen3-32B', "
            f"'max_model_len': 32768, 'tensor_parallel_size': 2, 'gpu_memory_utilization': {util}}}")
    log.rec(API, "INFO", "model.py:1745", "Using max model len 32768")
    log.rec(API, "INFO", "scheduler.py:239", "Chunked prefill is enabled with max_num_batched_tokens=8192.")
    log.tick(4)
    log.rec(ENG, "INFO", "core.py:98", "Initializing a V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-32B', "
            "speculative_config=None, tokenizer='Qwen/Qwen3-32B', dtype=torch.bfloat16, max_seq_len=32768, "
            "tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=False")
    log.tick(12)
    log.rec("Worker pid=42101", "INFO", "parallel_state.py:1929", "world_size=2 rank=0 local_rank=0 "
            "distributed_init_method=tcp://127.0.0.1:51873 backend=nccl")
    log.rec("Worker pid=42102", "INFO", "parallel_state.py:1929", "world_size=2 rank=1 local_rank=1 "
            "distributed_init_method=tcp://127.0.0.1:51873 backend=nccl")
    log.rec(W0, "INFO", "model_runner.py:131", "Using V2 Model Runner")
    log.rec(W0, "INFO", "model_runner.py:402", "Loading model from scratch...")
    log.raw("Loading safetensors checkpoint shards:   0% Completed | 0/17 [00:00<?, ?it/s]\n"
            "Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:12<00:00,  1.33it/s]")
    log.tick(15)
    log.rec(W0, "INFO", "default_loader.py:291", "Loading weights took 12.80 seconds")
    log.rec(W0, "INFO", "model_runner.py:428", "Model loading took 30.59 GiB memory and 13.187532 seconds")
    log.rec(W1, "INFO", "model_runner.py:428", "Model loading took 30.59 GiB memory and 13.201144 seconds")
    log.tick(48)
    log.rec(W0, "INFO", "backends.py:712", "Compiling a graph for compile range (1, 8192) takes 31.20 s")
    log.raw("Capturing CUDA graphs (PIECEWISE): 100%|██████████| 51/51 [00:04<00:00, 11.02it/s]")
    log.rec(W0, "INFO", "model_runner.py:1163", "Graph capturing finished in 5 secs, took 1.10 GiB")
    log.rec(W1, "INFO", "model_runner.py:1163", "Graph capturing finished in 5 secs, took 1.10 GiB")
    log.tick(2)
    log.rec(W0, "INFO", "gpu_worker.py:772", f"Available KV cache memory: {kv} GiB")
    for w in (W0, W1):
        log.rec(w, "INFO", "gpu_worker.py:787", "CUDA graph memory profiling is enabled (default since v0.21.0). The "
                f"current --gpu-memory-utilization={util:.4f} is equivalent to --gpu-memory-utilization={util - 0.0139:.4f} "
                "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
                f"--gpu-memory-utilization to {util + 0.0139:.4f}. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
    log.rec(ENG, "INFO", "kv_cache_utils.py:1147", f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for 32,768 "
            f"tokens per request: {tokens / 32768:.2f}x")
    if crash_in_capture:
        log.raw("Capturing CUDA graphs (FULL):  94%|█████████▍| 48/51 [00:05<00:00,  9.02it/s]")
        return
    log.raw("Capturing CUDA graphs (PIECEWISE): 100%|██████████| 51/51 [00:04<00:00, 11.31it/s]\n"
            "Capturing CUDA graphs (FULL): 100%|██████████| 51/51 [00:05<00:00,  9.41it/s]")
    log.tick(12)
    for w in (W0, W1):
        log.rec(w, "INFO", "model_runner.py:1163", f"Graph capturing finished in 10 secs, took {capture_gb:.2f} GiB")
    for w in (W0, W1):
        log.rec(w, "INFO", "gpu_worker.py:1003", "CUDA graph pool memory: 0.86 GiB (actual), 1.1 GiB (estimated), "
                "difference: 0.24 GiB (27.9%).")
    if summary:
        s = summary
        for w in (W0, W1):
            log.rec(w, "INFO", "gpu_worker.py:1066",
                    f"Free memory on device ({s['free']}/79.19 GiB) on startup. Desired GPU memory utilization is ({util}, "
                    f"{util * 79.19:.2f} GiB). Actual usage is 31.46 GiB for consumed memory (weights + non-torch), 3.04 GiB "
                    "for peak activation, and 0.86 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
                    f"`--kv-cache-memory={int(s['req'] * 2**30)}` ({s['req']} GiB) to fit into requested memory, or "
                    f"`--kv-cache-memory={int(42.8 * 2**30)}` (42.8 GiB) to fully utilize gpu memory. Current kv cache "
                    f"memory in use is {kv} GiB.")
    log.rec(ENG, "INFO", "core.py:412", "init engine (profile, create kv cache, warmup model) took 78.62 s "
            "(compilation: 47.90 s)")
    log.tick(3)
    log.rec(API, "INFO", "api_server.py:2005", "Supported tasks: ['generate']")
    log.rec(API, "INFO", "entry.py:139", "Starting vLLM server on http://0.0.0.0:8000")
    log.raw("INFO:     Started server process [41877]\nINFO:     Waiting for application startup.\n"
            "INFO:     Application startup complete.\nINFO:     127.0.0.1:47012 - \"GET /health HTTP/1.1\" 200 OK")


def stats(log: Log, n: int, usage: float = 17.4) -> None:
    for i in range(n):
        log.tick(10)
        log.rec(API, "INFO", "loggers.py:335", f"Engine 000: Avg prompt throughput: {1843.2 + i:.1f} tokens/s, Avg "
                f"generation throughput: {912.6 + i:.1f} tokens/s, Running: 24 reqs, Waiting: 0 reqs, GPU KV cache usage: "
                f"{usage:.1f}%, Prefix cache hit rate: 41.3%")
        log.raw(f'INFO:     127.0.0.1:{47100 + i} - "POST /v1/completions HTTP/1.1" 200 OK')


def healthy() -> None:
    log = Log("11-29", 8, 11, 58)
    startup_033(log, 0.92, kv=38.35, tokens=314160, capture_gb=0.86, summary={"free": 78.31, "req": 37.34})
    stats(log, 6)
    log.write("vllm-0.33.0-qwen32b-tp2-0.92-healthy.log")


def capture_oom() -> None:
    log = Log("11-29", 9, 1, 30)
    startup_033(log, 0.98, kv=43.11, tokens=353152, capture_gb=0.0, summary=None, crash_in_capture=True)
    log.tick(11)
    o = oom("1.50 GiB", 1, "79.19 GiB", "1.21 GiB", "77.97 GiB")
    log.rec(W1, "ERROR", "multiproc_executor.py:1189", "WorkerProc hit an exception.\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu/model_runner.py", line 1116, in capture_model\n'
            "    self.cudagraph_manager.capture(self.model, self.kv_caches)\n" + o)
    log.rec(W0, "ERROR", "multiproc_executor.py:1189", "WorkerProc hit an exception.\n" + oom("1.50 GiB", 0, "79.19 GiB", "1.21 GiB", "77.97 GiB"))
    log.rec(ENG, "ERROR", "core.py:1584", "EngineCore failed to start.\nTraceback (most recent call last):\n"
            "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total "
            "capacity of 79.19 GiB of which 1.21 GiB is free.', please check the stack trace above for the root cause")
    log.raw("Process EngineCore:\nTraceback (most recent call last):\n"
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}")
    log.write("vllm-0.33.0-qwen32b-tp2-0.98-graph-capture-oom.log")


def prefill_oom() -> None:
    log = Log("11-29", 10, 0, 0)
    # util 0.97: start-up holds, 3.6 GiB left after start-up, and the first long prompt dies in prefill
    startup_033(log, 0.97, kv=42.32, tokens=346694, capture_gb=0.86, summary={"free": 78.31, "req": 41.3})
    stats(log, 3, usage=30.2)
    log.tick(4)
    log.rec(ENG.replace("EngineCore", "EngineCore"), "ERROR", "dump_input.py:79",
            "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[NewRequestData("
            "req_id=cmpl-5a1b-0,prompt_token_ids_len=30112,mm_features=[],sampling_params=SamplingParams(n=1, "
            "temperature=0.0, max_tokens=256),block_ids=([1, 2, 3],),num_computed_tokens=0,lora_request=None)], "
            "scheduled_cached_reqs=CachedRequestData(req_ids=[], resumed_req_ids=set(), new_token_ids_lens=[], "
            "new_block_ids=[], num_computed_tokens=[], num_output_tokens=[]), num_scheduled_tokens={cmpl-5a1b-0: 8192}, "
            "total_num_scheduled_tokens=8192, scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={}, "
            "num_common_prefix_blocks=[0], finished_req_ids=[], free_encoder_mm_hashes=[])")
    o = oom("4.12 GiB", 1, "79.19 GiB", "2.87 GiB", "76.30 GiB")
    log.rec(W1, "ERROR", "multiproc_executor.py:1189", "WorkerProc hit an exception.\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu/model_runner.py", line 902, in execute_model\n'
            "    hidden_states = self.model(input_ids, positions)\n" + o)
    log.rec(ENG, "ERROR", "core.py:1021", "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
            "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 4.12 GiB. GPU 1 has a total "
            "capacity of 79.19 GiB of which 2.87 GiB is free.', please check the stack trace above for the root cause")
    log.rec(API, "ERROR", "async_llm.py:527", "AsyncLLM output_handler failed.")
    log.raw("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
    log.write("vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log")


ENG16, W16 = "EngineCore_DP0 pid=2210", "Worker_TP0 pid=2290"


def head_016(log: Log, args: str, tp: int = 1) -> None:
    log.rec("APIServer pid=2150", "INFO", "api_server.py:1896", "vLLM API server version 0.16.0")
    log.rec("APIServer pid=2150", "INFO", "utils.py:328", f"non-default args: {{{args}}}")
    log.tick(5)
    log.rec(ENG16, "INFO", "core.py:93", "Initializing a V1 LLM engine (v0.16.0) with config: model='meta-llama/Llama-3.1-8B-Instruct'")
    log.rec(ENG16, "INFO", "parallel_state.py:1165", "world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:40451 backend=nccl")
    log.tick(9)
    log.rec(ENG16, "INFO", "gpu_model_runner.py:2602", "Model loading took 14.9889 GiB and 6.140351 seconds")


def no_cache_blocks() -> None:
    log = Log("02-14", 16, 2, 11)
    head_016(log, "'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'gpu_memory_utilization': 0.2")
    log.tick(14)
    log.rec(ENG16, "INFO", "gpu_worker.py:298", "Available KV cache memory: -1.73 GiB")
    log.rec(ENG16, "ERROR", "core.py:708", "EngineCore failed to start.\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 84, in __init__\n'
            "    self._initialize_kv_caches(vllm_config)\n"
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    log.raw("Process EngineCore_DP0:\nTraceback (most recent call last):\n"
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}")
    log.write("vllm-0.16.0-llama8b-no-cache-blocks.log")


def max_model_len() -> None:
    log = Log("02-14", 17, 20, 0)
    head_016(log, "'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'gpu_memory_utilization': 0.5")
    log.tick(14)
    log.rec(ENG16, "INFO", "gpu_worker.py:298", "Available KV cache memory: 8.34 GiB")
    log.rec(ENG16, "ERROR", "core.py:708", "EngineCore failed to start.\nTraceback (most recent call last):\n"
            "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (8.34 GiB). Based on the available memory, the "
            "estimated maximum model length is 68304. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
    log.write("vllm-0.16.0-llama8b-max-model-len.log")


def free_less_than_util() -> None:
    log = Log("11-30", 7, 0, 0)
    log.rec(API, "INFO", "utils.py:233", "non-default args: {'model_tag': 'Qwen/Qwen3-32B', 'tensor_parallel_size': 2}")
    log.rec(ENG, "INFO", "core.py:98", "Initializing a V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-32B'")
    log.tick(10)
    log.rec("Worker pid=42102", "INFO", "parallel_state.py:1929", "world_size=2 rank=1 local_rank=1 "
            "distributed_init_method=tcp://127.0.0.1:51873 backend=nccl")
    log.rec("Worker pid=42102", "ERROR", "multiproc_executor.py:812", "WorkerProc failed to start.\n"
            "Traceback (most recent call last):\n"
            "ValueError: Free memory on device cuda:1 (40.12/79.19 GiB) on startup is less than desired GPU memory "
            "utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    log.rec(ENG, "ERROR", "core.py:1584", "EngineCore failed to start.\n"
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.")
    log.write("vllm-0.33.0-qwen32b-tp2-free-memory-below-util.log")


def nccl_timeout() -> None:
    log = Log("02-20", 3, 10, 0)
    head_016(log, "'model_tag': 'meta-llama/Llama-3.1-70B-Instruct', 'tensor_parallel_size': 4")
    log.tick(600)
    log.raw("[rank2]:[E220 03:20:15.123456 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=8192, NumelOut=8192, Timeout(ms)=600000) ran for "
            "600013 milliseconds before timing out.")
    log.write("vllm-0.16.0-llama70b-tp4-nccl-timeout.log")


def nccl_error() -> None:
    log = Log("11-30", 9, 0, 0)
    log.rec(API, "INFO", "utils.py:233", "non-default args: {'model_tag': 'Qwen/Qwen3-32B', 'tensor_parallel_size': 2}")
    log.rec(ENG, "INFO", "core.py:98", "Initializing a V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-32B'")
    log.rec("Worker pid=42101", "ERROR", "multiproc_executor.py:812", "WorkerProc failed to start.\n"
            "Traceback (most recent call last):\n"
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3")
    log.rec(ENG, "ERROR", "core.py:1584", "EngineCore failed to start.")
    log.write("vllm-0.33.0-qwen32b-tp2-nccl-error.log")


def port_in_use() -> None:
    log = Log("11-30", 10, 0, 0)
    log.rec(API, "INFO", "utils.py:233", "non-default args: {'model_tag': 'Qwen/Qwen3-0.6B', 'port': 8000}")
    log.raw("Traceback (most recent call last):\n"
            "OSError: [Errno 98] Address already in use")
    log.write("vllm-0.33.0-port-in-use.log")


def startup_error() -> None:
    log = Log("11-30", 11, 0, 0)
    log.rec(API, "INFO", "utils.py:233", "non-default args: {'model_tag': 'Qwen/Qwen3-0.6B', 'quantization': 'fp9'}")
    log.rec(ENG, "INFO", "core.py:98", "Initializing a V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-0.6B'")
    log.rec(ENG, "ERROR", "core.py:1584", "EngineCore failed to start.\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 112, in __init__\n'
            "ValueError: Unknown quantization method: fp9. Must be one of ['awq', 'fp8', 'gptq'].")
    log.raw("Process EngineCore:\nTraceback (most recent call last):\n"
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}")
    log.write("vllm-0.33.0-startup-error.log")


def host_oom_killed() -> None:
    """A worker SIGKILLed: alone, the sender is unknown (`…-worker-sigkilled.log`); run as a Slurm
    step, slurmstepd's own line (src/plugins/task/cgroup: `Detected %lu oom_kill event%s in %ps.
    Some of the step tasks have been OOM Killed.`) proves the OOM killer (`…-host-oom-killed.log`)."""
    for name, slurm in (("worker-sigkilled", False), ("host-oom-killed", True)):
        log = Log("11-30", 12, 0, 0)
        startup_033(log, 0.92, kv=38.35, tokens=314160, capture_gb=0.86, summary={"free": 78.31, "req": 37.34})
        stats(log, 2)
        log.rec(ENG, "ERROR", "multiproc_executor.py:240", "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), "
                "shutting down executor.")
        if slurm:
            log.raw("slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been "
                    "OOM Killed.")
        log.write(f"vllm-0.33.0-qwen32b-tp2-{name}.log")


def single_gpu_0101() -> None:
    """0.10.1.1: `(EngineCore_0 pid=…)`, two-line KV size, `Starting vLLM API server 0 on`, prefixed uvicorn."""
    log = Log("08-17", 2, 55, 0)
    a, e = "APIServer pid=3402897", "EngineCore_0 pid=3403012"
    log.rec(a, "INFO", "api_server.py:1805", "vLLM API server version 0.10.1.1")
    log.rec(a, "INFO", "utils.py:326", "non-default args: {'model_tag': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 16384}")
    log.rec(e, "INFO", "core.py:74", "Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwen/Qwen2.5-7B-Instruct'")
    log.rec(e, "INFO", "parallel_state.py:1134", "world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:33211 backend=nccl")
    log.tick(20)
    log.rec(e, "INFO", "gpu_model_runner.py:2007", "Model loading took 14.2488 GiB and 5.011421 seconds")
    log.tick(25)
    log.rec(e, "INFO", "gpu_worker.py:276", "Available KV cache memory: 51.30 GiB")
    log.rec(e, "INFO", "kv_cache_utils.py:849", "GPU KV cache size: 960,592 tokens")
    log.rec(e, "INFO", "kv_cache_utils.py:853", "Maximum concurrency for 16,384 tokens per request: 58.63x")
    log.raw("(EngineCore_0 pid=3403012) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:03<00:00, 19.27it/s]")
    log.tick(4)
    log.rec(e, "INFO", "gpu_model_runner.py:2708", "Graph capturing finished in 4 secs, took 0.53 GiB")
    log.rec(e, "INFO", "core.py:214", "init engine (profile, create kv cache, warmup model) took 40.17 seconds")
    log.rec(a, "INFO", "api_server.py:1611", "Starting vLLM API server 0 on http://0.0.0.0:8000")
    log.raw("(APIServer pid=3402897) INFO:     Started server process [3402897]\n"
            "(APIServer pid=3402897) INFO:     Application startup complete.")
    log.tick(30)
    log.rec(a, "INFO", "loggers.py:123", "Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: "
            "1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%")
    log.write("vllm-0.10.1.1-qwen7b-single-gpu.log")


def main() -> None:
    for scenario in (healthy, capture_oom, prefill_oom, no_cache_blocks, max_model_len, free_less_than_util,
                     nccl_timeout, nccl_error, port_in_use, startup_error, host_oom_killed, single_gpu_0101):
        scenario()


if __name__ == "__main__":
    main()
