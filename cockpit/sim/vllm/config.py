"""The vLLM simulator's command line: `serve MODEL [vLLM flags] [--sim-* options]`.

The vLLM flags go through the vLLM backend's flag table (`parse_serve_args`), so the simulator
refuses exactly what that vLLM version refuses (renamed and removed flags included). Everything
vLLM decides at start-up is resolved here: the util default, --max-num-seqs and
--max-num-batched-tokens by card size, the largest CUDA-graph capture size.

Memory model (per GPU, GiB; shared/reference/vllm.md §4), tuned so that Qwen3-32B TP2 on H100s
reproduces the reference's healthy start-up (KV 38.35 GiB, 314,160 tokens at util 0.92):
weights W = model / TP, non-torch N, profiled activation A (∝ --max-num-batched-tokens), graph
estimate Ĝ and captured pool G (∝ the largest capture size); budget u·T; KV = u·T − (W + N) − A − Ĝ
from 0.20 (Ĝ = 0 before: graphs come out of the slack).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.backends.base import FlagError
from cockpit.backends.vllm.flags import default_util, parse_serve_args
from cockpit.sim.options import TRAFFIC_MODES, SimUsageError, default_sim_dir, split_sim_options
from cockpit.sim.presets import GPUS, GpuPreset

SIM_VLLM_VERSIONS = ("0.16.0", "0.33.0")
CUDA_CONTEXT_GIB = 0.88  # CUDA context + NCCL at the baseline snapshot (reference: 79.19 − 78.31)
BLOCK_SIZE = 16


@dataclass(frozen=True)
class VllmModel:
    key: str
    hf_name: str
    weights_gib: float  # all of it, bf16
    kv_bytes_per_token: int  # all ranks together (divided by TP per rank)
    max_model_len: int
    non_torch_gib: float = 0.87
    act_gib_per_8k: float = 1.94  # profiled activation peak for an 8192-token batch (per rank at its TP)
    run_act_gib_per_8k: float = 4.12  # the run-time peak of such a batch (sampler, fragmentation)
    graph_gib_512: float = 0.86  # captured pool at capture size 512
    graph_estimate_gib_512: float = 1.10
    capture_transient_gib_512: float = 3.0  # what a capture needs on top while it runs
    load_s: float = 13.0


MODELS: dict[str, VllmModel] = {m.key: m for m in (
    VllmModel("qwen3-32b", "Qwen/Qwen3-32B", 61.18, 262144, 32768),
    VllmModel("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 14.99, 131072, 131072, 0.6, 1.2, 2.4, 0.5, 0.62, 1.6, 6.0),
    VllmModel("qwen3-0.6b", "Qwen/Qwen3-0.6B", 1.12, 114688, 40960, 0.3, 0.4, 0.8, 0.2, 0.25, 0.6, 2.0),
)}


def guess_model(name: str) -> str:
    low = name.lower()
    for key, m in MODELS.items():
        if key in low.replace("_", "-") or m.hf_name.lower() in low:
            return key
    if "8b" in low:
        return "llama-3.1-8b"
    if "0.6b" in low or "small" in low:
        return "qwen3-0.6b"
    return "qwen3-32b"


@dataclass
class VllmSimConfig:
    version: str
    args: dict[str, Any]
    gpu: GpuPreset
    model: VllmModel
    sim_dir: Path
    speed: float
    startup_speed: float  # the clock's rate until the API server is up (--sim-startup-speed), then `speed`
    traffic: str
    seed: int
    num_gpus: int | None
    model_name: str
    served_model_name: str
    host: str
    port: int
    tp: int
    pp: int
    util: float
    kv_cache_bytes: int | None
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    capture_size: int  # 0 = no graphs (--enforce-eager)
    estimate_graphs: bool  # the CUDA-graph estimate is inside the util budget (0.20+)
    log_stats: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def world(self) -> int:
        return self.tp * self.pp

    @property
    def total_gib(self) -> float:
        """T as torch reports it (the card's total less what the driver keeps)."""
        return round(self.gpu.total_gib - self.gpu.context_gib, 2)

    @property
    def new(self) -> bool:
        return self.version == "0.33.0"


_SIM_OPTS = ("--sim-gpu", "--sim-model", "--sim-speed", "--sim-startup-speed", "--sim-traffic", "--sim-version", "--sim-dir", "--sim-seed",
             "--sim-num-gpus", "--sim-backend", "--sim-host-mem-gb")


def split_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    pairs, rest = split_sim_options(argv, _SIM_OPTS)
    return {name[len("--sim-"):]: value for name, value in pairs}, rest


def load_vllm_config(argv: list[str]) -> VllmSimConfig:

    opts, rest = split_args(argv)
    if "serve" not in rest:
        raise SimUsageError("expected `serve MODEL [flags]` (vLLM's own command line)")
    i = rest.index("serve")  # vLLM flags given before `serve` (a wrapper's) count as well
    rest = ["serve", *rest[i + 1 :], *rest[:i]]
    version = opts.get("version", "0.33.0")
    if version not in SIM_VLLM_VERSIONS:
        raise SimUsageError(f"argument --sim-version: invalid choice: {version!r} (choose from {', '.join(SIM_VLLM_VERSIONS)})")
    gpu_key = opts.get("gpu", "h100")
    if gpu_key not in GPUS:
        raise SimUsageError(f"argument --sim-gpu: invalid choice: {gpu_key!r} (choose from {', '.join(GPUS)})")
    traffic = opts.get("traffic", "none")
    if traffic not in TRAFFIC_MODES:
        raise SimUsageError(f"argument --sim-traffic: invalid choice: {traffic!r} (choose from {', '.join(TRAFFIC_MODES)})")
    try:
        speed = float(opts.get("speed", "1"))
        startup_speed = float(opts["startup-speed"]) if "startup-speed" in opts else speed
        seed = int(opts.get("seed", "0"))
        num_gpus = int(opts["num-gpus"]) if "num-gpus" in opts else None
    except ValueError as exc:
        raise SimUsageError(f"invalid --sim-* value: {exc}") from None
    if not speed > 0:
        raise SimUsageError("argument --sim-speed: must be > 0")
    if not startup_speed > 0:
        raise SimUsageError("argument --sim-startup-speed: must be > 0")
    args = parse_serve_args(rest[1:], version, require_model=True)
    model_key = opts.get("model") or guess_model(str(args["model"]))
    if model_key not in MODELS:
        raise SimUsageError(f"argument --sim-model: invalid choice: {model_key!r} (choose from {', '.join(MODELS)})")
    model = MODELS[model_key]
    gpu = GPUS[gpu_key]
    tp = int(args.get("tensor_parallel_size") or 1)
    pp = int(args.get("pipeline_parallel_size") or 1)
    if tp < 1 or pp < 1:
        raise FlagError("--tensor-parallel-size", "tensor_parallel_size and pipeline_parallel_size must be at least 1")
    util = float(args.get("gpu_memory_utilization") or default_util(version))
    if not 0 < util <= 1:
        raise FlagError("--gpu-memory-utilization", f"gpu_memory_utilization must be in (0, 1], got {util}")
    big = gpu.total_gib >= 70
    mml = args.get("max_model_len")
    max_model_len = model.max_model_len if mml in (None, "auto") else int(mml)
    seqs = int(args.get("max_num_seqs") or (1024 if big else 256))
    mbt = int(args.get("max_num_batched_tokens") or (8192 if big else 2048))
    eager = bool(args.get("enforce_eager"))
    cc = args.get("compilation_config") or {}
    capture = int(args.get("max_cudagraph_capture_size") or min(seqs * 2, 512))
    if eager or (isinstance(cc, dict) and str(cc.get("cudagraph_mode", "")).upper() == "NONE"):
        capture = 0
    return VllmSimConfig(
        version=version, args=args, gpu=gpu, model=model,
        sim_dir=Path(opts["dir"]).expanduser() if "dir" in opts else default_sim_dir(int(args.get("port") or 8000)),
        speed=speed, startup_speed=startup_speed, traffic=traffic, seed=seed, num_gpus=num_gpus,
        model_name=str(args["model"]), served_model_name=str(args.get("served_model_name") or args["model"]),
        host=str(args.get("host") or "0.0.0.0"), port=int(args.get("port") or 8000), tp=tp, pp=pp, util=util,
        kv_cache_bytes=int(args["kv_cache_memory_bytes"]) if args.get("kv_cache_memory_bytes") else None,
        max_model_len=max_model_len, max_num_seqs=seqs, max_num_batched_tokens=mbt, capture_size=capture,
        estimate_graphs=version == "0.33.0" and os.environ.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1") != "0",
        log_stats=not args.get("disable_log_stats"),
    )
