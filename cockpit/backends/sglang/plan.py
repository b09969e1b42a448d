"""SGLang's memory budget before launch: weights per rank, KV tokens and headroom after capture for
each `--mem-fraction-static`.

Follows SGLang's own arithmetic (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py:
`profile_max_num_token`, `init_memory`; python/sglang/srt/server_args.py:
`_handle_gpu_memory_settings`), reusing cockpit/backends/sglang/memory.py for the parts the δ·P
diagnosis already has (pool, tokens, the default mfs and GPU-size buckets):

    P   = free memory before weights load      (measured free − CUDA context − distributed init)
    W   = weights per rank                     (checkpoint bytes split the way SGLang shards them)
    KV  = A − P·(1 − mfs),  A = P − W          (memory.kv_pool_gib; profile_max_num_token)
    tokens = ⌊KV·2³⁰ / cell⌋, capped by --max-total-tokens, aligned down to --page-size
    free before capture = P·(1 − mfs) − req_to_token pool − attention workspaces
        req_to_token = max_running_requests × (context_len + 4) × 4 bytes (ReqToTokenPool, int32),
        max_running_requests = clamp(⌊tokens / context_len × 512⌋, 2048, 4096) unless set
    headroom after capture = free before capture − graph memory

Graph memory comes out of P·(1 − mfs), after the pool is sized: terms.graph_term, from the decode
batch sizes SGLang captures (its logits buffer and attention index table from the code, a per-graph
cost fitted to real logs; docs/PLAN.md) until a journal run of the same setup replaces it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.backends.sglang.command import effective_flags
from cockpit.backends.sglang.flags import resolve_version, version_key
from cockpit.backends.sglang.memory import (
    GIB,
    DefaultMfs,
    cell_bytes_mha,
    cell_bytes_mla,
    default_mfs,
    floor2,
    gpu_bucket,
    kv_pool_gib,
    kv_tokens,
)
from cockpit.backends.sglang.terms import (
    VLM_FIXED_090_UNTIL,
    Spread,
    decode_capture_sizes,
    graph_term,
    hybrid_swa_pool,
    kv_band,
    pre_load_term,
    vlm_mfs_factor,
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
from cockpit.model.platform import QUICK_REDUCE_WORLD_SIZES, Platform, platform_of, quick_reduce_gib
from cockpit.model.weights import Parallel, WeightIndex, split_weights

# ROCm's quick all-reduce as SGLang names it (the upstream names: sglang quick_all_reduce.py)
QUICK_REDUCE_ENV = "ROCM_QUICK_REDUCE_QUANTIZATION"
QUICK_REDUCE_MAX_ENV = "ROCM_QUICK_REDUCE_MAX_SIZE_BYTES_MB"

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from collections.abc import Iterable

    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import Profile
    from cockpit.model.read import ModelFacts

FLAG = "--mem-fraction-static"
# flags that change the memory budget: a journal run that differs in any of them cannot calibrate
SETUP_FLAGS = (
    "model-path", "model", "tp", "tp-size", "tensor-parallel-size", "dp", "dp-size", "data-parallel-size", "ep", "ep-size",
    "expert-parallel-size", "pp-size", "pipeline-parallel-size", "enable-dp-attention", "attn-dp-size", "kv-cache-dtype",
    "context-length", "chunked-prefill-size", "cuda-graph-max-bs", "cuda-graph-max-bs-decode", "max-running-requests",
    "max-total-tokens", "page-size", "disable-cuda-graph", "speculative-algorithm", "quantization", "dtype",
)
TABLE = tuple(round(0.80 + 0.01 * i, 2) for i in range(16))  # 0.80 … 0.95, the values operators use
SEARCH = tuple(round(0.40 + 0.01 * i, 2) for i in range(60))  # where the recommendation may land

# P's estimate (the CUDA context and the distributed group) and W's band: cockpit/backends/sglang/terms.py
# Between `Memory pool end` and `Capture … begin` the attention backend takes its workspaces (and cuBLAS
# its own): two real start-up logs show 0.53 GiB (Llama-3.1-8B, RTX 4090) and 0.64 GiB (QwQ-32B TP4, L4),
# tests/data/real/plan/sglang/. An estimate; a journal run replaces it.
ATTN_WORKSPACE_GIB = 0.55
# The target's CUDA-graph memory: terms.graph_term, by the batch sizes captured. The draft model's
# graphs (draft_budget) keep the earlier estimate: SGLang's reserve coefficient (2 MiB per decode
# batch size at hidden 8192) plus 8 MiB per layer, twice (draft decode and draft extend).
GRAPH_MIB_PER_BS = 2.0
GRAPH_MIB_PER_DENSE_LAYER = 8.0
KV_DTYPE_BYTES = {"fp8_e5m2": 1.0, "fp8_e4m3": 1.0, "mxfp8": 1.0, "bf16": 2.0, "bfloat16": 2.0,
                  "fp4_e2m1": 0.5, "nvfp4": 0.5, "fp4_mx_block16": 0.5}


@dataclass(frozen=True)
class Settings:
    """The server flags that move the budget, typed (dest names as SGLang's ServerArgs)."""

    version: str
    mfs: float | None
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    dp_attention: bool = False
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"  # --dtype: unquantized weights and the auto KV cache are held in it
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None  # --cuda-graph-bs (0.5.23: --cuda-graph-bs-decode)
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    page_size: int = 1
    decode_graph: bool = True
    prefill_graph: bool = False  # 0.5.23's prefill graphs (settings_from_flags decides)
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_kv_cache_dtype: str | None = None
    disaggregation_mode: str | None = None  # "prefill" / "decode" (None: one server does both)
    hicache: bool = False  # --enable-hierarchical-cache: a host KV pool beside the device pool
    env: tuple[tuple[str, str], ...] = ()  # the launch's environment (ROCm's quick all-reduce reads it)

    @property
    def parallel(self) -> Parallel:
        return Parallel(self.tp, self.dp, self.ep, self.pp, self.dp_attention)


def settings_from_flags(flags: Mapping[str, Any], version: str | None) -> Settings:
    """Settings from `{dest: value}` (ServerArgs names, as command.effective_flags gives them)."""
    v = resolve_version(version)
    new = version_key(v) >= version_key("0.5.23")

    def num(key: str, default: Any = None) -> Any:
        val = flags.get(key)
        return default if val is None else val

    attn_dp = num("attn_dp_size")
    dp = int(num("dp_size", 1))
    dp_attention = bool(num("enable_dp_attention", False)) or (attn_dp is not None and int(attn_dp) > 1)
    if attn_dp is not None and int(attn_dp) > 1:
        dp = int(attn_dp)
    mode = str(num("disaggregation_mode", "null"))
    role = mode if mode in ("prefill", "decode") else None
    # a prefill server captures no decode graphs (server_args.py: "Cuda graph is disabled for prefill server")
    disable_all = bool(num("disable_cuda_graph", False)) or role == "prefill"
    decode_graph = not disable_all and not bool(num("disable_decode_cuda_graph", False)) and num("cuda_graph_backend_decode", "full") != "disabled"
    prefill_graph = new and not disable_all and not bool(num("disable_prefill_cuda_graph", False)) and num("cuda_graph_backend_prefill", "breakable") != "disabled"
    mfs = num("mem_fraction_static")
    if mfs is not None:
        try:
            mfs = float(mfs)
        except (TypeError, ValueError):
            raise ModelConfigError(f"--mem-fraction-static {mfs!r}: expected a fraction between 0 and 1") from None
        if not (math.isfinite(mfs) and 0 < mfs < 1):
            raise ModelConfigError(f"--mem-fraction-static {mfs:g}: expected a fraction between 0 and 1 (exclusive)")
    return Settings(
        version=v,
        mfs=float(mfs) if mfs is not None else None,
        tp=int(num("tp_size", 1)),
        dp=dp,
        ep=int(num("ep_size", 1)),
        pp=int(num("pp_size", 1)),
        dp_attention=dp_attention,
        kv_cache_dtype=str(num("kv_cache_dtype", "auto")),
        dtype=str(num("dtype", "auto")),
        context_length=num("context_length"),
        chunked_prefill_size=num("chunked_prefill_size"),
        cuda_graph_max_bs=num("cuda_graph_max_bs_decode" if new else "cuda_graph_max_bs"),
        cuda_graph_bs=_int_tuple(num("cuda_graph_bs_decode" if new else "cuda_graph_bs")),
        max_running_requests=num("max_running_requests"),
        max_total_tokens=num("max_total_tokens"),
        page_size=int(num("page_size", 1) or 1),
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        speculative_algorithm=num("speculative_algorithm"),
        speculative_draft_model_path=num("speculative_draft_model_path"),
        speculative_num_steps=num("speculative_num_steps"),
        speculative_eagle_topk=num("speculative_eagle_topk"),
        speculative_num_draft_tokens=num("speculative_num_draft_tokens"),
        speculative_draft_kv_cache_dtype=num("speculative_draft_kv_cache_dtype"),
        disaggregation_mode=role,
        hicache=bool(num("enable_hierarchical_cache", False)),
    )


def _int_tuple(val: Any) -> tuple[int, ...] | None:
    if val is None:
        return None
    if isinstance(val, (int, str)):
        val = [val]
    try:
        out = tuple(int(x) for x in val)
    except (TypeError, ValueError):
        raise ModelConfigError(f"--cuda-graph-bs {val!r}: expected batch sizes (integers)") from None
    if not out or min(out) < 1:
        raise ModelConfigError(f"--cuda-graph-bs {val!r}: expected positive batch sizes")
    return out


def profile_settings(profile: Profile, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings of a profile's server flags with `--set` overrides (FlagError for a bad flag)."""

    version = resolve_version(profile.version)
    flags = {dest: val for dest, (_spec, val) in effective_flags(profile, overrides, version=version).items()}
    env = tuple(sorted((str(k), str(v)) for k, v in (profile.env or {}).items()))
    return dataclasses.replace(settings_from_flags(flags, version), env=env)


def cell_bytes(cfg: ModelConfig, s: Settings) -> float:
    """KV bytes per token per rank (get_cell_size_per_token): MLA latent not split by TP; MHA/GQA
    heads split by the attention TP group (at least one head per rank)."""
    if s.kv_cache_dtype == "auto":
        b: float = float(cfg.load_dtype(s.dtype)[1])  # the KV cache takes the launch's dtype
    elif s.kv_cache_dtype in KV_DTYPE_BYTES:
        b = KV_DTYPE_BYTES[s.kv_cache_dtype]
    else:
        raise ModelConfigError(f"--kv-cache-dtype {s.kv_cache_dtype!r}: the plan knows {', '.join(['auto', *KV_DTYPE_BYTES])}")
    layers = math.ceil(cfg.layers / max(1, s.pp))
    if cfg.attention == "mla":
        dim = (cfg.kv_lora_rank or 0) + (cfg.qk_rope_head_dim or 0)
        c = cell_bytes_mla(cfg.kv_lora_rank or 0, cfg.qk_rope_head_dim or 0, layers, b)
        if b == 0.5:  # FP4: one 1-byte scale per 16 elements
            c += (dim // 16) * layers
        if cfg.index_head_dim:
            # NSA's indexer keys (fp8 with a 4-byte scale per 128), uint8 storage, every layer
            c += (cfg.index_head_dim + cfg.index_head_dim // 128 * 4) * layers
        return c
    heads = max(1, cfg.num_kv_heads // s.parallel.attn_tp)
    c = cell_bytes_mha(heads, cfg.head_dim, cfg.v_head_dim, layers, b)
    if b == 0.5:
        c += heads * cfg.head_dim * layers * 2 / 16
    return c


def quick_reduce(s: Settings, platform: Platform) -> float:
    """ROCm's quick all-reduce buffer (GiB per rank) when the launch's environment turns it on
    (sglang quick_all_reduce.py: MI300-class cards, TP 2, 4 or 8; cockpit.model.platform)."""
    if not platform.rocm or s.tp not in QUICK_REDUCE_WORLD_SIZES:
        return 0.0
    return quick_reduce_gib(dict(s.env), QUICK_REDUCE_ENV, QUICK_REDUCE_MAX_ENV)


def pre_load_free(gpu: GpuFacts, s: Settings) -> float:
    """P: the free memory the ranks see at `Load weight begin` (the least over ranks; terms.pre_load_term)."""
    platform = platform_of(gpu.name, gpu.total_gib)
    return pre_load_term(gpu, s.tp * s.pp, platform, quick_reduce(s, platform)).gib


def graph_max_bs(gpu: GpuFacts, s: Settings) -> int:
    """The largest decode batch size SGLang's flags ask for: `--cuda-graph-bs`'s largest (server_args
    sets cuda_graph_max_bs to it), else `--cuda-graph-max-bs`, else the GPU-size bucket's default."""
    if s.cuda_graph_bs:
        return max(s.cuda_graph_bs)
    return int(s.cuda_graph_max_bs or gpu_bucket(gpu.total_gib * 1024, s.tp, s.version)[1])


def capture_sizes(gpu: GpuFacts, s: Settings) -> tuple[int, ...]:
    """The decode batch sizes the target captures (terms.decode_capture_sizes); none without decode graphs."""
    if not s.decode_graph:
        return ()
    return decode_capture_sizes(graph_max_bs(gpu, s), s.version, speculative=s.speculative_algorithm is not None,
                                given=s.cuda_graph_bs, table_rows=request_table_rows(s))


def target_graph_term(cfg: ModelConfig, gpu: GpuFacts, s: Settings, ctx: int) -> Spread:
    """The target's graph memory for its capture sizes (terms.graph_term): with speculative decoding
    the target captures verify graphs of `--speculative-num-draft-tokens` per request."""
    q = int(s.speculative_num_draft_tokens or SPEC_DEFAULTS[2]) if s.speculative_algorithm else 1
    return graph_term(capture_sizes(gpu, s), vocab=cfg.vocab_size, context=ctx,
                      layers=math.ceil(cfg.layers / max(1, s.pp)), tokens_per_req=q, prefill=s.prefill_graph)


def _table_rows(reqs: int, s: Settings) -> int:
    if s.disaggregation_mode == "decode" and reqs <= 32:
        # DecodeReqToTokenPool (model_runner_kv_cache_mixin): a decode server subscribes rows for
        # requests pre-allocated while their KV is in flight, 2 × max_num_reqs when that is ≤ 32
        reqs += 2 * reqs
    return reqs


def request_table_rows(s: Settings) -> int | None:
    """The request table's rows (req_to_token_pool.size) when --max-running-requests sets them;
    None when SGLang derives them from the pool (then at least 2048, above any graph batch)."""
    if s.max_running_requests is None:
        return None
    return _table_rows(int(s.max_running_requests) // (s.dp if s.dp_attention else 1), s)


def req_to_token_gib(tokens: int, ctx: int, s: Settings) -> float:
    rows = request_table_rows(s)
    if rows is None:
        rows = _table_rows(min(max(int(tokens / ctx * 512), 2048), 4096), s)
    return rows * (ctx + 4) * 4 / GIB


def _tokens(kv: float, cell: float, cfg: ModelConfig, s: Settings) -> int:
    t = kv_tokens(kv, cell)
    if cfg.swa_layers and cfg.full_attention_layers and hybrid_swa_pool(s.version, cfg.architecture):
        # set_num_tokens_hybrid_swa: the pool splits full and SWA layers at swa_full_tokens_ratio 0.8;
        # max_total_num_tokens reports the full-attention layers' tokens
        n_full, n_swa = cfg.full_attention_layers, cfg.swa_layers
        t = int(t * (n_full + n_swa) / (n_full + 0.8 * n_swa))
    if s.max_total_tokens is not None:
        t = min(t, int(s.max_total_tokens))
    return t // s.page_size * s.page_size


def _default_mfs(cfg: ModelConfig, gpu: GpuFacts, s: Settings) -> DefaultMfs:
    """The mfs SGLang picks itself for these flags on this GPU (memory.default_mfs)."""
    # a --cuda-graph-bs list sets cuda_graph_max_bs to its largest before the reserve is taken (server_args)
    max_bs = max(s.cuda_graph_bs) if s.cuda_graph_bs else s.cuda_graph_max_bs
    return default_mfs(gpu.total_gib * 1024, version=s.version, tp=s.tp, pp=s.pp, attn_dp=s.dp if s.dp_attention else 1,
                       chunked_prefill_size=s.chunked_prefill_size, cuda_graph_max_bs=max_bs,
                       max_running_requests=s.max_running_requests, speculative_algorithm=s.speculative_algorithm,
                       mla=cfg.attention == "mla", decode_graph=s.decode_graph, prefill_graph=s.prefill_graph)


def auto_mfs(cfg: ModelConfig, gpu: GpuFacts, s: Settings) -> tuple[float, str]:
    """The value SGLang runs with when --mem-fraction-static is unset, and how it got there: the
    reserve formula or table (_default_mfs), then, from 0.4.7, server_args' reduction for a
    multimodal model (terms.vlm_mfs_factor; before 0.4.7 ModelRunner lowers every value: mfs_in_pool)."""
    d = _default_mfs(cfg, gpu, s)
    words = d.arithmetic()
    if version_key(s.version) < version_key(VLM_FIXED_090_UNTIL):
        return d.mfs, words
    f = _vlm(cfg, s, explicit=False)
    if f == 1.0:
        return d.mfs, words
    return d.mfs * f, f"{words}, × {f:.4f} for the vision tower (adjust_mem_fraction_for_vlm)"


def _vlm(cfg: ModelConfig, s: Settings, explicit: bool) -> float:
    return vlm_mfs_factor(s.version, cfg.has_vision, cfg.vision_config, explicit, cfg.vision_layers, cfg.vision_hidden)


def mfs_in_pool(cfg: ModelConfig, s: Settings, mfs: float) -> float:
    """The fraction SGLang sizes the pool with for the flag value `mfs`: before 0.4.7 ModelRunner
    lowers every value for a multimodal model (terms.vlm_mfs_factor); from 0.4.7 the flag is used as
    given (the automatic value is lowered in _default_mfs instead)."""
    if version_key(s.version) >= version_key(VLM_FIXED_090_UNTIL):
        return mfs
    return mfs * _vlm(cfg, s, explicit=True)


# ---- speculative decoding ---------------------------------------------------------------------

# SGLang's own choice when --speculative-num-steps / -eagle-topk / -num-draft-tokens are unset for
# a model without a tuned table (server_args.py auto_choose_speculative_params): 3 steps, top-1, 4.
SPEC_DEFAULTS = (3, 1, 4)
SPEC_DRAFT_MODEL = ("EAGLE", "EAGLE3", "STANDALONE")  # need --speculative-draft-model-path
SPEC_MTP = ("NEXTN", "MTP")  # the checkpoint's own MTP layers when no draft path is given
# The first release whose scheduler loads the draft's weights before the target's KV pool is sized
# (Scheduler.init_model_worker: init_tp_model_worker → maybe_init_draft_worker → init_memory_pools;
# sgl-project/sglang#28855, a redo of #28683 after #23862): the draft's weights count against
# --mem-fraction-static, the pool's bytes per token carry the draft's layers
# (pool_configurator.DefaultPoolConfigurator: cell × (1 + eagle_draft_num_layers / num_layers)), and
# server_args no longer reserves a flat 4/6 GiB for the draft. Checked in the released wheels:
# 0.5.13's ModelRunner.initialize still sizes the pool before the draft worker exists; 0.5.14's does not.
DRAFT_IN_STATIC_SINCE = "0.5.14"


# Up to 0.5.6 the draft pool held the target's tokens plus room for in-flight draft and verify tokens
# (model_runner.py: draft_runner_cache_size = tokens + reqs·steps·topk + reqs·draft_tokens + 100);
# 0.5.7 sets draft_runner_cache_size = max_total_num_tokens (model_runner_kv_cache_mixin.py, wheels).
DRAFT_POOL_EXTRA_UNTIL = "0.5.7"


def draft_weights_in_static(version: str | None) -> bool:
    """True on the releases that count the draft's weights against --mem-fraction-static."""
    return version_key(resolve_version(version)) >= version_key(DRAFT_IN_STATIC_SINCE)


@dataclass(frozen=True)
class DraftBudget:
    """What a speculative draft worker takes, in one of SGLang's two orders of allocation.

    Before DRAFT_IN_STATIC_SINCE (`in_static` False) the draft worker is built after the target's
    ModelRunner: its weights, its own KV pool and its graphs come out of the memory the target left
    free. The draft pool holds the target's tokens (draft_runner_cache_size = max_total_num_tokens),
    and before DRAFT_POOL_EXTRA_UNTIL (`inflight`) room for the in-flight draft and verify tokens
    too: tokens + reqs·steps·topk + reqs·draft_tokens + 100.

    From it (`in_static` True) the draft's weights are resident when the target's pool is sized, so
    they count against --mem-fraction-static (the plan takes them from A), and the pool's bytes per
    token are the target's × (1 + draft layers / target layers) (`budget_cell_bytes` is that extra):
    the draft pool, of the target's tokens (the pools share one MemoryPoolConfig), sits inside the
    static budget. Only its graphs, and whatever its real bytes per token exceed the budgeted ones
    by, come out of the headroom."""

    algorithm: str
    weights_gib: float
    cell_bytes: float  # the draft's KV bytes per token per rank
    graph_gib: float
    steps: int
    topk: int
    draft_tokens: int
    layers: int = 0  # the draft's attention layers (eagle_draft_num_layers)
    in_static: bool = False
    budget_cell_bytes: float = 0.0  # in_static: the bytes per token SGLang adds to the target's for the draft
    inflight: bool = False  # the draft pool's room for in-flight draft/verify tokens (before 0.5.7)

    def pool_tokens(self, tokens: int, ctx: int, s: Settings) -> int:
        if not self.inflight:
            return tokens
        reqs = _max_reqs(tokens, ctx, s)
        return tokens + reqs * self.steps * self.topk + reqs * self.draft_tokens + 100

    def kv_gib(self, tokens: int, ctx: int, s: Settings) -> float:
        return self.pool_tokens(tokens, ctx, s) * self.cell_bytes / GIB

    def cost_gib(self, tokens: int, ctx: int, s: Settings) -> float:
        """What the draft takes from the free memory after capture."""
        if self.in_static:
            return self.graph_gib + max(0.0, self.kv_gib(tokens, ctx, s) - tokens * self.budget_cell_bytes / GIB)
        return self.weights_gib + self.kv_gib(tokens, ctx, s) + self.graph_gib

    def terms(self, tokens: int, ctx: int, s: Settings) -> dict[str, float]:
        out = {"draft_weights_gib": self.weights_gib, "draft_kv_gib": self.kv_gib(tokens, ctx, s),
               "draft_graph_gib": self.graph_gib, "draft_kv_bytes_per_token": float(round(self.cell_bytes)),
               "draft_pool_tokens": float(self.pool_tokens(tokens, ctx, s))}
        if self.in_static:
            out["draft_budget_bytes_per_token"] = float(round(self.budget_cell_bytes))
        return out


def _max_reqs(tokens: int, ctx: int, s: Settings) -> int:
    if s.max_running_requests is not None:
        return int(s.max_running_requests) // (s.dp if s.dp_attention else 1)
    return min(max(int(tokens / max(1, ctx) * 512), 2048), 4096)


def draft_budget(cfg: ModelConfig, weights: WeightIndex, draft: ModelFacts | None, s: Settings, bs: int,
                 notes: list[str]) -> DraftBudget | None:
    """The draft's memory for --speculative-algorithm (None without one, or NGRAM: no draft model)."""
    algo = (s.speculative_algorithm or "").upper()
    if not algo or algo == "NGRAM":
        return None
    load = cfg.load_dtype(s.dtype)[1]
    steps = int(s.speculative_num_steps or SPEC_DEFAULTS[0])
    topk = int(s.speculative_eagle_topk or SPEC_DEFAULTS[1])
    ndt = int(s.speculative_num_draft_tokens or SPEC_DEFAULTS[2])
    if s.speculative_num_steps is None:
        notes.append(f"--speculative-num-steps unset: planned with SGLang's generic {SPEC_DEFAULTS[0]} steps, top-{SPEC_DEFAULTS[1]}, "
                     f"{SPEC_DEFAULTS[2]} draft tokens (its tuned table may pick others for this model)")
    if draft is not None:
        dcfg, dweights = draft.config, draft.weights
        if dweights is None:
            raise ModelConfigError(f"{draft.where}: the draft model's weights are unknown")
        shares = ("embed_tokens", "lm_head") if algo == "EAGLE" else ("embed_tokens",) if algo == "EAGLE3" else ()
        if dcfg.nextn_layers and algo in SPEC_MTP:
            w = mtp_layer_bytes(dcfg, dweights, s.parallel, load_bytes=load)
        else:
            w = draft_model_bytes(dcfg, dweights, s.parallel, load_bytes=load, shares=shares)
        layers = dcfg.nextn_layers or dcfg.layers
    elif algo in SPEC_MTP or (algo == "EAGLE" and cfg.nextn_layers):
        if not cfg.nextn_layers:
            raise ModelConfigError(f"--speculative-algorithm {algo}: {cfg.name} has no num_nextn_predict_layers and no "
                                   "--speculative-draft-model-path names a draft")
        dcfg, w, layers = cfg, mtp_layer_bytes(cfg, weights, s.parallel, load_bytes=load), cfg.nextn_layers
        notes.append(f"speculative {algo}: the draft is the checkpoint's {plural(cfg.nextn_layers, 'MTP layer')}, sharing the target's embedding and head")
    else:
        notes.append(f"speculative {algo}: the draft model ({s.speculative_draft_model_path or 'no path given'}) was not read: "
                     "its weights, KV pool and graphs are not in the headroom")
        return None
    ds = dataclasses.replace(s, kv_cache_dtype=s.speculative_draft_kv_cache_dtype or s.kv_cache_dtype, pp=1)
    dl = dataclasses.replace(dcfg, layers=layers, swa_layers=0, index_head_dim=None)
    cell = cell_bytes(dl, ds)
    # draft decode graphs (one per batch size, each running the draft's steps) and draft-extend graphs:
    # SGLang's coefficient per batch size and per layer, as for the target, twice. An estimate.
    g = 2 * (GRAPH_MIB_PER_BS * bs * dcfg.hidden_size / 8192 + GRAPH_MIB_PER_DENSE_LAYER * layers) / 1024 if s.decode_graph else 0.0
    if draft_weights_in_static(s.version) and algo != "DFLASH":
        target_layers = max(1, cfg.layers // max(1, s.pp))
        extra = int(cell_bytes(cfg, s) * (1 + layers / target_layers)) - cell_bytes(cfg, s)
        notes.append(f"speculative {algo}: SGLang {resolve_version(s.version)} loads the draft's weights before the target's KV "
                     f"pool is sized (since {DRAFT_IN_STATIC_SINCE}): they count against --mem-fraction-static, and each pool "
                     f"token is budgeted {round(extra)} B more for the draft's {plural(layers, 'layer')} (the target's bytes × "
                     f"{layers}/{target_layers}); only the draft's graphs come out of the headroom")
        if cfg.swa_layers:
            notes.append("the draft's share of a sliding-window model's pool follows SGLang's default configurator: not checked for SWA pools")
        return DraftBudget(algo, w / GIB, cell, g, steps, topk, ndt, layers, True, float(extra))
    inflight = version_key(resolve_version(s.version)) < version_key(DRAFT_POOL_EXTRA_UNTIL)
    pool = "the target's tokens + in-flight draft/verify tokens" if inflight else "the target's tokens"
    notes.append(f"speculative {algo}: the draft worker loads after the target's graphs; its weights, KV pool "
                 f"({pool}) and graphs come out of the headroom")
    return DraftBudget(algo, w / GIB, cell, g, steps, topk, ndt, layers, inflight=inflight)


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
    the speculative draft model's facts when the flags name one (--speculative-draft-model-path)."""
    if weights is None:
        raise ModelConfigError(f"{cfg.name}: no model.safetensors.index.json and no .safetensors files: the weights' size is unknown")
    if s.tp < 1 or s.dp < 1 or s.ep < 1 or s.pp < 1:
        raise ModelConfigError("tp, dp, ep and pp must be positive")
    if s.dp_attention and s.tp % s.dp:
        raise ModelConfigError(f"--dp {s.dp} must divide --tp {s.tp} with DP attention")
    # the target never loads the checkpoint's MTP layers: a NEXTN/MTP draft worker does (draft_budget)
    split = split_weights(cfg, weights, s.parallel, load_bytes=cfg.load_dtype(s.dtype)[1])
    w = split.per_rank_gib
    platform = platform_of(gpu.name, gpu.total_gib)
    qr = quick_reduce(s, platform)
    p_t = pre_load_term(gpu, s.tp * s.pp, platform, qr)
    w_t = weights_term(w, bool(getattr(weights, "estimated", False)) or weights.kind == "config", platform)
    p = p_t.gib
    a = p - w
    cell = cell_bytes(cfg, s)
    ctx = int(s.context_length or cfg.context_length or 0)
    if ctx <= 0:
        raise ModelConfigError(f"{cfg.name}: no max_position_embeddings in config.json and no --context-length")
    # cuda_graph_runner.get_batch_sizes_to_capture keeps only batch sizes up to the request table's
    # rows (and adds that size): --max-running-requests 128 captures up to 128
    sizes = capture_sizes(gpu, s)
    bs = max(sizes) if sizes else graph_max_bs(gpu, s)
    g_t = target_graph_term(cfg, gpu, s, ctx)
    graphs = g_t.gib
    notes = list(cfg.notes)
    spec = draft_budget(cfg, weights, draft, s, bs, notes)
    pool_cell = cell  # bytes per token of the target's pool as SGLang sizes it
    if spec is not None and spec.in_static:
        a -= spec.weights_gib  # resident when the pool is profiled
        pool_cell = cell + spec.budget_cell_bytes

    def estimate(mfs: float) -> tuple[float, int, float]:
        mfs = mfs_in_pool(cfg, s, mfs)
        kv = kv_pool_gib(p, a, mfs)
        tok = _tokens(kv, pool_cell, cfg, s)
        head = p * (1 - mfs) - req_to_token_gib(tok, ctx, s) - ATTN_WORKSPACE_GIB - graphs
        if spec is not None:
            head -= spec.cost_gib(tok, ctx, s)
        return kv, tok, head

    cal_err: dict[str, float] = {}
    row_of = estimate
    if calibration is not None:
        kv_c = calibration.max_total_num_tokens * pool_cell / GIB
        _kv_e, tok_e, head_e = estimate(calibration.value)
        cal_err = {
            "max_total_num_tokens": float(tok_e - calibration.max_total_num_tokens),
            "max_total_num_tokens_pct": 100.0 * (tok_e - calibration.max_total_num_tokens) / max(1, calibration.max_total_num_tokens),
            "headroom_after_capture_gib": head_e - calibration.headroom_after_capture_gib,
        }

        def calibrated(mfs: float) -> tuple[float, int, float]:
            # the δ·P rule around the measured run: δ·P moves from free memory into the pool
            d = (mfs_in_pool(cfg, s, mfs) - mfs_in_pool(cfg, s, calibration.value)) * p
            kv = kv_c + d
            return kv, _tokens(kv, pool_cell, cfg, s), calibration.headroom_after_capture_gib - d

        row_of = calibrated

    def row(mfs: float) -> PlanRow:
        kv, tok, head = row_of(mfs)
        if calibration is not None:  # measured: no band
            return PlanRow(FLAG, mfs, tok, kv, head)
        less, more = kv_band(mfs_in_pool(cfg, s, mfs), p_t, w_t)
        return PlanRow(FLAG, mfs, tok, kv, head, _tokens(kv - less, pool_cell, cfg, s), _tokens(kv + more, pool_cell, cfg, s))

    rows = tuple(row(v) for v in TABLE)
    is_default = s.mfs is None
    mfs_now = s.mfs
    if mfs_now is None:
        mfs_now, how = auto_mfs(cfg, gpu, s)
        notes.append(f"--mem-fraction-static unset: SGLang {s.version} picks {mfs_now:g} ({how})")
    current = row(mfs_now)
    # the highest value (two decimals, as the δ·P advice rounds) whose headroom meets the target
    # and whose pool holds at least one token
    searched = [row(v) for v in SEARCH]
    # the recommendation starts at the band's low end too
    meets = [r for r in searched if r.headroom_after_capture_gib >= target_headroom and r.low > 0]
    recommended = max(meets, key=lambda r: r.value) if meets else None
    safe = next((r for r in searched if r.low > 0), None) if current.tight else None
    if split.unknown_bytes:
        notes.append(f"{split.unknown_bytes / GIB:.2f} GiB of checkpoint tensors matched no sharding rule: counted whole on every rank")
    if not split.exact_split:
        notes.append("weights: the index's exact total_size, split by config.json's layer shapes (no safetensors headers read)")
    notes += weight_notes(cfg, weights, s.dtype)
    if s.disaggregation_mode == "prefill":
        notes.append("prefill role (--disaggregation-mode prefill): SGLang captures no decode CUDA graphs; the pool holds "
                     "prompts until the decode group takes their KV")
    elif s.disaggregation_mode == "decode":
        notes.append("decode role (--disaggregation-mode decode): the pool holds the running requests' KV sent by the prefill group"
                     + ("; its request table holds 2 × max_running_requests more rows for pre-allocated requests (SGLang does so up to 32 requests)"
                        if s.max_running_requests is not None and s.max_running_requests // (s.dp if s.dp_attention else 1) <= 32 else ""))
    if s.hicache:
        notes.append("HiCache (--enable-hierarchical-cache) keeps a host KV pool beside this device pool: the KV tokens here are "
                     "the GPU pool's; the host pool (--hicache-size / --hicache-ratio) lives in host RAM, outside this plan")
    if qr:
        notes.append(f"ROCm quick all-reduce on (ROCM_QUICK_REDUCE_QUANTIZATION): {qr:.1f} GiB per rank of communication "
                     "buffer before the weights (twice its largest problem), out of P")
    if calibration is None and (platform.rocm or platform.desktop or not platform.known):
        why = ("the HIP context, RCCL and the AITER workspaces are less regular than CUDA's" if platform.rocm else
               "a desktop may hold GPU memory before the server starts (0.7–1.1 GiB on two Windows logs)" if platform.desktop
               else "the card's name is not measured, so NCCL's buffers are taken at their widest")
        notes.append(f"{platform.words()}: the KV band is wider ({why})")
    if calibration is None and sizes and current.headroom_after_capture_gib >= 0 > current.headroom_after_capture_gib - g_t.high:
        # the pool does not depend on the graphs (KV = P·mfs − W): they come out of what mfs leaves
        notes.append(f"CUDA graphs: {len(sizes)} decode batch sizes up to {max(sizes)} take {graphs:.2f} GiB "
                     f"({graphs - g_t.low:.2f} – {graphs + g_t.high:.2f}); at the high end they do not fit in what "
                     f"--mem-fraction-static {mfs_now:g} leaves after the pool (graph capture would fail): a lower value "
                     f"or a smaller {'--cuda-graph-max-bs-decode' if version_key(s.version) >= version_key('0.5.23') else '--cuda-graph-max-bs'} makes room")
    if calibration is None:
        notes.append("estimate: P, graph memory and workspaces are not measured yet; a finished run of this setup calibrates them")
    terms = {
        "pre_load_avail_gib": p,
        "after_weights_avail_gib": a,
        "graph_gib": graphs if calibration is None else math.nan,
        "req_to_token_gib": req_to_token_gib(current.max_total_num_tokens, ctx, s),
        "attention_workspace_gib": ATTN_WORKSPACE_GIB,
        "cuda_graph_max_bs": float(bs),
        "cuda_graph_sizes": float(len(sizes)),
        "graph_spread_low_gib": g_t.low if calibration is None else math.nan,
        "graph_spread_high_gib": g_t.high if calibration is None else math.nan,
        "context_length": float(ctx),
        "context_len": float(ctx),  # the same, in the plan's own word (MemoryPlan.request_length reads it)
        "mfs_floor": 1 - a / p if p > 0 else math.nan,
        # each estimated term's half-widths and the KV band's at the current value (GiB): docs/PLAN.md
        "pre_load_spread_low_gib": p_t.low if calibration is None else math.nan,
        "pre_load_spread_high_gib": p_t.high if calibration is None else math.nan,
        "weights_spread_gib": w_t.high if calibration is None else math.nan,
        "kv_band_low_gib": kv_band(mfs_now, p_t, w_t)[0] if calibration is None else math.nan,
        "kv_band_high_gib": kv_band(mfs_now, p_t, w_t)[1] if calibration is None else math.nan,
        "low_end_safe_value": safe.value if safe is not None else math.nan,
        **(spec.terms(current.max_total_num_tokens, ctx, s) if spec is not None else {}),
    }
    terms = {k: v for k, v in terms.items() if not math.isnan(v)}
    return MemoryPlan(
        backend="sglang", version=s.version, model=cfg.name, gpu_mem_gib=gpu.total_gib, tp=s.tp, dp=s.dp, ep=s.ep,
        weights_gib_per_rank=w, weights_source=weights.kind, kv_bytes_per_token=round(cell), rows=rows, current=current,
        current_is_default=is_default, recommended=recommended, target_headroom_gib=target_headroom,
        warn_headroom_gib=warn_headroom, terms=terms,
        calibrated_from=calibration.run_id if calibration else None, calibration_error=cal_err, notes=tuple(notes),
        role=s.disaggregation_mode,
    )


def recommended_value(mp: MemoryPlan) -> float | None:
    """The recommendation rounded the way the δ·P advice rounds (down to two decimals)."""
    return floor2(mp.recommended.value) if mp.recommended else None


def memory_plan(
    profile: Profile,
    hosts: Iterable[HostFacts],
    *,
    model: ModelFacts,
    overrides: Mapping[str, Any] | None = None,
    runs: Iterable[Any] = (),
    calibrate_from: str | None = None,
) -> MemoryPlan:
    """The plan of a profile (Backend.planner.memory_plan): its flags with `overrides`, the GPUs in `hosts`
    (what-ifs applied), the model read on node 0, and a calibration run from `runs` (journal
    records): `calibrate_from` names one, else the newest run of the same setup is taken."""
    settings = profile_settings(profile, dict(overrides or {}))
    gpu = gpu_facts_from_hosts(hosts, profile.env)
    calibration: Calibration | None = None
    if calibrate_from is not None:
        rec = next((r for r in runs if str(r.id) == calibrate_from), None)
        if rec is None:
            raise ModelConfigError(f"--calibrate-from {calibrate_from}: no such run in the journal (`cockpit runs` lists them)")
        calibration = calibration_from_run(rec, FLAG)
        if calibration is None:
            raise ModelConfigError(f"--calibrate-from {calibrate_from}: the run recorded no KV tokens, headroom or {FLAG}")
    else:
        # a run that left --mem-fraction-static unset ran with SGLang's own value for the same flags
        auto = auto_mfs(model.config, gpu, settings)[0]
        calibration = pick_calibration(runs, backend=profile.backend, flags={**profile.server, **dict(overrides or {})},
                                       hosts=tuple(h.label for h in profile.hosts), value_flag=FLAG,
                                       setup_flags=SETUP_FLAGS, default_value=auto)
    return plan(model.config, model.weights, gpu, settings, target_headroom=profile.policy.target_headroom_gb,
                warn_headroom=profile.policy.warn_headroom_gb, calibration=calibration, draft=model.draft)


def term_lines(terms: Mapping[str, float]) -> list[str]:
    """`cockpit plan`'s lines for SGLang's own terms: the graph pool (at its max batch size) and
    the request table (at the context length)."""
    lines = []
    if "graph_gib" in terms:
        bs = f", max bs {terms['cuda_graph_max_bs']:.0f}" if "cuda_graph_max_bs" in terms else ""
        if "cuda_graph_sizes" in terms:
            bs = f", {terms['cuda_graph_sizes']:.0f} batch sizes{bs}"
        lines.append(f"  CUDA graphs             {terms['graph_gib']:8.2f} GiB (estimated{bs})")
    if "req_to_token_gib" in terms:
        lines.append(f"  req_to_token pool       {terms['req_to_token_gib']:8.2f} GiB "
                     f"(context {terms.get('context_length', 0):,.0f})")
    return lines
