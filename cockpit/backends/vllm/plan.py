"""vLLM's memory budget before launch: weights per rank, KV tokens and the free memory left after
start-up for each `--gpu-memory-utilization` (or the pinned `--kv-cache-memory-bytes`).

Follows vLLM's own arithmetic (vllm/v1/worker/gpu_worker.py `determine_available_memory`,
`compile_or_warm_up_model`; vllm/utils/mem_utils.py `memory_profiling`, `request_memory`;
vllm/v1/worker/gpu_model_runner.py `profile_run`, `profile_cudagraph_memory`;
vllm/v1/core/kv_cache_utils.py `get_num_blocks`, `_report_kv_cache_config`):

    T   = the card's total memory, F₀ = free at the start snapshot (after the CUDA context and NCCL)
    W   = weights per rank, N = non-torch memory after the snapshot (cuBLAS, all-reduce buffers)
    A   = transient activation peak of the profile run (a `--max-num-batched-tokens` forward and
          the sampler's warm-up over `--max-num-seqs` logits), Ĝ = the CUDA-graph estimate
    requested = ⌈u·T⌉                                                   (request_memory)
    KV  = requested − (W + N + A) − Ĝ                                   (determine_available_memory)
          Ĝ counts from 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default on); 0 before
          with --kv-cache-memory-bytes K: KV = K, util is ignored (profiling skipped)
    tokens = ⌊KV / (c·block)⌋·block, c = KV bytes per token per rank over all layers (get_num_blocks;
          a hybrid sliding-window model's groups give the same count, _report_kv_cache_config)
    start-up refuses F₀ < requested ("Free memory on device … less than desired …") and
          tokens < --max-model-len ("… KV cache is needed, which is larger than …")
    free after start-up = F₀ − (W + N) − KV − G   (the log's per-rank summary line, G = graph pool)
                        = F₀ − u·T + A + Ĝ − G    with the estimate on (A is handed back: the
                                                  largest batch needs it again)

N, A and G are the terms vLLM measures on the GPU and the plan estimates (the constants below,
docs/PLAN.md) until a journal run of the same setup replaces them by what it measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cockpit.backends.vllm.command import effective_flags
from cockpit.backends.vllm.flags import default_util, resolve_version, version_key
from cockpit.backends.vllm.memory import default_max_num_seqs, floor2, large_batch_card
from cockpit.backends.vllm.terms import (
    V0_DEFAULT_BATCHED_TOKENS,
    KvLayout,
    Settings,
    Term,
    activation_term,
    capture_plan,
    graph_term,
    kv_layout,
    non_torch_term,
    online_fp8_bytes,
    requested_gib,
    v0_batched_tokens,
    weights_term,
)
from cockpit.core.numbers import plural
from cockpit.model.config import ModelConfig, ModelConfigError
from cockpit.model.draft import draft_model_bytes, mtp_layer_bytes
from cockpit.model.plan import (
    Calibration,
    GpuFacts,
    MemoryPlan,
    PlanRow,
    calibration_from_run,
    gpu_facts_from_hosts,
    pick_calibration,
    weight_notes,
)
from cockpit.model.platform import QUICK_REDUCE_WORLD_SIZES, platform_of, quick_reduce_gib
from cockpit.model.weights import GIB, Parallel, WeightIndex, split_weights

# ROCm's quick all-reduce as vLLM names it (vllm/envs.py; AMD's Kimi-K2.5 recipe sets INT4)
QUICK_REDUCE_ENV = "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"
QUICK_REDUCE_MAX_ENV = "VLLM_ROCM_QUICK_REDUCE_MAX_SIZE_BYTES_MB"

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from collections.abc import Iterable

    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import Profile
    from cockpit.model.read import ModelFacts

FLAG = "--gpu-memory-utilization"
# flags that change the memory budget: a journal run that differs in any of them cannot calibrate
SETUP_FLAGS = (
    "model", "tp", "tensor-parallel-size", "dp", "data-parallel-size", "pipeline-parallel-size", "kv-cache-dtype",
    "quantization", "dtype", "max-model-len", "max-num-seqs", "max-num-batched-tokens", "kv-cache-memory", "block-size",
    "enforce-eager", "kv-cache-memory-bytes", "enable-expert-parallel", "cpu-offload-gb", "compilation-config",
    "max-cudagraph-capture-size", "cudagraph-capture-sizes",
)
PIN_FLAG = "--kv-cache-memory-bytes"
TABLE = tuple(round(0.80 + 0.01 * i, 2) for i in range(19))  # 0.80 … 0.98: vLLM's auto-tuner starts at 0.98
SEARCH = tuple(round(0.30 + 0.01 * i, 2) for i in range(70))  # where the recommendation may land (≤ 0.99)
GRAPH_ESTIMATE_SINCE = "0.20.0"  # the CUDA-graph estimate inside the budget by default
ESTIMATE_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
DEFAULT_BLOCK = 16  # CUDA's default --block-size

# Memory gone before the start snapshot (an estimate; a journal run replaces it): the CUDA context,
# then NCCL's communicators when ranks > 1. The terms after the snapshot (non-torch memory, the
# activation peak, the graph pool) are cockpit/backends/vllm/terms.py's, one function each.
CUDA_CONTEXT_GIB = 0.6
DIST_INIT_GIB = 0.3
KV_DTYPE_BYTES = {"auto": 0.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0}
FP8_DS_MLA_BYTES_PER_LAYER = 656  # FlashMLA's fp8 cache entry: 512 fp8 + 4 fp32 scales + 64 bf16 rope


def settings_from_flags(flags: Mapping[str, Any], version: str | None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `{dest: value}` (EngineArgs names, as command.effective_flags gives them)."""
    v = resolve_version(version)

    def get(key: str, default: Any = None) -> Any:
        val = flags.get(key)
        return default if val is None else val

    cc = get("compilation_config") or {}
    mode = str(cc.get("cudagraph_mode", "")).upper() if isinstance(cc, dict) else ""
    env_val = (env or {}).get(ESTIMATE_ENV)
    estimate = version_key(v) >= version_key(GRAPH_ESTIMATE_SINCE)
    if env_val is not None:
        estimate = env_val.strip() not in ("0", "", "false", "False")
    mml = get("max_model_len")
    util = get("gpu_memory_utilization")
    if util is not None:
        try:
            util = float(util)
        except (TypeError, ValueError):
            raise ModelConfigError(f"--gpu-memory-utilization {util!r}: expected a fraction in (0, 1]") from None
        if not (math.isfinite(util) and 0 < util <= 1):
            raise ModelConfigError(f"--gpu-memory-utilization {util:g}: expected a fraction in (0, 1]")
    kvb = get("kv_cache_memory_bytes")
    level = get("optimization_level")
    sizes, largest = _capture_flags(get("cudagraph_capture_sizes"), get("max_cudagraph_capture_size"),
                                    get("cuda_graph_sizes"), cc if isinstance(cc, dict) else {})
    return Settings(
        version=v,
        util=float(util) if util is not None else None,
        kv_cache_memory_bytes=int(kvb) if kvb is not None else None,
        tp=int(get("tensor_parallel_size", 1)),
        pp=int(get("pipeline_parallel_size", 1)),
        dp=int(get("data_parallel_size", 1)),
        expert_parallel=bool(get("enable_expert_parallel", False)),
        kv_cache_dtype=str(get("kv_cache_dtype", "auto")),
        dtype=str(get("dtype", "auto")),
        max_model_len=int(mml) if isinstance(mml, int) and mml > 0 else None,
        max_num_seqs=get("max_num_seqs"),
        max_num_batched_tokens=get("max_num_batched_tokens"),
        block_size=get("block_size"),
        graphs=not bool(get("enforce_eager", False)) and mode != "NONE" and level != 0,
        cudagraph_mode=mode or None,
        optimization_level=int(level) if level is not None else None,
        capture_sizes=sizes,
        max_capture_size=largest,
        estimate_graphs=estimate,
        cpu_offload_gib=float(get("cpu_offload_gb", 0) or 0),
        speculative=_speculative(get("speculative_config")),
        role=_kv_role(get("kv_transfer_config")),
        **_kv_transfer(get("kv_transfer_config")),
        quick_reduce_gib=quick_reduce_gib(dict(env or {}), QUICK_REDUCE_ENV, QUICK_REDUCE_MAX_ENV),
        quantization=str(get("quantization")) if get("quantization") else None,
        v0=v0_engine(v, env),
        chunked_prefill=bool(get("enable_chunked_prefill")) if get("enable_chunked_prefill") is not None else None,
    )


