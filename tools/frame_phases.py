"""Build the frame -> phase map from the engines' released source (issue 35).

A traceback often names no phase in its exception line, but its frames do: the scheduler's batch
loop, the model runner's forward, the graph runner's capture, the loader. Which function is which is
the engines' knowledge, so it is read from their source, release by release, like the message
catalogue (tools/message_catalogue.py): every Python file of the package is parsed with Python's
own parser, every function it defines is named, and the rules below give the ones that belong to a
phase. Only names are kept (file path inside the package, function name, phase), never code.

Phases (the map's words; the diagnosis folds them into its crash phases, see
cockpit/backends/framephase.py): startup, load, kv_profile, capture, warmup, batch_loop, prefill,
decode, shutdown.

    bash tools/frame_phases_fetch.sh            # the releases' sources (wheels, .py files only)
    python tools/frame_phases.py --engine sglang /tmp/fp/sglang-0.5.23/src ... \
        --engine vllm /tmp/fp/vllm-0.32.0/src ... -o cockpit/backends/data/frame_phases.json

Each source directory holds the package (`sglang/` or `vllm/`); its release is read from the
directory's name (`sglang-0.5.23/src` -> 0.5.23). A function's phase at its newest release wins
when releases disagree.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

# --- the rules: (function name, path inside the package) -> phase -------------------------------

_SHUTDOWN = frozenset(("shutdown", "_shutdown", "__del__", "kill_process_tree", "sigterm_handler",
                       "sigquit_handler", "_sigquit_handler", "shutdown_workers", "_cleanup"))
_CAPTURE = frozenset(("init_cuda_graphs", "init_device_graphs", "capture_model", "_capture_cudagraphs",
                      "capture_graph", "_capture_graphs", "capture_one_batch_size", "init_piecewise_cuda_graphs",
                      "capture_cudagraphs"))
_KV_PROFILE = frozenset(("profile_run", "determine_available_memory", "determine_num_available_blocks",
                         "profile_max_num_token", "_initialize_kv_caches", "initialize_kv_cache", "initialize_cache",
                         "init_cache_with_memory_pool", "get_kv_cache_spec", "initialize_from_config",
                         "init_memory_pool", "profile_cudagraph_memory", "_profile_memory", "init_cache_engine",
                         "initialize_kv_cache_tensors", "get_kv_cache_config", "determine_num_blocks"))
_LOAD = frozenset(("load_model", "get_model", "_initialize_model", "process_weights_after_loading",
                   "load_weights_and_postprocess", "download_weights_from_hf", "safetensors_weights_iterator",
                   "pt_weights_iterator", "np_cache_weights_iterator", "hf_model_weights_iterator"))
_STARTUP = frozenset((
    "init_torch_distributed", "init_distributed_environment", "initialize_model_parallel",
    "ensure_model_parallel_initialized", "init_device", "init_worker", "init_worker_distributed_environment",
    "init_model_parallel_group", "launch_server", "_launch_subprocesses", "launch_core_engines",
    "wait_for_engine_startup", "_wait_for_engine_startup", "wait_for_ready", "_init_executor", "_init_workers_ray",
    "make_async_mp_client", "build_async_engine_client", "from_vllm_config", "from_engine_args", "initialize",
    "init_model_worker", "init_tp_model_worker", "_init_model_runner", "check_server_args", "__post_init__",
    "init_weights_update_group", "_set_envs_and_config", "init_process_group",
))
_PREFILL = frozenset(("forward_extend", "forward_prefill_batch", "process_batch_result_prefill", "get_new_batch_prefill",
                      "_get_new_batch_prefill_raw", "add_one_req", "alloc_for_extend", "prepare_for_extend",
                      "forward_fill_batch", "_prepare_prefill", "_prepare_prompt"))
_DECODE = frozenset(("forward_decode", "forward_decode_batch", "process_batch_result_decode", "prepare_for_decode",
                     "alloc_for_decode", "update_running_batch", "retract_decode", "_prepare_decode"))
_BATCH_LOOP = frozenset((
    "run_batch", "forward_batch_generation", "forward_batch_speculative_generation", "forward_thread_func",
    "forward_thread_func_", "process_batch_result", "get_next_batch_to_run", "forward_step", "exposed_step",
    "run_busy_loop", "_process_engine_step", "step_async", "engine_step", "run_engine_loop", "execute_model_async",
    "_driver_execute_model_async", "_run_workers_async", "execute_dummy_batch", "output_handler",
    "_execute_model_spmd", "start_worker_execution_loop", "_forward_raw", "resolve_last_batch_result",
    "resolve_batch_result", "_run_output_handler", "process_input_sockets", "run_step", "step_with_batch_queue",
))
# files whose constructors run only at start-up (a scheduler, worker, runner, engine core, pool, group)
_STARTUP_INIT_FILES = ("managers/scheduler", "tp_worker", "model_runner", "memory_pool", "mem_cache/", "worker/worker",
                       "gpu_worker", "cpu_worker", "engine/core.py", "llm_engine", "executor/", "parallel_state",
                       "pynccl", "model_loader/", "router/model_rpc", "router/manager", "controller", "hiradix",
                       "radix_cache", "cache_engine")


def phase_of(func: str, path: str) -> str | None:
    """The phase a frame in `func` of package file `path` proves, or None (it proves nothing)."""
    p = path.lower()
    if func in _SHUTDOWN or func.startswith("shutdown"):
        return "shutdown"
    if func in _CAPTURE or ("capture" in func and ("graph" in p or "graph" in func)):
        return "capture"
    if func == "__init__" and "graph_runner" in p:
        return "capture"  # SGLang's graph runners capture in their constructor
    if ("warm" in func and "up" in func) or func in ("warmup", "_dummy_sampler_run", "_wait_and_warmup"):
        return "warmup"
    if func in _KV_PROFILE:
        return "kv_profile"
    if func in _LOAD or func.startswith("load_weights") or ("model_loader/" in p and func.startswith("load")):
        return "load"
    if func in _STARTUP or func.startswith(("init_memory_pool", "init_torch_distributed")):
        return "startup"
    if func == "__init__" and any(k in p for k in _STARTUP_INIT_FILES):
        return "startup"
    if func in _PREFILL or (func.startswith("event_loop") and "prefill" in func):
        return "prefill"  # a disaggregated prefill server's loop runs prefill only
    if func in _DECODE or (func.startswith("event_loop") and "decode" in func):
        return "decode"
    if func in _BATCH_LOOP or func.startswith("event_loop"):
        return "batch_loop"
    if func == "step" and "engine" in p:
        return "batch_loop"
    if func in ("forward", "execute_model") and ("model_runner" in p or "worker" in p):
        return "batch_loop"  # the runner's forward at run time (profile and capture frames sit above it)
    return None


# --- reading a release ------------------------------------------------------------------------------

_RELEASE = re.compile(r"(\d+\.\d+(?:\.\d+)*(?:\.post\d+)?)")


def release_of(src: Path, engine: str) -> str:
    for part in reversed(src.resolve().parts):
        m = _RELEASE.search(part) if part.startswith(engine) else None
        if m:
            return m[1]
    raise SystemExit(f"{src}: no release in its path (name it like {engine}-0.5.23/src)")


def functions(pkg: Path) -> dict[str, set[str]]:
    """package-relative file path -> the names of the functions it defines (methods too)."""
    out: dict[str, set[str]] = {}
    for f in sorted(pkg.rglob("*.py")):
        try:
            tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if names:
            out[f.relative_to(pkg.parent).as_posix()] = names
    return out


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def build(engine: str, sources: list[Path]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(releases read, oldest first; {file: {function: phase}}), newest release's word winning."""
    releases = sorted(((release_of(s, engine), s) for s in sources), key=lambda r: _vkey(r[0]))
    table: dict[str, dict[str, str]] = {}
    for _rel, src in releases:
        pkg = src / engine
        if not pkg.is_dir():
            raise SystemExit(f"{src}: no {engine}/ package in it")
        for path, names in functions(pkg).items():
            for name in names:
                ph = phase_of(name, path)
                if ph is not None:
                    table.setdefault(path, {})[name] = ph
    return [r for r, _ in releases], {p: dict(sorted(fs.items())) for p, fs in sorted(table.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", action="append", nargs="+", metavar=("ENGINE", "SRC"), required=True,
                    help="an engine and its release source directories")
    ap.add_argument("-o", "--out", type=Path, required=True)
    a = ap.parse_args(argv)
    doc = json.loads(a.out.read_text()) if a.out.exists() else {}
    doc["about"] = ("frame -> phase, built by tools/frame_phases.py from the engines' release wheels: "
                    "package file -> function -> phase; names only, no code")
    for group in a.engine:
        engine, srcs = group[0], [Path(s) for s in group[1:]]
        releases, table = build(engine, srcs)
        doc.setdefault("releases", {})[engine] = releases
        doc.setdefault("phases", {})[engine] = table
        print(f"{engine}: {len(releases)} releases, {sum(len(v) for v in table.values())} functions "
              f"in {len(table)} files", file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
