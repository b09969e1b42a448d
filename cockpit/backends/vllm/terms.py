"""vLLM's memory terms before launch, one function per term, each with the vLLM source it follows
and the uncertainty it carries (GiB, the half-width of its band).

The uncertainties come from the residuals of the plan's terms on real launches (docs/PLAN.md,
"The tight-fit batch: residuals per term"): what the plan estimated against what each log's
`Memory profiling takes … Total non KV cache memory … torch peak memory increase … non-torch
forward increase memory … weights memory` line measured. A term the engine fixes exactly (the
requested memory, the KV bytes per token) carries none.

The `vllm serve` flags the terms read (`Settings`) are defined here, below the plan that builds
them from a profile (plan.py), so that the plan imports the terms and the terms never the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.backends.vllm.flags import version_key
from cockpit.model.weights import GIB

if TYPE_CHECKING:
    from cockpit.model.config import ModelConfig
    from cockpit.model.platform import Platform


@dataclass(frozen=True)
class Settings:
    """The `vllm serve` flags that move the budget (dest names as vLLM's EngineArgs)."""

    version: str
    util: float | None  # None: vLLM's default for the version
    kv_cache_memory_bytes: int | None = None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"  # --dtype: unquantized weights and the auto KV cache are held in it
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    graphs: bool = True  # False: --enforce-eager or cudagraph_mode NONE
    cudagraph_mode: str | None = None  # compilation_config's cudagraph_mode (None: the version's default)
    optimization_level: int | None = None  # -O: 0 no graphs, 1 PIECEWISE, 2/3 FULL_AND_PIECEWISE
    capture_sizes: tuple[int, ...] | None = None  # --cudagraph-capture-sizes / compilation_config's / 0.10's list
    max_capture_size: int | None = None  # --max-cudagraph-capture-size / compilation_config's / 0.10's one value
    estimate_graphs: bool = True  # Ĝ inside the budget (0.20+, unless the env var says 0)
    cpu_offload_gib: float = 0.0
    speculative: dict[str, Any] | None = None  # --speculative-config
    role: str | None = None  # prefill / decode / prefill+decode from --kv-transfer-config's kv_role
    kv_connector: str | None = None  # --kv-transfer-config's kv_connector
    kv_buffer_gib: float = 0.0  # GPU memory the connector holds outside the KV cache (P2pNcclConnector)
    quick_reduce_gib: float = 0.0  # ROCm's quick all-reduce buffer the environment turns on (non_torch_term)
    quantization: str | None = None  # --quantization (online FP8 over an unquantized checkpoint: online_fp8_bytes)
    v0: bool = False  # the V0 engine (VLLM_USE_V1=0, or a release before V1 became the default): v0_batched_tokens
    chunked_prefill: bool | None = None  # --enable-chunked-prefill as given (None: the engine's default)

    @property
    def ep(self) -> int:
        return self.tp * self.dp if self.expert_parallel else 1


@dataclass(frozen=True)
class Term:
    gib: float
    spread: float = 0.0  # ± GiB: the band this estimate is known to within
    spread_high: float | None = None  # how much lower it may be, when not `spread` (a pool is never below 0)

    @property
    def lower(self) -> float:
        """How much lower than the point the term may be (the KV band's high end)."""
        return min(self.spread if self.spread_high is None else self.spread_high, self.gib)


def requested_gib(util: float, total_gib: float) -> float:
    """vllm/utils/mem_utils.py `request_memory`: ⌈u·T⌉ bytes — exact."""
    return math.ceil(util * total_gib * GIB) / GIB


# MXFP4 experts below Hopper go through the Marlin FP4 kernels, which repack them larger: gpt-oss-120b
# TP4 on A100s loads 17.22 GiB per rank where the checkpoint splits to 15.21 (+13 %).
MXFP4_REPACK_SHARE = 0.15


def weights_term(w_gib: float, estimated: bool, platform: Platform, quant_method: str = "none") -> Term:
    """`Model loading took X GiB` / the profiling line's `weights memory`: the checkpoint split by
    the plan's sharding rules. Residuals: within 0.03 GiB on the H100 launches from config.json
    alone but the Gemma 3 vision checkpoints (−0.3 … −0.6); 2 GiB more where a kernel repacks
    (gpt-oss MXFP4 through Marlin on an A100) — hence 2 % from config.json (+ 0.6 GiB for a vision
    tower estimated as a plain ViT), 1 % from read headers, 3 % on ROCm, and MXFP4's repack below
    Hopper."""
    share = 0.03 if platform.rocm else 0.02 if estimated else 0.01
    if quant_method == "mxfp4" and not platform.sm90_plus:
        share += MXFP4_REPACK_SHARE
    return Term(w_gib, share * w_gib + 0.05)


# Online FP8: `--quantization fp8` over a checkpoint that is not FP8 (vLLM before 0.32: fp8.py
# `Fp8LinearMethod` with is_checkpoint_fp8_serialized False quantizes each weight after loading;
# 0.32 names it `fp8_per_tensor` / `fp8_per_block`, quantization/online/fp8.py) stores every
# LinearBase weight and the RoutedExperts' w13/w2 in float8 — 1 byte per element, per-tensor or
# per-block scales negligible. Embeddings and the LM head are not LinearBase and stay in the load
# dtype, as do norms and routers. Llama-3.1-8B: 8.46 GiB planned, 8.49 loaded (llm-d-planner's qfp8 log).
ONLINE_FP8 = ("fp8", "fp8_per_tensor", "fp8_per_block")
ONLINE_FP8_CATEGORIES = ("attn", "kv_proj", "mlp", "expert")


def online_fp8_bytes(by_category: dict[str, float], load_bytes: int, s: Settings, checkpoint_quant: str) -> float:
    """Bytes per rank the online FP8 quantization saves (0 when the launch does not ask for it or the
    checkpoint is already quantized — then vLLM reads the stored format, no online pass)."""
    if (s.quantization or "").lower() not in ONLINE_FP8 or checkpoint_quant != "none" or load_bytes <= 1:
        return 0.0
    linear = sum(by_category.get(c, 0.0) for c in ONLINE_FP8_CATEGORIES)
    return linear * (1 - 1 / load_bytes)


# Bytes per sampler row per vocabulary entry at the profile run's peak: the logits in the model's
# dtype (2), their fp32 copy (4) and the top-k/top-p sort's fp32 values and indices over them
# (`_dummy_sampler_run` → `Sampler` → `topk_topp_sampler`), less what is freed between. Measured
# 14.8–15.6 B on the eight logs whose peak is the sampler's (Gemma, Llama-3, Qwen2.5).
SAMPLER_BYTES_PER_ROW_VOCAB = 15.0
# The dummy forward's peak per batched token: hidden states (4 × hidden: residual, normed, two
# live), the MLP's gate/up output and its activation (2 × intermediate, + 1 ×) per TP rank, q/k/v
# per rank; bf16. Fits CodeLlama-7B's 0.77 GiB at 8,192 tokens (its sampler needs 0.46).
FORWARD_HIDDEN_COPIES = 4


def activation_term(cfg: ModelConfig, s: Settings, seqs: int, batched: int, dtype_bytes: int = 2) -> Term:
    """The profile run's torch peak (vllm/v1/worker/gpu_model_runner.py `profile_run`: a dummy
    forward of `max_num_batched_tokens`, then `_dummy_sampler_run` over `max_num_seqs` rows).
    The two happen one after the other, so the peak is the larger of them, not their sum; the
    fused-MoE kernels keep their workspace (two buffers of tokens × top-k × 2·moe_intermediate per
    rank) across both. The sampler's logits are gathered over the whole vocabulary on every rank
    (not split by TP); a pipeline stage without the head has no sampler.

    Under the sampler the dummy forward's output is still held: `profile_run` keeps `hidden_states`
    (max_num_batched_tokens × hidden in the model's dtype) until after `_dummy_sampler_run` and
    deletes it then (vllm/v1/worker/gpu_model_runner.py, 0.19 – 0.32) — 0.125 GiB at hidden 8192,
    what the 72B logs' 2.29 GiB holds over the 7B's 2.21 at the same vocabulary. The logits come
    out of the LM head in the model's dtype: 2 B of the per-entry bytes at bf16, 4 at float32."""
    tp = max(1, s.tp)
    inter = max(cfg.intermediate_size, cfg.experts_per_token * cfg.moe_intermediate_size) / tp
    qkv = (cfg.num_attention_heads + 2 * cfg.num_kv_heads) * cfg.head_dim / tp
    forward = batched * 2.0 * (FORWARD_HIDDEN_COPIES * cfg.hidden_size + 2 * inter + qkv)
    logits_extra = max(0, dtype_bytes - 2)  # SAMPLER_BYTES_PER_ROW_VOCAB counts 16-bit logits
    sampler = seqs * cfg.vocab_size * (SAMPLER_BYTES_PER_ROW_VOCAB + logits_extra) + batched * cfg.hidden_size * dtype_bytes
    moe = 0.0
    if cfg.experts:
        moe = 2 * batched * cfg.experts_per_token * 2 * cfg.moe_intermediate_size / tp * 2.0
    peak = (max(forward, sampler) + moe) / GIB
    # residuals on 26 H100 launches: −0.30 … +0.12 GiB (the MoE workspace the loosest)
    spread = 0.12 * peak + (0.3 if cfg.experts else 0.1)
    if s.v0:
        # V0's profile_run (worker/model_runner.py) builds max_num_seqs dummy sequences over the batch
        # and runs its own sampler: a forward the V1-fitted copies above do not follow — the MI300X V0
        # logs (131,072 tokens) hold 14.63 GiB where the term reads 12.50 (+17 %)
        spread += V0_ACTIVATION_SHARE * peak
    return Term(peak, spread)


# The V0 engine's profile batch (vllm/engine/arg_utils.py `_set_default_args_v0`, vllm/config.py
# `SchedulerConfig.__post_init__`, 0.8 – 0.10): chunked prefill stays off unless the operator turns it
# on, or the context is over 32K on a CUDA platform (`current_platform.is_cuda()`: not ROCm) for a
# model without sliding window, MLA or vision, with no draft; then the profile runs 2048 tokens.
# Off, `max_num_batched_tokens = max(max_model_len, 2048)`: one batch of the whole context — the
# MI300X V0 logs of Llama-3.1-8B at 131,072 tokens profile 14.63 GiB of activation. Before 0.8 the
# same test read `device_config.device_type == "cuda"`, which ROCm also answers, so there a ROCm card
# chunks a long context too.
V0_DEFAULT_BATCHED_TOKENS = 2048
V0_LONG_CONTEXT = 32768
V0_ACTIVATION_SHARE = 0.1  # the activation band's extra width under V0 (activation_term)
V0_ROCM_UNCHUNKED_SINCE = "0.8.0"


def v0_batched_tokens(cfg: ModelConfig, s: Settings, max_model_len: int, rocm: bool) -> int:
    """The V0 profile run's token count when `--max-num-batched-tokens` is unset (see above)."""
    chunked = s.chunked_prefill
    if chunked is None:
        plain = not (cfg.has_vision or cfg.attention == "mla" or cfg.swa_layers or cfg.sliding_window or s.speculative)
        cuda = not rocm or version_key(s.version) < version_key(V0_ROCM_UNCHUNKED_SINCE)
        chunked = max_model_len > V0_LONG_CONTEXT and cuda and plain
    return V0_DEFAULT_BATCHED_TOKENS if chunked else max(max_model_len, V0_DEFAULT_BATCHED_TOKENS)


# Non-torch memory the profile sees grow after its start snapshot (`memory_profiling`:
# "non-torch forward increase memory"): cuBLAS/cuBLASLt workspaces on one GPU, and with TP/PP > 1
# with TP > 1 the communicators' buffers that are allocated lazily (NCCL channels, NVLS and symmetric-memory
# all-reduce on Hopper/Blackwell — vllm/distributed/device_communicators/symm_mem.py,
# pynccl_allocator.py). Logged: 0.24–0.26 GiB on one H100 (0.19), 0.46 for Granite; the TP2/TP4
# H100 launches of vLLM 0.19 leave ~1.8 GiB more per rank than one GPU does; A100 TP2 (0.10) 0.1.
NON_TORCH_ONE_GPU = {"0.19.0": 0.25}
NON_TORCH_ONE_GPU_BEFORE = 0.16
NON_TORCH_MULTI_SM90 = 2.0
NON_TORCH_MULTI_OTHER = 0.26
# ROCm with TP > 1: what grows after the start snapshot is RCCL's lazily set-up channels and
# workspaces; vLLM's custom all-reduce buffers (custom_all_reduce.py, a few MiB) and ROCm's quick
# all-reduce (when VLLM_ROCM_QUICK_REDUCE_QUANTIZATION turns it on: twice its largest problem per rank,
# 4 GiB at the default 2048 MB) are allocated at distributed init, which gpu_worker.init_device runs
# BEFORE the snapshot ("This ensures NCCL buffers are allocated before we measure available memory"):
# they are not this term, they come out of the free memory at start (plan.pre_snapshot, with
# Settings.quick_reduce_gib). No ROCm launch in the project's data prints the profiling line, so the
# point is an estimate (0.5) with a wide band.
NON_TORCH_MULTI_ROCM = 0.5


def non_torch_term(s: Settings, platform: Platform) -> Term:
    """Non-torch memory by TP/PP size and platform (see the constants above)."""
    since = version_key(s.version) >= version_key("0.19.0")
    one = NON_TORCH_ONE_GPU["0.19.0"] if since else NON_TORCH_ONE_GPU_BEFORE
    if s.tp <= 1:
        # pipeline stages exchange activations point to point: no all-reduce buffers (the sweep's
        # PP2/PP4 logs: 0.07 GiB)
        return Term(one, 0.25)
    if platform.sm90_plus and since:
        return Term(NON_TORCH_MULTI_SM90, 0.6)
    if not platform.known and since:
        # unnamed card: between an A100's and an H100's, the band spans both
        return Term((NON_TORCH_MULTI_SM90 + NON_TORCH_MULTI_OTHER) / 2, 1.0)
    if platform.rocm:
        return Term(NON_TORCH_MULTI_ROCM, 0.6)
    return Term(NON_TORCH_MULTI_OTHER, 0.3)


# ---- CUDA graphs ------------------------------------------------------------------------------
# The capture sizes vLLM picks when the operator names none (vllm/config/vllm.py
# `VllmConfig._set_cudagraph_sizes`): the largest is --max-cudagraph-capture-size, else
# min(max_num_seqs × decode query length × 2, 512) (the query length is 1 + the speculative tokens),
# never above --max-num-batched-tokens; the list is 1, 2, 4, then every 8 below 256 and every 16 from
# 256 to the largest (51 sizes at 512). Before 0.11.1 (`--cuda-graph-sizes`) the list was every 8 up
# to the largest (67 at 512; SemiAnalysisAI/InferenceX#117 quotes 0.11.0's "from 67 to 81").
DEFAULT_CAPTURE_MAX = 512
CAPTURE_STEP16_SINCE = "0.11.1"
# cudagraph_mode's default (vllm/config/compilation.py; -O2, the default level, sets it too) is
# FULL_AND_PIECEWISE from 0.11.0 (vllm-project/vllm#25444), PIECEWISE before; -O1 is PIECEWISE, -O0 NONE.
FULL_AND_PIECEWISE_SINCE = "0.11.0"
CG_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")

# vLLM's V1 estimate (gpu_model_runner.py `profile_cudagraph_memory`) captures the two largest sizes
# of each mode into a throw-away pool: the first capture's growth, then the second's as the cost of
# every further graph; estimate = the larger first capture + Σ modes per-graph × (graphs − 1). The
# plan writes each of those from the model's shape, fitted to the DEBUG lines of the 26 sweep launches
# (tests/data/real/plan/vllm-graphs.yaml: all at 51 + 51 graphs, largest 512):
# - a FULL graph's first capture is the attention backend's split-KV accumulator at the largest
#   decode size: 130 B per query element (heads × head_dim / TP) per token (Llama-8B 260 MiB at TP1,
#   132 at TP2, 70 at TP4; Qwen2.5-7B 228; Phi-4 328), MLA's latent per head in place of head_dim;
# - a PIECEWISE graph's first capture is the largest batch's MLP activations, 8 B per intermediate
#   element per rank per token, over an 80 MiB base (Llama-8B 138 MiB; Mistral-Small 212; granite-2b 100);
# - every further graph, in each mode, 1 MiB + 0.15 MiB per layer on the rank's stage (piece graphs
#   and their kept outputs: Llama-8B 6 + 6 MiB, 70B TP2 12 + 20, PP4's 8 layers 4 + 1).
FULL_FIRST_BYTES_PER_Q_TOKEN = 130.0
PIECEWISE_FIRST_BASE_MIB = 80.0
PIECEWISE_FIRST_BYTES_PER_INTER_TOKEN = 8.0
PER_GRAPH_BASE_MIB = 1.0
PER_GRAPH_PER_LAYER_MIB = 0.15
# The calibrated range: the sweep's graphs (51 + 51 at largest 512; gpt-oss's 83 + 83 at 1024 in the
# sweep's other logs). Above it the band's low end widens: many graphs multiply the per-graph cost's
# ±50 %, and a larger first capture is extrapolated. Below it (few, small graphs) the term is small in
# GiB and its absolute band stays as fitted.
CALIBRATED_GRAPHS = (35, 83)
CALIBRATED_LARGEST = (256, 1024)


@dataclass(frozen=True)
class Capture:
    """The CUDA graphs a launch captures: FULL graphs (decode batches, or every size in FULL mode)
    and PIECEWISE graphs (every size), and the largest size of each."""

    mode: str
    sizes: tuple[int, ...]
    full: int = 0
    piecewise: int = 0
    largest_full: int = 0
    largest_piecewise: int = 0

    @property
    def graphs(self) -> int:
        return self.full + self.piecewise


def default_capture_sizes(largest: int, version: str) -> tuple[int, ...]:
    """vLLM's own list up to `largest` (`_set_cudagraph_sizes`)."""
    sizes = [i for i in (1, 2, 4) if i <= largest]
    if version_key(version) >= version_key(CAPTURE_STEP16_SINCE):
        sizes += range(8, min(largest + 1, 256), 8)
        if largest >= 256:
            sizes += range(256, largest + 1, 16)
    else:
        sizes += range(8, largest + 1, 8)
    return tuple(sizes)


def capture_plan(s: Settings, seqs: int, batched: int) -> Capture:
    """The graphs vLLM captures for these flags (`_set_cudagraph_sizes`; the FULL decode graphs are
    the sizes between the decode query length and max_num_seqs × it, gpu_model_runner `capture_model`)."""
    mode = (s.cudagraph_mode or "").upper()
    if not mode:
        level = s.optimization_level
        mode = ("NONE" if level == 0 else "PIECEWISE" if level == 1 else
                "FULL_AND_PIECEWISE" if version_key(s.version) >= version_key(FULL_AND_PIECEWISE_SINCE) else "PIECEWISE")
    if not s.graphs or mode == "NONE":
        return Capture("NONE", ())
    q = 1 + int((s.speculative or {}).get("num_speculative_tokens") or 0)
    if s.capture_sizes:
        sizes = tuple(sorted({int(x) for x in s.capture_sizes if 0 < int(x) <= batched}))
    else:
        largest = s.max_capture_size or min(seqs * q * 2, DEFAULT_CAPTURE_MAX)
        sizes = default_capture_sizes(min(int(largest), batched), s.version)
    if not sizes:
        return Capture(mode, ())
    decode = tuple(x for x in sizes if q <= x <= seqs * q)
    if mode == "FULL":
        return Capture(mode, sizes, full=len(sizes), largest_full=sizes[-1])
    if mode == "FULL_DECODE_ONLY":
        return Capture(mode, sizes, full=len(decode), largest_full=decode[-1] if decode else 0)
    if mode == "PIECEWISE":
        return Capture(mode, sizes, piecewise=len(sizes), largest_piecewise=sizes[-1])
    return Capture(mode, sizes, full=len(decode), piecewise=len(sizes), largest_full=decode[-1] if decode else 0,
                   largest_piecewise=sizes[-1])


def graph_term(cfg: ModelConfig, s: Settings, seqs: int = 256, batched: int = 2048) -> Term:
    """vLLM's graph estimate Ĝ (`profile_cudagraph_memory`, inside the KV budget from 0.20 or with
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), also taken for the captured pool G
    (`capture_model`; the sweep's pools lie 0.45–1.3 × the estimate): the larger first capture + the
    per-graph cost × every further graph (constants above). None with --enforce-eager, -O0 or
    cudagraph_mode NONE."""
    cap = capture_plan(s, seqs, batched)
    if not cap.graphs:
        return Term(0.0)
    tp = max(1, s.tp)
    mib = 2.0**20
    if cfg.attention == "mla":
        q = cfg.num_attention_heads * ((cfg.kv_lora_rank or 0) + (cfg.qk_rope_head_dim or 0)) / tp
    else:
        q = cfg.num_attention_heads * cfg.head_dim / tp
    inter = max(cfg.intermediate_size, cfg.experts_per_token * cfg.moe_intermediate_size) / tp
    first_full = FULL_FIRST_BYTES_PER_Q_TOKEN * q * cap.largest_full / mib if cap.full else 0.0
    first_pw = (PIECEWISE_FIRST_BASE_MIB + PIECEWISE_FIRST_BYTES_PER_INTER_TOKEN * inter * cap.largest_piecewise / mib
                if cap.piecewise else 0.0)
    per_graph = PER_GRAPH_BASE_MIB + PER_GRAPH_PER_LAYER_MIB * math.ceil(cfg.layers / max(1, s.pp))
    g = (max(first_full, first_pw) + per_graph * (max(0, cap.full - 1) + max(0, cap.piecewise - 1))) / 1024
    # residuals on the 26 sweep launches (bench/plan_graphs.py): −1.00 … +0.21 GiB against vLLM's own
    # estimate (Llama-8B TP2 and granite-2b, whose second piecewise capture cost 26 MiB; their pools
    # were 0.8–0.9 GiB smaller than that estimate), −0.52 … +0.12 against the captured pool: ±(30 % + 0.1 GiB).
    # Beyond the fitted range (more graphs or a larger largest size) the term may be higher by twice
    # that; it never shrinks the other way by more than inside it, so the band keeps its direction.
    above = (max(cap.full, cap.piecewise) > CALIBRATED_GRAPHS[1]
             or max(cap.largest_full, cap.largest_piecewise) > CALIBRATED_LARGEST[1])
    return Term(g, (0.6 if above else 0.3) * g + 0.1, 0.3 * g + 0.1)


@dataclass(frozen=True)
class KvLayout:
    """The KV cache as vLLM lays it out (vllm/v1/core/kv_cache_utils.py
    `_get_kv_cache_groups_uniform_page_size`): layers bucketed by their attention spec (full,
    sliding window), every bucket padded to a multiple of one group size, one tensor per group slot.
    `get_num_blocks` divides the memory by (page bytes × group size); `_report_kv_cache_config`
    prints ⌊blocks / groups⌋ × block tokens."""

    layer_bytes: float  # bytes per token of one layer (per rank)
    group_size: int
    groups: int
    padding: int

    @property
    def slots(self) -> int:
        return self.group_size * self.groups

    def tokens(self, kv_gib: float, block: int) -> int:
        if kv_gib <= 0 or self.layer_bytes <= 0:
            return 0
        blocks = int(kv_gib * GIB // (self.layer_bytes * block * self.group_size))
        return blocks // self.groups * block


def kv_layout(cfg: ModelConfig, layers: int, layer_bytes: float) -> KvLayout:
    """Buckets of full and sliding-window layers on this rank (`layers` = the stage's); the group
    size is the smallest bucket, or the largest when it is under 1.5 × the smallest (gpt-oss:
    equal buckets; Gemma 3: 5 sliding : 1 full, so 52 sliding layers pad to 60 at group size 10)."""
    swa = round(cfg.swa_layers * layers / max(1, cfg.layers))
    buckets = [n for n in (layers - swa, swa) if n > 0]
    gs = min(buckets)
    if max(buckets) < 1.5 * gs:
        gs = max(buckets)
    groups = sum(math.ceil(n / gs) for n in buckets)
    return KvLayout(layer_bytes, gs, groups, groups * gs - layers)
