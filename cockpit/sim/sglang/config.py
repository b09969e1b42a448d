"""The simulator's command line: SGLang's own flags (through the backend's flag table) plus --sim-*.

`load_config(argv)` separates the --sim-* options, parses the rest exactly as that SGLang version
would (a FlagError carries argparse's text), and resolves everything SGLang decides at start-up:
the default --mem-fraction-static, chunked prefill size, decode graph batch size, page size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.backends.base import FlagError
from cockpit.backends.sglang import flags, memory
from cockpit.sim.options import TRAFFIC_MODES, SimUsageError, default_sim_dir, split_sim_options
from cockpit.sim.presets import GPUS, MODELS, GpuPreset, ModelPreset, guess_model

SIM_VERSIONS = ("0.5.9", "0.5.23")
DEFAULT_HOST_MEM_GB = 449.0  # the story's host


@dataclass
class SimOptions:
    gpu: str = "rtx-pro-6000"
    model: str | None = None
    speed: float = 1.0
    startup_speed: float | None = None  # the clock's rate until ready; None: `speed` throughout
    traffic: str = "none"
    version: str = "0.5.9"
    host_mem_gb: float = DEFAULT_HOST_MEM_GB
    sim_dir: str | None = None
    seed: int = 0
    num_gpus: int | None = None


_SIM_FLAGS = {
    "--sim-gpu": "gpu",
    "--sim-model": "model",
    "--sim-speed": "speed",
    "--sim-startup-speed": "startup_speed",
    "--sim-traffic": "traffic",
    "--sim-version": "version",
    "--sim-host-mem-gb": "host_mem_gb",
    "--sim-dir": "sim_dir",
    "--sim-seed": "seed",
    "--sim-num-gpus": "num_gpus",
}


def split_sim_args(argv: list[str]) -> tuple[SimOptions, list[str]]:
    """Take the --sim-* options out of argv (both `--sim-x v` and `--sim-x=v`)."""
    opts = SimOptions()
    pairs, rest = split_sim_options(argv, _SIM_FLAGS)
    for name, value in pairs:
        attr = _SIM_FLAGS[name]
        try:
            if attr in ("speed", "startup_speed", "host_mem_gb"):
                setattr(opts, attr, float(value))
            elif attr in ("seed", "num_gpus"):
                setattr(opts, attr, int(value))
            else:
                setattr(opts, attr, value)
        except ValueError:
            kind = "float" if attr in ("speed", "startup_speed", "host_mem_gb") else "int"
            raise SimUsageError(f"argument {name}: invalid {kind} value: {value!r}") from None
    if opts.gpu not in GPUS:
        raise SimUsageError(f"argument --sim-gpu: invalid choice: {opts.gpu!r} (choose from {', '.join(GPUS)})")
    if opts.model is not None and opts.model not in MODELS:
        raise SimUsageError(f"argument --sim-model: invalid choice: {opts.model!r} (choose from {', '.join(MODELS)})")
    if opts.traffic not in TRAFFIC_MODES:
        raise SimUsageError(f"argument --sim-traffic: invalid choice: {opts.traffic!r} (choose from {', '.join(TRAFFIC_MODES)})")
    if opts.version not in SIM_VERSIONS:
        raise SimUsageError(f"argument --sim-version: invalid choice: {opts.version!r} (choose from {', '.join(SIM_VERSIONS)})")
    if not opts.speed > 0:
        raise SimUsageError("argument --sim-speed: must be > 0")
    if opts.startup_speed is not None and not opts.startup_speed > 0:
        raise SimUsageError("argument --sim-startup-speed: must be > 0")
    if opts.host_mem_gb <= 0:
        raise SimUsageError("argument --sim-host-mem-gb: must be > 0")
    return opts, rest


@dataclass
class SimConfig:
    """Everything a simulated run needs, resolved once in the main process and shared by fork."""

    opts: SimOptions
    version: str
    args: dict[str, Any]  # the SGLang flags as given (dest -> value)
    gpu: GpuPreset
    model: ModelPreset
    sim_dir: Path
    model_path: str
    served_model_name: str
    host: str
    port: int
    tp: int
    pp: int
    dp: int
    dp_attention: bool
    nnodes: int
    node_rank: int
    base_gpu_id: int
    gpu_id_step: int
    mfs: float
    mfs_given: bool
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    cuda_graph_bs: list[int]
    decode_graph: bool
    prefill_graph: bool
    prefill_graph_sizes: list[int]
    page_size: int
    context_len: int
    max_total_tokens: int | None
    max_running_requests_arg: int | None
    decode_log_interval: int
    enable_metrics: bool
    hicache: bool
    hicache_size_gb: float  # per rank, decimal GB; 0 = use the ratio
    hicache_ratio: float
    kv_bytes: int
    kv_dtype: str
    skip_warmup: bool
    seed: int

    @property
    def speed(self) -> float:
        return self.opts.speed

    @property
    def startup_speed(self) -> float:
        """The clock's rate until the server is ready (--sim-startup-speed, else --sim-speed)."""
        return self.opts.startup_speed or self.opts.speed

    @property
    def world_size(self) -> int:
        return self.dp_replicas * self.tp * self.pp

    @property
    def dp_replicas(self) -> int:
        """Plain data parallelism (--dp-size N without DP attention): N copies of the TP group."""
        return self.dp if self.dp > 1 and not self.dp_attention else 1

    @property
    def local_ranks(self) -> int:
        """Scheduler processes on this node (one per GPU)."""
        return max(1, self.world_size // max(1, self.nnodes))

    @property
    def first_rank(self) -> int:
        return self.node_rank * self.local_ranks

    @property
    def job(self) -> str | None:
        """A multi-node run's key (its rendezvous address): nodes of one job never share a GPU."""
        addr = self.args.get("dist_init_addr") or self.args.get("nccl_init_addr")
        return str(addr) if self.nnodes > 1 and addr else None

    def gpu_index(self, local_rank: int) -> int:
        return self.base_gpu_id + local_rank * self.gpu_id_step

    @property
    def attn_tp(self) -> int:
        if self.dp_attention and self.dp > 1:
            return max(1, self.tp // self.dp)
        return self.tp

    def rank_prefix(self, global_rank: int) -> str:
        """The log prefix tokens of a scheduler: DP, PP, TP, EP in SGLang's order."""
        if self.world_size == 1:
            return ""
        dp_rank, in_group = divmod(global_rank, self.tp * self.pp)
        pp_rank, tp_rank = divmod(in_group, self.tp)
        parts = []
        if self.dp_attention and self.dp > 1:
            parts.append(f"DP{tp_rank // self.attn_tp}")
        elif self.dp_replicas > 1:
            parts.append(f"DP{dp_rank}")
        if self.pp > 1:
            parts.append(f"PP{pp_rank}")
        if self.tp > 1:
            parts.append(f"TP{tp_rank}")
        ep = int(self.args.get("ep_size") or 1)
        if ep > 1:
            parts.append(f"EP{tp_rank % ep}")
        return " ".join(parts)

    @property
    def new_format(self) -> bool:
        return self.version == "0.5.23"


def decode_capture_sizes(max_bs: int) -> list[int]:
    """SGLang's decode CUDA-graph batch sizes up to max_bs (52 sizes at 512)."""
    sizes = [1, 2, 4, 8, 12, *list(range(16, 257, 8)), *list(range(272, 497, 16)), *list(range(512, max_bs + 1, 32))]
    out = [s for s in sizes if s <= max_bs]
    return out or [1]


def load_config(argv: list[str]) -> SimConfig:

    opts, server_argv = split_sim_args(argv)
    version = opts.version
    args = flags.parse_server_args(server_argv, version, require_model_path=True)

    model_key = opts.model or guess_model(str(args.get("model_path")))
    model = MODELS[model_key]
    gpu = GPUS[opts.gpu]
    new = version == "0.5.23"

    tp = int(args.get("tp_size") or 1)
    pp = int(args.get("pp_size") or 1)
    dp = int(args.get("dp_size") or 1)
    dp_attention = bool(args.get("enable_dp_attention"))
    if new and args.get("attn_dp_size"):
        dp = int(args["attn_dp_size"])
        dp_attention = dp > 1
    nnodes = int(args.get("nnodes") or 1)
    node_rank = int(args.get("node_rank") or 0)
    for name, value in (("--tp-size", tp), ("--pp-size", pp), ("--nnodes", nnodes)):
        if value < 1:
            raise FlagError(name, f"argument {name}: must be at least 1")
    if (tp * pp) % nnodes:
        raise FlagError("--nnodes", f"tp_size * pp_size ({tp * pp}) must be divisible by nnodes ({nnodes})")
    if not 0 <= node_rank < nnodes:
        raise FlagError("--node-rank", f"node_rank {node_rank} must be in [0, {nnodes})")

    disable_all = bool(args.get("disable_cuda_graph"))
    if new:
        decode_graph = not (
            disable_all or args.get("disable_decode_cuda_graph") or args.get("cuda_graph_backend_decode") == "disabled"
        )
        prefill_graph = not (
            disable_all or args.get("disable_prefill_cuda_graph") or args.get("cuda_graph_backend_prefill") == "disabled"
        )
        user_bs = args.get("cuda_graph_max_bs_decode")
        user_bs_list = args.get("cuda_graph_bs_decode")
    else:
        decode_graph = not disable_all
        prefill_graph = False
        user_bs = args.get("cuda_graph_max_bs")
        user_bs_list = args.get("cuda_graph_bs")
    if user_bs is None and user_bs_list:
        user_bs = max(user_bs_list)

    attn_dp = dp if dp_attention else 1
    defaults = memory.default_mfs(
        gpu.total_mib,
        version=version,
        tp=tp,
        pp=pp,
        attn_dp=attn_dp,
        chunked_prefill_size=args.get("chunked_prefill_size"),
        max_prefill_tokens=int(args.get("max_prefill_tokens") or 16384),
        cuda_graph_max_bs=user_bs,
        max_running_requests=args.get("max_running_requests"),
        speculative_algorithm=args.get("speculative_algorithm"),
        mla=model.attention == "MLA",
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
    )
    mfs_given = args.get("mem_fraction_static") is not None
    mfs = float(args["mem_fraction_static"]) if mfs_given else defaults.mfs
    if not 0 < mfs < 1:
        raise FlagError("--mem-fraction-static", f"mem_fraction_static must be in (0, 1), got {mfs}")
    cps = int(defaults.chunked_prefill_size)
    max_bs = int(defaults.cuda_graph_max_bs)
    capture_bs = sorted(int(b) for b in user_bs_list) if user_bs_list else decode_capture_sizes(max_bs)
    pg_max = min(cps, 8192) if model.attention == "MLA" else cps
    pg_sizes = memory.prefill_graph_sizes(pg_max) if (prefill_graph and pg_max > 0) else []

    kv_dtype_arg = str(args.get("kv_cache_dtype") or "auto")
    if kv_dtype_arg.startswith("fp8"):
        kv_bytes, kv_dtype = 1, "torch.float8_e4m3fn" if "e4m3" in kv_dtype_arg else "torch.float8_e5m2"
    elif "fp4" in kv_dtype_arg:
        kv_bytes, kv_dtype = 1, "torch.float4_e2m1fn_x2"
    else:
        kv_bytes, kv_dtype = model.kv_bytes, "torch.bfloat16"

    hicache = bool(args.get("enable_hierarchical_cache"))
    hicache_ratio = args.get("hicache_ratio")
    model_path = str(args["model_path"])
    return SimConfig(
        opts=opts,
        version=version,
        args=args,
        gpu=gpu,
        model=model,
        sim_dir=Path(opts.sim_dir).expanduser() if opts.sim_dir else default_sim_dir(int(args.get("port") or 30000)),
        model_path=model_path,
        served_model_name=str(args.get("served_model_name") or model_path),
        host=str(args.get("host") or "127.0.0.1"),
        port=int(args.get("port") or 30000),
        tp=tp,
        pp=pp,
        dp=dp,
        dp_attention=dp_attention,
        nnodes=nnodes,
        node_rank=node_rank,
        base_gpu_id=int(args.get("base_gpu_id") or 0),
        gpu_id_step=int(args.get("gpu_id_step") or 1),
        mfs=mfs,
        mfs_given=mfs_given,
        chunked_prefill_size=cps,
        max_prefill_tokens=int(args.get("max_prefill_tokens") or 16384),
        cuda_graph_max_bs=max_bs,
        cuda_graph_bs=capture_bs,
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        prefill_graph_sizes=pg_sizes,
        page_size=int(args.get("page_size") or 1),
        context_len=int(args.get("context_length") or model.context_len),
        max_total_tokens=args.get("max_total_tokens"),
        max_running_requests_arg=args.get("max_running_requests"),
        decode_log_interval=max(1, int(args.get("decode_log_interval") or 40)),
        enable_metrics=bool(args.get("enable_metrics")),
        hicache=hicache,
        hicache_size_gb=float(args.get("hicache_size") or 0),
        hicache_ratio=float(hicache_ratio) if hicache_ratio is not None else 2.0,
        kv_bytes=kv_bytes,
        kv_dtype=kv_dtype,
        skip_warmup=bool(args.get("skip_server_warmup")),
        seed=opts.seed,
    )
