"""The text a dying SGLang process prints: tracebacks and error messages, per version.

The frames name the functions an operator (and Cockpit's parser) reads to tell the phase:
`forward_extend` for prefill, `forward_decode` for decode, the graph runner's `capture` for graph
capture, `init_cache_with_memory_pool` / `HiRadixCache` for cache init.
"""

from __future__ import annotations

from cockpit.sim.sglang.logfmt import fmt_size

SITE = "/usr/local/lib/python3.12/dist-packages"
PYLIB = "/usr/lib/python3.12"

OOM_DOC_URL = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"


def _frames(frames: list[tuple[str, int, str, str]]) -> str:
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        full = path if path.startswith("<") else f"{SITE}/{path}" if not path.startswith("/") else path
        out.append(f'  File "{full}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    return "\n".join(out)


def _scheduler_top(version: str) -> list[tuple[str, int, str, str]]:
    if version == "0.5.23":
        return [("sglang/srt/managers/scheduler.py", 3516, "run_scheduler_process", "scheduler.run_event_loop()")]
    return [("sglang/srt/managers/scheduler.py", 3169, "run_scheduler_process", "scheduler.event_loop_overlap()")]


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


def prefill_oom_traceback(version: str, arch_file: str, oom: str) -> str:
    frames = _scheduler_top(version)
    if version == "0.5.23":
        frames += [
            ("sglang/srt/managers/scheduler.py", 1288, "run_event_loop", "self.event_loop_overlap()"),
            (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
            ("sglang/srt/managers/scheduler.py", 1352, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            ("sglang/srt/managers/scheduler.py", 2611, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
            ("sglang/srt/managers/tp_worker.py", 402, "forward_batch_generation", "out = self.model_runner.forward("),
            ("sglang/srt/model_executor/model_runner.py", 2790, "forward", "output = self._forward_raw("),
            ("sglang/srt/model_executor/model_runner.py", 2851, "_forward_raw", "ret = self.forward_extend("),
            ("sglang/srt/model_executor/model_runner.py", 2716, "forward_extend", "return self.model.forward("),
        ]
    else:
        frames += [
            (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
            ("sglang/srt/managers/scheduler.py", 1093, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            ("sglang/srt/managers/scheduler.py", 2274, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
            ("sglang/srt/managers/tp_worker.py", 371, "forward_batch_generation", "logits_output, can_run_cuda_graph = self.model_runner.forward("),
            ("sglang/srt/model_executor/model_runner.py", 2427, "forward", "output = self._forward_raw("),
            ("sglang/srt/model_executor/model_runner.py", 2486, "_forward_raw", "ret = self.forward_extend("),
            ("sglang/srt/model_executor/model_runner.py", 2359, "forward_extend", "return self.model.forward("),
        ]
    frames += [
        (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
        (f"sglang/srt/models/{arch_file}", 2960, "forward", "hidden_states = self.model("),
        (f"{SITE}/torch/nn/modules/module.py", 1775, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        (f"{SITE}/torch/nn/modules/module.py", 1786, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"sglang/srt/models/{arch_file}", 2784, "forward", "hidden_states, residual = layer("),
        (f"sglang/srt/models/{arch_file}", 2511, "forward", "hidden_states = self.mlp("),
        ("sglang/srt/layers/moe/fused_moe_triton/layer.py", 1011, "forward", "return self.forward_impl(hidden_states, topk_output)"),
    ]
    return _frames(frames) + f"\ntorch.OutOfMemoryError: {oom}\n"


def capture_oom_traceback(version: str, oom: str, prefill: bool = False) -> str:
    frames = [
        ("sglang/srt/managers/scheduler.py", 3160 if version != "0.5.23" else 3501, "run_scheduler_process", "scheduler = Scheduler("),
        ("sglang/srt/managers/scheduler.py", 348, "__init__", "self.init_model_worker()"),
        ("sglang/srt/managers/scheduler.py", 512, "init_model_worker", "self.tp_worker = TpModelWorker("),
        ("sglang/srt/managers/tp_worker.py", 237, "__init__", "self._model_runner = ModelRunner("),
        ("sglang/srt/model_executor/model_runner.py", 372, "__init__", "self.initialize(min_per_gpu_memory)"),
        ("sglang/srt/model_executor/model_runner.py", 531, "initialize", "self.init_device_graphs()"),
        ("sglang/srt/model_executor/model_runner.py", 2209, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
        ("sglang/srt/model_executor/cuda_graph_runner.py", 381, "__init__", "raise Exception("),
    ]
    head = _frames(frames)
    if version == "0.5.23":
        if prefill:
            return (
                head + f"\nException: Capture prefill CUDA graph failed: {oom}\n"
                "Fail when using backend: breakable for prefill runner.\n"
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs-prefill to a smaller value\n"
                "3. disable prefill CUDA graph by --cuda-graph-backend-prefill=disabled.\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
            )
        return (
            head + f"\nException: Capture cuda graph failed: {oom}\n"
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
            "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        )
    return (
        head + f"\nException: Capture cuda graph failed: {oom}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
    )


def _init_frames(version: str) -> list[tuple[str, int, str, str]]:
    return [
        ("sglang/srt/managers/scheduler.py", 3160 if version != "0.5.23" else 3501, "run_scheduler_process", "scheduler = Scheduler("),
        ("sglang/srt/managers/scheduler.py", 348, "__init__", "self.init_model_worker()"),
        ("sglang/srt/managers/scheduler.py", 512, "init_model_worker", "self.tp_worker = TpModelWorker("),
        ("sglang/srt/managers/tp_worker.py", 237, "__init__", "self._model_runner = ModelRunner("),
        ("sglang/srt/model_executor/model_runner.py", 372, "__init__", "self.initialize(min_per_gpu_memory)"),
    ]


def weights_oom_traceback(version: str, oom: str) -> str:
    frames = [
        *_init_frames(version),
        ("sglang/srt/model_executor/model_runner.py", 509, "initialize", "self.load_model()"),
        ("sglang/srt/model_executor/model_runner.py", 944, "load_model", "self.model = get_model("),
        ("sglang/srt/model_loader/loader.py", 683, "load_model", "self.load_weights_and_postprocess("),
    ]
    return _frames(frames) + f"\ntorch.OutOfMemoryError: {oom}\n"


def workspace_oom_traceback(version: str, oom: str) -> str:
    frames = [
        *_init_frames(version),
        ("sglang/srt/model_executor/model_runner.py", 520, "initialize", "self.init_attention_backend()"),
        ("sglang/srt/model_executor/model_runner.py", 1880, "init_attention_backend", "self.attn_backend = self._get_attention_backend()"),
    ]
    return _frames(frames) + f"\ntorch.OutOfMemoryError: {oom}\n"


def not_enough_memory_traceback(version: str, mfs: float, available: float, pre: float) -> str:
    frames = [
        *_init_frames(version),
        ("sglang/srt/model_executor/model_runner.py", 515, "initialize", "self.init_memory_pool("),
        ("sglang/srt/model_executor/model_runner.py", 1598, "init_memory_pool", "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)"),
    ]
    if version == "0.5.23":
        minimum = 1 - available / pre if pre > 0 else 1.0
        suggested = min(0.999, minimum + 0.02)
        return _frames(frames) + (
            f"\nValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}. "
            f"Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
            "If using speculative decoding, draft weights are now counted.\n"
        )
    return _frames(frames) + (
        "\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: self.server_args.mem_fraction_static={mfs}\n"
    )


def hicache_host_traceback(version: str, requested_gb: float, free_gb: float) -> str:
    frames = [
        ("sglang/srt/managers/scheduler.py", 3160 if version != "0.5.23" else 3501, "run_scheduler_process", "scheduler = Scheduler("),
        ("sglang/srt/managers/scheduler.py", 365, "__init__", "self.init_cache_with_memory_pool()"),
        ("sglang/srt/managers/scheduler.py", 702, "init_cache_with_memory_pool", "self.tree_cache = HiRadixCache(params=params, server_args=server_args)"),
        ("sglang/srt/mem_cache/hiradix_cache.py", 118, "__init__", "self.token_to_kv_pool_host = MLATokenToKVPoolHost("),
        ("sglang/srt/mem_cache/memory_pool_host.py", 745, "__init__", "super().__init__("),
        ("sglang/srt/mem_cache/memory_pool_host.py", 179, "__init__", "raise ValueError("),
    ]
    return _frames(frames) + (
        f"\nValueError: Not enough host memory available. Requesting {requested_gb:.2f} GB but only have "
        f"{free_gb:.2f} GB free. Please reduce the size of the hierarchical cache.\n"
    )


def hicache_smaller_than_device_traceback(version: str) -> str:
    frames = [
        ("sglang/srt/managers/scheduler.py", 3160, "run_scheduler_process", "scheduler = Scheduler("),
        ("sglang/srt/managers/scheduler.py", 365, "__init__", "self.init_cache_with_memory_pool()"),
        ("sglang/srt/managers/scheduler.py", 702, "init_cache_with_memory_pool", "self.tree_cache = HiRadixCache(params=params, server_args=server_args)"),
        ("sglang/srt/mem_cache/hiradix_cache.py", 118, "__init__", "self.token_to_kv_pool_host = MLATokenToKVPoolHost("),
        ("sglang/srt/mem_cache/memory_pool_host.py", 166, "__init__", "assert ("),
    ]
    return _frames(frames) + "\nAssertionError: The host memory should be larger than the device memory with the current protocol\n"


def kv_exhausted_traceback(version: str, message: str) -> str:
    frames = [
        *_scheduler_top(version),
        ("sglang/srt/managers/scheduler.py", 1093, "event_loop_overlap", "batch = self.get_next_batch_to_run()"),
        ("sglang/srt/managers/scheduler.py", 1807, "get_next_batch_to_run", "ret = self.update_running_batch(self.running_batch)"),
        ("sglang/srt/managers/scheduler.py", 2160, "update_running_batch", "batch.prepare_for_decode()"),
        ("sglang/srt/managers/schedule_batch.py", 1905, "prepare_for_decode", "self.out_cache_loc = alloc_for_decode(self, token_per_req=1)"),
        ("sglang/srt/mem_cache/common.py", 412, "alloc_for_decode", "out_cache_loc = alloc_token_slots(batch.tree_cache, bs * token_per_req)"),
        ("sglang/srt/mem_cache/common.py", 298, "alloc_token_slots", "raise RuntimeError(error_msg)"),
    ]
    return _frames(frames) + f"\nRuntimeError: {message}\n"


def main_eof_traceback() -> str:
    frames = [
        ("<frozen runpy>", 198, "_run_module_as_main", ""),
        ("<frozen runpy>", 88, "_run_code", ""),
        ("sglang/launch_server.py", 32, "<module>", "launch_server(server_args)"),
        ("sglang/srt/entrypoints/http_server.py", 1318, "launch_server", "tokenizer_manager, template_manager, scheduler_info, port_args = _launch_subprocesses("),
        ("sglang/srt/entrypoints/engine.py", 897, "_launch_subprocesses", "data = scheduler_pipe_readers[i].recv()"),
        (f"{PYLIB}/multiprocessing/connection.py", 250, "recv", "buf = self._recv_bytes()"),
        (f"{PYLIB}/multiprocessing/connection.py", 430, "_recv_bytes", "buf = self._recv(4)"),
        (f"{PYLIB}/multiprocessing/connection.py", 399, "_recv", "raise EOFError"),
    ]
    return _frames(frames) + "\nEOFError\n"
