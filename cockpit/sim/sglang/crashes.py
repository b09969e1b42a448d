"""The text a dying SGLang process prints: tracebacks and error messages, per version.

The frames name the functions an operator (and Cockpit's parser) reads to tell the phase:
`forward_extend` for prefill, `forward_decode` for decode, the graph runner's `capture` for graph
capture, `init_cache_with_memory_pool` / `HiRadixCache` for cache init.

One table, CRASHES: for each crash kind and SGLang version, the traceback's frames and the exception
line(s) after them; `crash_text` renders a row with the values the dying rank knows (`{oom}`, …).
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit.sim.sglang.config import SIM_VERSIONS
from cockpit.sim.sglang.logfmt import fmt_size

SITE = "/usr/local/lib/python3.12/dist-packages"
PYLIB = "/usr/lib/python3.12"

OOM_DOC_URL = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"


Frame = tuple[str, int, str, str]
"""(file, line, function, the source line it quotes): a path not starting with `/` or `<` is under
dist-packages; an empty quote prints no source line (frozen modules)."""


@dataclass(frozen=True)
class Crash:
    """How one crash kind ends an SGLang process on one version. Both parts are templates: `{name}`
    is a value the dying rank passes to crash_text, a literal brace is doubled."""

    frames: tuple[Frame, ...]
    error: str  # the exception line(s) after the frames, each ending in a newline


def crash_text(kind: str, version: str, **fields: object) -> str:
    """The traceback and exception a process prints when it dies of `kind` (a key of CRASHES)."""
    crash = CRASHES[kind][version]
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in crash.frames:
        full = path if path.startswith(("<", "/")) else f"{SITE}/{path}"
        out.append(f'  File "{full}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    out.append(crash.error)
    return "\n".join(out).format(**fields)


def not_enough_memory_fields(available_gib: float, pre_gib: float) -> dict[str, float]:
    """0.5.23's advice when the weights leave no KV cache: the smallest viable --mem-fraction-static
    (`1 - available/pre`) and the value it suggests (0.02 above that, at most 0.999)."""
    minimum = 1 - available_gib / pre_gib if pre_gib > 0 else 1.0
    return {"minimum": minimum, "suggested": min(0.999, minimum + 0.02)}


def cuda_oom_text(
    *,
    alloc_bytes: float,
    gpu_index: int,
    total_gib: float,
    free_bytes: float,
    process_gib: float,
    allocated_gib: float,
    graph_gib: float,
    reserved_unallocated_gib: float,
) -> str:
    """PyTorch's `CUDA out of memory.` message, in the caching allocator's own words."""
    private = f"with {fmt_size(graph_gib * 2**30)} allocated in private pools (e.g., CUDA Graphs), " if graph_gib > 0 else ""
    return (
        f"CUDA out of memory. Tried to allocate {fmt_size(alloc_bytes)}. GPU {gpu_index} has a total capacity of "
        f"{fmt_size(total_gib * 2**30)} of which {fmt_size(free_bytes)} is free. Including non-PyTorch memory, this "
        f"process has {fmt_size(process_gib * 2**30)} memory in use. Of the allocated memory "
        f"{fmt_size(allocated_gib * 2**30)} is allocated by PyTorch, {private}and "
        f"{fmt_size(reserved_unallocated_gib * 2**30)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        f"fragmentation.  See documentation for Memory Management  ({OOM_DOC_URL})"
    )


# ---- the table ----
Frames = tuple[Frame, ...]
SCHEDULER = "sglang/srt/managers/scheduler.py"
RUNNER = "sglang/srt/model_executor/model_runner.py"
HOST_POOL = "sglang/srt/mem_cache/memory_pool_host.py"
MPCONN = f"{PYLIB}/multiprocessing/connection.py"
TORCH_CONTEXT: Frame = (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)")


def _kind(frames: Frames | dict[str, Frames], error: str | dict[str, str]) -> dict[str, Crash]:
    """One crash kind on every version: its frames and its error each the same on all, or per version."""
    return {
        v: Crash(frames[v] if isinstance(frames, dict) else frames, error[v] if isinstance(error, dict) else error)
        for v in SIM_VERSIONS
    }


def _scheduler(line: int) -> Frames:
    return ((SCHEDULER, line, "run_scheduler_process", "scheduler = Scheduler("),)


# the scheduler process at run time (its event loop) and at start-up (building the Scheduler)
EVENT_LOOP: dict[str, Frames] = {
    "0.5.9": ((SCHEDULER, 3169, "run_scheduler_process", "scheduler.event_loop_overlap()"),),
    "0.5.23": ((SCHEDULER, 3516, "run_scheduler_process", "scheduler.run_event_loop()"),),
}
NEW_SCHEDULER = {"0.5.9": _scheduler(3160), "0.5.23": _scheduler(3501)}
NEW_MODEL_RUNNER: Frames = (
    (SCHEDULER, 348, "__init__", "self.init_model_worker()"),
    (SCHEDULER, 512, "init_model_worker", "self.tp_worker = TpModelWorker("),
    ("sglang/srt/managers/tp_worker.py", 237, "__init__", "self._model_runner = ModelRunner("),
    (RUNNER, 372, "__init__", "self.initialize(min_per_gpu_memory)"),
)


def _in_model_runner_init(*frames: Frame) -> dict[str, Frames]:
    """A start-up crash inside ModelRunner.initialize: the path there, then `frames`."""
    return {v: NEW_SCHEDULER[v] + NEW_MODEL_RUNNER + frames for v in SIM_VERSIONS}


HIRADIX_CACHE: Frames = (
    (SCHEDULER, 365, "__init__", "self.init_cache_with_memory_pool()"),
    (SCHEDULER, 702, "init_cache_with_memory_pool", "self.tree_cache = HiRadixCache(params=params, server_args=server_args)"),
    ("sglang/srt/mem_cache/hiradix_cache.py", 118, "__init__", "self.token_to_kv_pool_host = MLATokenToKVPoolHost("),
)
MODEL_FORWARD: Frames = (  # the model's own forward, down to the MoE layer whose activations do not fit
    TORCH_CONTEXT,
    ("sglang/srt/models/{arch_file}", 2960, "forward", "hidden_states = self.model("),
    (f"{SITE}/torch/nn/modules/module.py", 1775, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    (f"{SITE}/torch/nn/modules/module.py", 1786, "_call_impl", "return forward_call(*args, **kwargs)"),
    ("sglang/srt/models/{arch_file}", 2784, "forward", "hidden_states, residual = layer("),
    ("sglang/srt/models/{arch_file}", 2511, "forward", "hidden_states = self.mlp("),
    ("sglang/srt/layers/moe/fused_moe_triton/layer.py", 1011, "forward", "return self.forward_impl(hidden_states, topk_output)"),
)
GRAPH_RUNNER = _in_model_runner_init(
    (RUNNER, 531, "initialize", "self.init_device_graphs()"),
    (RUNNER, 2209, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", 381, "__init__", "raise Exception("),
)

TORCH_OOM = "torch.OutOfMemoryError: {oom}\n"
SMALLER_MFS = "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
OPEN_AN_ISSUE = "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
GRAPH_CAPTURE_0_5_9 = (
    "Exception: Capture cuda graph failed: {oom}\n" + SMALLER_MFS
    + "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n" + OPEN_AN_ISSUE
)

# kind -> version -> frames and error; the `{fields}` each kind's text takes are named beside it
CRASHES: dict[str, dict[str, Crash]] = {
    # run time: a prefill batch's activations do not fit (forward_extend) {arch_file} {oom}
    "prefill-oom": _kind({
        "0.5.9": EVENT_LOOP["0.5.9"] + (
            TORCH_CONTEXT,
            (SCHEDULER, 1093, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            (SCHEDULER, 2274, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
            ("sglang/srt/managers/tp_worker.py", 371, "forward_batch_generation",
             "logits_output, can_run_cuda_graph = self.model_runner.forward("),
            (RUNNER, 2427, "forward", "output = self._forward_raw("),
            (RUNNER, 2486, "_forward_raw", "ret = self.forward_extend("),
            (RUNNER, 2359, "forward_extend", "return self.model.forward("),
        ) + MODEL_FORWARD,
        "0.5.23": EVENT_LOOP["0.5.23"] + (
            (SCHEDULER, 1288, "run_event_loop", "self.event_loop_overlap()"),
            TORCH_CONTEXT,
            (SCHEDULER, 1352, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            (SCHEDULER, 2611, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
            ("sglang/srt/managers/tp_worker.py", 402, "forward_batch_generation", "out = self.model_runner.forward("),
            (RUNNER, 2790, "forward", "output = self._forward_raw("),
            (RUNNER, 2851, "_forward_raw", "ret = self.forward_extend("),
            (RUNNER, 2716, "forward_extend", "return self.model.forward("),
        ) + MODEL_FORWARD,
    }, TORCH_OOM),
    # start-up: the CUDA-graph runner's capture; 0.5.23 captures decode graphs, then prefill graphs {oom}
    "graph-capture-oom": _kind(GRAPH_RUNNER, {
        "0.5.9": GRAPH_CAPTURE_0_5_9,
        "0.5.23": "Exception: Capture cuda graph failed: {oom}\n" + SMALLER_MFS
        + "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
        + OPEN_AN_ISSUE,
    }),
    "prefill-graph-capture-oom": _kind(GRAPH_RUNNER, {
        "0.5.9": GRAPH_CAPTURE_0_5_9,
        "0.5.23": "Exception: Capture prefill CUDA graph failed: {oom}\n"
        "Fail when using backend: breakable for prefill runner.\n" + SMALLER_MFS
        + "2. set --cuda-graph-max-bs-prefill to a smaller value\n"
        "3. disable prefill CUDA graph by --cuda-graph-backend-prefill=disabled.\n" + OPEN_AN_ISSUE,
    }),
    # start-up: the weights do not fit {oom}
    "weights-oom": _kind(_in_model_runner_init(
        (RUNNER, 509, "initialize", "self.load_model()"),
        (RUNNER, 944, "load_model", "self.model = get_model("),
        ("sglang/srt/model_loader/loader.py", 683, "load_model", "self.load_weights_and_postprocess("),
    ), TORCH_OOM),
    # start-up: the attention backend's workspace does not fit {oom}
    "workspace-oom": _kind(_in_model_runner_init(
        (RUNNER, 520, "initialize", "self.init_attention_backend()"),
        (RUNNER, 1880, "init_attention_backend", "self.attn_backend = self._get_attention_backend()"),
    ), TORCH_OOM),
    # start-up: the KV pool would have no tokens {mfs}, 0.5.23 also {minimum} {suggested} (not_enough_memory_fields)
    "not-enough-memory": _kind(_in_model_runner_init(
        (RUNNER, 515, "initialize", "self.init_memory_pool("),
        (RUNNER, 1598, "init_memory_pool", "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)"),
    ), {
        "0.5.9": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static={mfs}\n",
        "0.5.23": "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}. "
        "Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
        "If using speculative decoding, draft weights are now counted.\n",
    }),
    # start-up: HiCache's host pool finds too little free host memory {requested_gb} {free_gb}
    "hicache-host-memory": _kind({v: NEW_SCHEDULER[v] + HIRADIX_CACHE + (
        (HOST_POOL, 745, "__init__", "super().__init__("),
        (HOST_POOL, 179, "__init__", "raise ValueError("),
    ) for v in SIM_VERSIONS}, "ValueError: Not enough host memory available. Requesting {requested_gb:.2f} GB but only "
        "have {free_gb:.2f} GB free. Please reduce the size of the hierarchical cache.\n"),
    # start-up: HiCache's host pool would be smaller than the device's (rank.py raises it on 0.5.9 only)
    "hicache-smaller-than-device": _kind(NEW_SCHEDULER["0.5.9"] + HIRADIX_CACHE + (
        (HOST_POOL, 166, "__init__", "assert ("),
    ), "AssertionError: The host memory should be larger than the device memory with the current protocol\n"),
    # run time: the KV pool has no slot for the next decode step and nothing to retract {message}
    "kv-pool-exhausted": _kind({v: EVENT_LOOP[v] + (
        (SCHEDULER, 1093, "event_loop_overlap", "batch = self.get_next_batch_to_run()"),
        (SCHEDULER, 1807, "get_next_batch_to_run", "ret = self.update_running_batch(self.running_batch)"),
        (SCHEDULER, 2160, "update_running_batch", "batch.prepare_for_decode()"),
        ("sglang/srt/managers/schedule_batch.py", 1905, "prepare_for_decode",
         "self.out_cache_loc = alloc_for_decode(self, token_per_req=1)"),
        ("sglang/srt/mem_cache/common.py", 412, "alloc_for_decode",
         "out_cache_loc = alloc_token_slots(batch.tree_cache, bs * token_per_req)"),
        ("sglang/srt/mem_cache/common.py", 298, "alloc_token_slots", "raise RuntimeError(error_msg)"),
    ) for v in SIM_VERSIONS}, "RuntimeError: {message}\n"),
    # the main process, waiting for a scheduler's ready message, when that rank dies (no fields)
    "main-eof": _kind((
        ("<frozen runpy>", 198, "_run_module_as_main", ""),
        ("<frozen runpy>", 88, "_run_code", ""),
        ("sglang/launch_server.py", 32, "<module>", "launch_server(server_args)"),
        ("sglang/srt/entrypoints/http_server.py", 1318, "launch_server",
         "tokenizer_manager, template_manager, scheduler_info, port_args = _launch_subprocesses("),
        ("sglang/srt/entrypoints/engine.py", 897, "_launch_subprocesses", "data = scheduler_pipe_readers[i].recv()"),
        (MPCONN, 250, "recv", "buf = self._recv_bytes()"),
        (MPCONN, 430, "_recv_bytes", "buf = self._recv(4)"),
        (MPCONN, 399, "_recv", "raise EOFError"),
    ), "EOFError\n"),
}