# V1 became the default engine in 0.8.0; before it, or with VLLM_USE_V1=0, the V0 engine sizes the
# profile batch its own way (terms.v0_batched_tokens).
V1_DEFAULT_SINCE = "0.8.0"


def v0_engine(version: str, env: Mapping[str, str] | None) -> bool:
    flag = str((env or {}).get("VLLM_USE_V1", "")).strip()
    if flag:
        return flag in ("0", "false", "False")
    return version_key(version) < version_key(V1_DEFAULT_SINCE)


def _ints(value: Any, flag: str) -> tuple[int, ...] | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)):
        value = [value]
    try:
        out = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ModelConfigError(f"{flag} {value!r}: expected whole batch sizes") from None
    if any(v < 0 for v in out):
        raise ModelConfigError(f"{flag} {value!r}: expected whole batch sizes")
    return out


def _capture_flags(sizes: Any, largest: Any, old: Any, cc: Mapping[str, Any]) -> tuple[tuple[int, ...] | None, int | None]:
    """(the capture list, the largest size) the operator named: the flags win over
    --compilation-config's keys (vLLM's EngineArgs copies them into it); 0.10's --cuda-graph-sizes is
    the largest size when it holds one value, the list itself when several (SchedulerConfig.cuda_graph_sizes)."""
    lst = _ints(sizes, "--cudagraph-capture-sizes") or _ints(cc.get("cudagraph_capture_sizes"), "cudagraph_capture_sizes")
    top = _ints(largest, "--max-cudagraph-capture-size") or _ints(cc.get("max_cudagraph_capture_size"), "max_cudagraph_capture_size")
    legacy = _ints(old, "--cuda-graph-sizes")
    if lst is None and legacy is not None and len(legacy) > 1:
        lst = legacy
    if top is None and legacy is not None and len(legacy) == 1:
        top = legacy
    return lst, (top[0] if top else None)


_KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "prefill+decode"}


def _kv_role(value: Any) -> str | None:
    cfg = _speculative(value, "--kv-transfer-config")
    role = (cfg or {}).get("kv_role")
    return _KV_ROLES.get(str(role)) if role is not None else None


# KV connectors that hold GPU memory of their own beside the KV cache: vLLM's P2pNcclConnector keeps
# sent (PUT_ASYNC, GET) and received tensors on the GPU up to kv_buffer_size bytes before spilling to
# its host tensor pool (p2p_nccl_engine.py: buffer_size_threshold = config.kv_buffer_size; vLLM's
# KVTransferConfig default 1e9 on "cuda"). NixlConnector and MooncakeConnector register the KV cache
# itself for RDMA (register_kv_caches): no GPU buffer of their own.
GPU_BUFFER_CONNECTORS = ("P2pNcclConnector",)
IN_PLACE_CONNECTORS = ("NixlConnector", "MooncakeConnector")
KV_BUFFER_DEFAULT = 1e9


def _kv_transfer(value: Any) -> dict[str, Any]:
    """The connector and the GPU memory it holds outside the KV cache, from --kv-transfer-config."""
    cfg = _speculative(value, "--kv-transfer-config") or {}
    conn = cfg.get("kv_connector")
    gib = 0.0
    if conn in GPU_BUFFER_CONNECTORS and str(cfg.get("kv_buffer_device", "cuda")) == "cuda":
        size = cfg.get("kv_buffer_size", KV_BUFFER_DEFAULT)
        try:
            gib = float(size) / GIB
        except (TypeError, ValueError):
            raise ModelConfigError(f"--kv-transfer-config kv_buffer_size {size!r}: expected a number of bytes") from None
        if not (math.isfinite(gib) and gib >= 0):
            raise ModelConfigError(f"--kv-transfer-config kv_buffer_size {size!r}: expected a number of bytes")
    return {"kv_connector": str(conn) if conn else None, "kv_buffer_gib": gib}


def _speculative(value: Any, flag: str = "--speculative-config") -> dict[str, Any] | None:
    """A JSON-object flag's value as a dict (None when unset)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ModelConfigError(f"{flag} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelConfigError(f"{flag}: expected a JSON object")
    return value


# vLLM's drafter loads inside the worker's load_model (its weights are in "Model loading took") and
# registers its attention layers with the KV cache (its KV is in every token's bytes): methods that
# draft with the checkpoint's own MTP layers, and those that load a separate draft model.
SPEC_MTP_METHODS = ("mtp", "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp")
SPEC_NO_DRAFT = ("ngram", "suffix", "medusa_heads_none")


def draft_terms(cfg: ModelConfig, weights: WeightIndex, draft: ModelFacts | None, s: Settings,
                notes: list[str]) -> tuple[float, float] | None:
    """(draft weights GiB per rank, draft KV bytes per token per rank) for --speculative-config:
    (0, 0) without a speculative config or for a method without draft weights (ngram, suffix);
    None when a draft is named but could not be read (the note says so; nothing is budgeted)."""
    spec = s.speculative
    if not spec:
        return 0.0, 0.0
    method = str(spec.get("method") or "").lower()
    if method in SPEC_NO_DRAFT or method.startswith("ngram"):
        return 0.0, 0.0
    load = cfg.load_dtype(s.dtype)[1]
    par = Parallel(int(spec.get("draft_tensor_parallel_size") or s.tp), 1, 1, 1)
    if method in SPEC_MTP_METHODS or (draft is None and cfg.nextn_layers and method in ("", "eagle")):
        if not cfg.nextn_layers:
            raise ModelConfigError(f"--speculative-config method {method!r}: {cfg.name} has no num_nextn_predict_layers")
        n = int(spec.get("num_speculative_tokens") or 1)
        layers = min(cfg.nextn_layers, n) if method != "mtp" else cfg.nextn_layers
        w = mtp_layer_bytes(cfg, weights, par, load_bytes=load) * layers / cfg.nextn_layers
        dcfg = dataclasses.replace(cfg, layers=layers, swa_layers=0)
        notes.append(f"speculative {method or 'mtp'}: the checkpoint's MTP layers load with the model and keep their own KV")
    elif draft is not None and draft.weights is not None:
        shares = ("embed_tokens", "lm_head") if method == "eagle" else ("embed_tokens",) if method == "eagle3" else ()
        w = draft_model_bytes(draft.config, draft.weights, par, load_bytes=load, shares=shares)
        dcfg = draft.config
        notes.append(f"speculative {method or 'draft model'}: the draft ({draft.where}) loads with the model and keeps its own KV")
    else:
        notes.append(f"speculative {method or 'draft'}: the draft model ({spec.get('model') or 'none named'}) was not read: "
                     "its weights and KV are not in the budget")
        return None
    return w / GIB, cell_bytes(dcfg, dataclasses.replace(s, pp=1, speculative=None))


def profile_settings(profile: Profile, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings of a profile's flags with `--set` overrides (FlagError for a flag vLLM refuses)."""

    version = resolve_version(profile.version)
    flags = {dest: val for dest, (_spec, val) in effective_flags(profile, overrides, version=version).items()}
    return settings_from_flags(flags, version, profile.env)


def cell_bytes(cfg: ModelConfig, s: Settings) -> float:
    """KV bytes per token per rank over all layers of the rank's pipeline stage (the attention
    spec's page size per token, vllm/v1/kv_cache_interface.py): MHA/GQA heads split by TP (at least
    one per rank), the MLA latent whole on every rank."""
    if s.kv_cache_dtype not in KV_DTYPE_BYTES and s.kv_cache_dtype != "fp8_ds_mla":
        raise ModelConfigError(f"--kv-cache-dtype {s.kv_cache_dtype!r}: the plan knows {', '.join([*KV_DTYPE_BYTES, 'fp8_ds_mla'])}")
    b = KV_DTYPE_BYTES.get(s.kv_cache_dtype, 1.0) or float(cfg.load_dtype(s.dtype)[1])  # auto: the launch's dtype
    layers = math.ceil(cfg.layers / max(1, s.pp))
    if cfg.attention == "mla":
        if s.kv_cache_dtype == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_LAYER * layers
        return ((cfg.kv_lora_rank or 0) + (cfg.qk_rope_head_dim or 0)) * layers * b
    heads = max(1, cfg.num_kv_heads // s.tp)
    return heads * (cfg.head_dim + cfg.v_head_dim) * layers * b


def kv_tokens(kv_gib: float, cell: float, block: int) -> int:
    """Whole blocks of `block` tokens in `kv_gib` (get_num_blocks), as tokens, for a cache whose
    layers are all one kind (a hybrid model's groups: KvLayout.tokens)."""
    if kv_gib <= 0 or cell <= 0:
        return 0
    return int(kv_gib * GIB // (cell * block)) * block


def batch_defaults(gpu_total_gib: float, s: Settings, max_model_len: int, gpu_name: str | None = None,
                   cfg: ModelConfig | None = None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM's API server picks for this card when unset
    (vllm/engine/arg_utils.py `get_batch_defaults`): 1024 / 8192 on ≥ 70 GiB cards other than A100s,
    16384 tokens from 160 GiB, else 256 / 2048; the tokens capped at max_num_seqs × max_model_len.
    The V0 engine keeps 256 sequences and its own token rule (terms.v0_batched_tokens)."""
    if s.v0:
        seqs = int(s.max_num_seqs or 256)
        if s.max_num_batched_tokens:
            return seqs, int(s.max_num_batched_tokens)
        rocm = platform_of(gpu_name, gpu_total_gib).rocm
        return seqs, (v0_batched_tokens(cfg, s, max_model_len, rocm) if cfg is not None
                      else max(max_model_len, V0_DEFAULT_BATCHED_TOKENS))
    seqs = int(s.max_num_seqs or default_max_num_seqs(gpu_total_gib, gpu_name) or 256)
    if s.max_num_batched_tokens:
        return seqs, int(s.max_num_batched_tokens)
    large = large_batch_card(gpu_total_gib, gpu_name)
    tokens = 16384 if large and gpu_total_gib >= 160 else 8192 if large else 2048
    return seqs, min(tokens, seqs * max_model_len)


def activation_gib(cfg: ModelConfig, s: Settings, seqs: int, batched: int) -> float:
    """A: the profile run's transient peak (terms.activation_term)."""
    return activation_term(cfg, s, seqs, batched, cfg.load_dtype(s.dtype)[1]).gib


def graph_gib(cfg: ModelConfig, s: Settings, seqs: int = 256, batched: int = 2048) -> float:
    return graph_term(cfg, s, seqs, batched).gib


def pre_snapshot_gib(s: Settings) -> float:
    return CUDA_CONTEXT_GIB + (DIST_INIT_GIB if s.tp * s.pp * s.dp > 1 else 0.0)


def non_torch_gib(s: Settings, gpu_name: str | None = None) -> float:
    return non_torch_term(s, platform_of(gpu_name)).gib


# Unknown KV connectors: vllm#21348 (Qwen3-235B-A22B-FP8 TP4 with LMCacheConnectorV1) printed
# 8.11 GiB of KV where the same launch without a connector plans ~13.3: the connector's own GPU
# staging buffers, not visible in any flag. The band's low end keeps that much room.
UNKNOWN_CONNECTOR_SPREAD_GIB = 5.5
OFFLOAD_CONNECTORS = ("LMCacheConnectorV1", "LMCacheConnector", "OffloadingConnector", "MooncakeStoreConnector",
                      "SharedStorageConnector", "LMCacheMPConnector")


def plan(
    cfg: ModelConfig,
    weights: WeightIndex | None,
    gpu: GpuFacts,
    s: Settings,
    *,
    target_headroom: float = 5.0,
    warn_headroom: float = 3.0,
    calibration: Calibration | None = None,
    draft: ModelFacts | None = None,
) -> MemoryPlan:
    """The budget for every value in TABLE, the profile's value and the recommendation. `draft`:
    the speculative draft model's facts when --speculative-config names one."""
    if weights is None:
        raise ModelConfigError(f"{cfg.name}: no model.safetensors.index.json and no .safetensors files: the weights' size is unknown")
    if s.tp < 1 or s.dp < 1 or s.pp < 1:
        raise ModelConfigError("tensor, data and pipeline parallel sizes must be positive")
    t = gpu.total_gib
    load_bytes = cfg.load_dtype(s.dtype)[1]
    split = split_weights(cfg, weights, Parallel(s.tp, 1, 1, s.pp), load_bytes=load_bytes)
    w_bytes = split.per_rank_bytes - online_fp8_bytes(split.by_category, load_bytes, s, cfg.quant.method)
    if s.expert_parallel and s.dp > 1:
        # EP spans the DP replicas: the experts split over tp × dp ranks, not tp
        w_bytes -= split.by_category.get("expert", 0.0) * (1 - 1 / s.dp)
    notes = list(cfg.notes)
    if s.quick_reduce_gib and platform_of(gpu.name, t).rocm and s.tp in QUICK_REDUCE_WORLD_SIZES:
        notes.append(f"ROCm quick all-reduce on (VLLM_ROCM_QUICK_REDUCE_QUANTIZATION): {s.quick_reduce_gib:.1f} GiB per rank "
                     "held before vLLM's start snapshot — the KV budget (u × total) does not move; the free memory at start "
                     "and after start-up is that much less")
    drafted = draft_terms(cfg, weights, draft, s, notes)
    draft_w, draft_cell = drafted or (0.0, 0.0)
    w = max(0.0, w_bytes / GIB - s.cpu_offload_gib) + draft_w
    platform = platform_of(gpu.name, t)
    base = gpu.free_gib if gpu.free_gib is not None else t
    # ROCm's quick all-reduce buffer, when the environment turns it on, is allocated at distributed init,
    # before vLLM's start snapshot: less free memory at start, the budget u·T unchanged (terms.NON_TORCH_MULTI_ROCM)
    qr = s.quick_reduce_gib if platform.rocm and s.tp in QUICK_REDUCE_WORLD_SIZES else 0.0
    f0 = base - pre_snapshot_gib(s) - qr
    w_t = weights_term(w, bool(getattr(weights, "estimated", False)) or weights.kind == "config", platform, cfg.quant.method)
    if cfg.has_vision and w_t.spread and (getattr(weights, "estimated", False) or weights.kind == "config"):
        w_t = Term(w_t.gib, w_t.spread + 0.6)  # the tower estimated as a plain ViT (Gemma 3: −0.3 … −0.6 GiB)
    n_t = non_torch_term(s, platform)
    n = n_t.gib
    cell = cell_bytes(cfg, s) + draft_cell
    block = int(s.block_size or DEFAULT_BLOCK)
    mml = int(s.max_model_len or cfg.context_length or 0)
    if mml <= 0:
        raise ModelConfigError(f"{cfg.name}: no max_position_embeddings in config.json and no --max-model-len")
    seqs, batched = batch_defaults(t, s, mml, gpu.name, cfg)
    act_t = activation_term(cfg, s, seqs, batched, load_bytes)
    act = act_t.gib
    g_t = graph_term(cfg, s, seqs, batched)
    cap = capture_plan(s, seqs, batched)
    g = g_t.gib
    g_hat = g if cap.graphs and s.estimate_graphs else 0.0
    if gpu.name is None and t >= 70 and not (s.max_num_seqs and s.max_num_batched_tokens):
        notes.append("the card's name is not measured: vLLM's batch defaults are taken as for an H100-class card "
                     "(an A100 keeps 256 sequences / 2048 batched tokens)")
    layout: KvLayout | None = None
    stage_layers = math.ceil(cfg.layers / max(1, s.pp))
    if cfg.swa_layers and not draft_cell:
        layout = kv_layout(cfg, stage_layers, cell / stage_layers)
        if layout.padding:
            notes.append(f"hybrid KV cache: {cfg.swa_layers} sliding-window and {cfg.full_attention_layers} full-attention layers "
                         f"in groups of {layout.group_size}: vLLM adds {plural(layout.padding, 'padding layer')} whose blocks hold no tokens "
                         f"(kv_cache_utils: \"Add {layout.padding} padding layers\")")
    # the band: each estimated term at either end of its spread (terms.py); an unknown connector
    # may hold GPU memory beside the KV cache, so the low end keeps room for it
    spread_low = w_t.spread + n_t.spread + act_t.spread + (g_t.spread if g_hat else 0.0)
    spread_high = w_t.spread + n_t.spread + act_t.spread + (g_t.lower if g_hat else 0.0)
    if s.kv_connector and s.kv_connector not in IN_PLACE_CONNECTORS + GPU_BUFFER_CONNECTORS:
        spread_low += UNKNOWN_CONNECTOR_SPREAD_GIB

    def tok_of(kv: float) -> int:
        return layout.tokens(kv, block) if layout is not None else kv_tokens(kv, cell, block)

    def starts(u: float, tok: int) -> bool:
        return u * t <= f0 and tok >= mml

    def estimate(u: float) -> tuple[float, int, float]:
        kv = requested_gib(u, t) - (w + n + act) - g_hat
        tok = tok_of(kv)
        return kv, tok, f0 - (w + n) - kv - g - s.kv_buffer_gib

    cal_err: dict[str, float] = {}
    row_of = estimate
    if calibration is not None:
        kv_c = calibration.max_total_num_tokens * cell / GIB
        _kv, tok_e, head_e = estimate(calibration.value)
        cal_err = {
            "max_total_num_tokens": float(tok_e - calibration.max_total_num_tokens),
            "max_total_num_tokens_pct": 100.0 * (tok_e - calibration.max_total_num_tokens) / max(1, calibration.max_total_num_tokens),
            "headroom_after_capture_gib": head_e - calibration.headroom_after_capture_gib,
        }

        def calibrated(u: float) -> tuple[float, int, float]:
            # Δu·T moves between the KV cache and free memory, one for one (memory.py)
            d = (u - calibration.value) * t
            kv = kv_c + d
            return kv, tok_of(kv), calibration.headroom_after_capture_gib - d

        row_of = calibrated

    def row(u: float) -> PlanRow:
        kv, tok, head = row_of(u)
        if calibration is not None:  # measured: no band
            return PlanRow(FLAG, u, tok if starts(u, tok) else 0, kv, head)
        lo, hi = tok_of(kv - spread_low), tok_of(kv + spread_high)
        return PlanRow(FLAG, u, tok if starts(u, tok) else 0, kv, head, lo if starts(u, lo) else 0, hi if starts(u, hi) else 0)

    rows = tuple(row(v) for v in TABLE)
    # a recommendation starts at the band's low end too
    meets = [r for r in (row(v) for v in SEARCH) if r.headroom_after_capture_gib >= target_headroom and r.low > 0]
    recommended = max(meets, key=lambda r: r.value) if meets else None
    is_default = False
    if s.kv_cache_memory_bytes is not None:
        kv = s.kv_cache_memory_bytes / GIB
        tok = tok_of(kv)
        if calibration is None:
            head = f0 - (w + n) - kv - g - s.kv_buffer_gib
        else:  # the run's free memory, plus what its KV cache held beyond the pin
            head = calibration.headroom_after_capture_gib + calibration.max_total_num_tokens * cell / GIB - kv
        current: PlanRow | None = PlanRow(PIN_FLAG, float(s.kv_cache_memory_bytes), tok if tok >= mml else 0, kv, head)
        notes.append(f"{PIN_FLAG} pins the KV cache: vLLM ignores {FLAG} (the table shows what each value would give without the pin)")
        room = head - target_headroom
        if room < 0 and kv + room > 0:
            k = math.floor((kv + room) * 4) / 4  # a quarter GiB below what meets the target
            recommended = PlanRow(PIN_FLAG, float(int(k * GIB)), tok_of(k), k, head + (kv - k))
        elif room >= 0:
            recommended = current
    else:
        u_now = s.util
        if u_now is None:
            u_now = default_util(s.version)
            is_default = True
            notes.append(f"{FLAG} unset: vLLM {s.version} uses {u_now:g}")
        current = row(u_now)
    if not cap.graphs:
        notes.append("no CUDA graphs (--enforce-eager, -O0 or cudagraph_mode NONE): no graph pool")
    elif calibration is None and g_t.spread > (g_t.spread_high or 0.0) + 1e-9:
        notes.append(f"CUDA graphs: {cap.full} FULL + {cap.piecewise} PIECEWISE up to batch "
                     f"{max(cap.largest_full, cap.largest_piecewise)}, outside the range the graph estimate was fitted to "
                     "(up to 83 graphs per mode, largest 1024): the band's low end allows twice the graph error")
    elif not s.estimate_graphs:
        notes.append(f"the CUDA-graph estimate is outside the budget (vLLM < {GRAPH_ESTIMATE_SINCE} or {ESTIMATE_ENV}=0): "
                     "graphs come out of the (1 − util) share")
    searched = [row(v) for v in SEARCH]
    lowest = next((r for r in searched if r.max_total_num_tokens > 0), None)
    safe = next((r for r in searched if r.low > 0), None) if current is not None and current.tight else None
    if lowest is not None and lowest.value > SEARCH[0]:
        notes.append(f"below {FLAG} {lowest.value:g} vLLM refuses to start: the KV cache holds fewer tokens than "
                     f"--max-model-len {mml:,}")
    too_high = [r for r in searched if r.value * t > f0]
    if too_high:
        notes.append(f"from {FLAG} {too_high[0].value:g} vLLM refuses to start: ⌈u·T⌉ is more than the {f0:.2f} GiB "
                     "free at start-up (\"Free memory on device … less than desired GPU memory utilization\")")
    if split.unknown_bytes:
        notes.append(f"{split.unknown_bytes / GIB:.2f} GiB of checkpoint tensors matched no sharding rule: counted whole on every rank")
    if not split.exact_split:
        notes.append("weights: the index's exact total_size, split by config.json's layer shapes (no safetensors headers read)")
    notes += weight_notes(cfg, weights, s.dtype)
    if s.role is not None or s.kv_connector:
        who = f"{s.role} role, " if s.role else ""
        if s.kv_buffer_gib:
            notes.append(f"{who}{s.kv_connector}: up to {s.kv_buffer_gib:.2f} GiB of transferred KV held on the GPU "
                         "(kv_buffer_size) comes out of the free memory after start-up, not the KV cache")
        elif s.kv_connector in IN_PLACE_CONNECTORS:
            notes.append(f"{who}{s.kv_connector}: the connector registers the KV cache itself for transfer; "
                         "no GPU buffer of its own")
        elif s.kv_connector in OFFLOAD_CONNECTORS:
            notes.append(f"{who}{s.kv_connector}: a KV offload connector keeps KV in host memory or storage outside the GPU "
                         "pool — the plan sizes the GPU pool only and cannot see the connector's capacity or its GPU staging "
                         f"buffers; the band's low end keeps {UNKNOWN_CONNECTOR_SPREAD_GIB:g} GiB for them (vllm#21348 printed "
                         "that much less KV with LMCacheConnectorV1)")
        else:
            notes.append(f"{who}{s.kv_connector or 'no kv_connector named'} (--kv-transfer-config): "
                         "the connector's own GPU buffers are not known to the plan and not in it"
                         + (f"; the band's low end keeps {UNKNOWN_CONNECTOR_SPREAD_GIB:g} GiB for them" if s.kv_connector else ""))
    if calibration is None:
        notes.append("estimate: non-torch memory, the activation peak and the graph pool are not measured yet; "
                     "a finished run of this setup calibrates them")
    terms = {
        "pre_load_avail_gib": f0,
        "after_weights_avail_gib": f0 - w - n,
        "non_torch_gib": n,
        "activation_peak_gib": act,
        "graph_gib": g if calibration is None else math.nan,
        "graph_estimate_gib": g_hat if calibration is None else math.nan,
        "max_num_seqs": float(seqs),
        "max_num_batched_tokens": float(batched),
        "max_model_len": float(mml),
        "context_len": float(mml),  # the same, in the plan's own word (MemoryPlan.request_length reads it)
        "block_size": float(block),
        "util_floor": lowest.value if lowest is not None else math.nan,
        "util_ceiling": floor2(f0 / t) if t > 0 else math.nan,  # the most the free memory at start-up allows
        "kv_transfer_buffer_gib": s.kv_buffer_gib if s.kv_buffer_gib else math.nan,
        # each estimated term's half-width and the KV band's (GiB): docs/PLAN.md's residuals per term
        "weights_spread_gib": w_t.spread if calibration is None else math.nan,
        "non_torch_spread_gib": n_t.spread if calibration is None else math.nan,
        "activation_peak_spread_gib": act_t.spread if calibration is None else math.nan,
        "graph_estimate_spread_gib": g_t.spread if calibration is None and g_hat else math.nan,
        # the graphs the launch captures (terms.capture_plan): FULL and PIECEWISE counts, the largest size
        "graph_spread_gib": g_t.spread if calibration is None and cap.graphs else math.nan,
        "cuda_graphs_full": float(cap.full) if cap.graphs else math.nan,
        "cuda_graphs_piecewise": float(cap.piecewise) if cap.graphs else math.nan,
        "cuda_graph_largest": float(max(cap.largest_full, cap.largest_piecewise)) if cap.graphs else math.nan,
        "kv_band_low_gib": spread_low if calibration is None else math.nan,
        "kv_band_high_gib": spread_high if calibration is None else math.nan,
        "low_end_safe_value": safe.value if safe is not None else math.nan,
        "kv_layout_padding_layers": float(layout.padding) if layout is not None and layout.padding else math.nan,
        # the draft's share of the weights and of every token's bytes (both already inside
        # weights_gib_per_rank and kv_bytes_per_token), as SGLang's plan names them; absent without
        # --speculative-config or when the named draft could not be read
        "draft_weights_gib": draft_w if s.speculative and drafted is not None else math.nan,
        "draft_kv_bytes_per_token": float(round(draft_cell)) if s.speculative and drafted is not None else math.nan,
    }
    terms = {k: v for k, v in terms.items() if not math.isnan(v)}
    arithmetic = (
        f"T {t:.2f} GiB, free at start F₀ ≈ {f0:.2f}, weights {w:.2f} GiB/rank, non-torch {n:.2f}, activation peak "
        f"{act:.2f} (batch {batched:,} tokens, {seqs:,} seqs), KV {round(cell):,} B/token; KV = ⌈u·T⌉ − weights − non-torch "
        f"− activation{' − graph estimate' if g_hat else ''}; free after start-up = F₀ − weights − non-torch − KV − graphs"
        + (f" {g:.2f}" if calibration is None else " (calibrated: Δu·T around the measured run)")
    )
    return MemoryPlan(
        backend="vllm", version=s.version, model=cfg.name, gpu_mem_gib=t, tp=s.tp, dp=s.dp, ep=s.ep,
        weights_gib_per_rank=w, weights_source=weights.kind, kv_bytes_per_token=round(cell), rows=rows, current=current,
        current_is_default=is_default, recommended=recommended, target_headroom_gib=target_headroom,
        warn_headroom_gib=warn_headroom, terms=terms,
        calibrated_from=calibration.run_id if calibration else None, calibration_error=cal_err, notes=tuple(notes),
        arithmetic=arithmetic, role=s.role,
    )


def recommended_value(mp: MemoryPlan) -> float | None:
    """The recommendation rounded the way the Δu advice rounds (down to two decimals)."""
    if mp.recommended is None:
        return None
    return floor2(mp.recommended.value) if mp.recommended.flag == FLAG else mp.recommended.value


def memory_plan(
    profile: Profile,
    hosts: Iterable[HostFacts],
    *,
    model: ModelFacts,
    overrides: Mapping[str, Any] | None = None,
    runs: Iterable[Any] = (),
    calibrate_from: str | None = None,
) -> MemoryPlan:
    """The plan of a profile (Backend.planner.memory_plan): its flags with `overrides`, the GPUs in `hosts`,
    the model read on node 0, and a calibration run from `runs` (journal records)."""
    settings = profile_settings(profile, dict(overrides or {}))
    gpu = gpu_facts_from_hosts(hosts, profile.env)
    calibration: Calibration | None = None
    if calibrate_from is not None:
        rec = next((r for r in runs if str(r.id) == calibrate_from), None)
        if rec is None:
            raise ModelConfigError(f"--calibrate-from {calibrate_from}: no such run in the journal (`cockpit runs` lists them)")
        calibration = calibration_from_run(rec, FLAG, default_util(settings.version))
        if calibration is None:
            raise ModelConfigError(f"--calibrate-from {calibrate_from}: the run recorded no KV tokens or headroom")
    elif settings.kv_cache_memory_bytes is None:
        calibration = pick_calibration(runs, backend=profile.backend, flags={**profile.server, **dict(overrides or {})},
                                       hosts=tuple(h.label for h in profile.hosts), value_flag=FLAG,
                                       setup_flags=SETUP_FLAGS, default_value=default_util(settings.version))
    return plan(model.config, model.weights, gpu, settings, target_headroom=profile.policy.target_headroom_gb,
                warn_headroom=profile.policy.warn_headroom_gb, calibration=calibration, draft=model.draft)


def term_lines(terms: Mapping[str, float]) -> list[str]:
    """`cockpit plan`'s lines for vLLM's own terms: non-torch memory, the activation peak of the
    profile run (at its batch: tokens and sequences) and the graph pool."""
    lines = []
    if "non_torch_gib" in terms:
        lines.append(f"  non-torch memory        {terms['non_torch_gib']:8.2f} GiB (estimated)")
    if "activation_peak_gib" in terms:
        lines.append(f"  activation peak         {terms['activation_peak_gib']:8.2f} GiB (estimated for "
                     f"{terms.get('max_num_batched_tokens', 0):,.0f} tokens, {terms.get('max_num_seqs', 0):,.0f} seqs)")
    if "graph_gib" in terms:
        lines.append(f"  CUDA graphs             {terms['graph_gib']:8.2f} GiB (estimated)")
    return lines
