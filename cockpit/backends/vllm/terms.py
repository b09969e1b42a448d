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
    estimate_graphs: bool = True  # Ĝ inside the budget (0.20+, unless the env var says 0)
    cpu_offload_gib: float = 0.0
    speculative: dict[str, Any] | None = None  # --speculative-config
    role: str | None = None  # prefill / decode / prefill+decode from --kv-transfer-config's kv_role
    kv_connector: str | None = None  # --kv-transfer-config's kv_connector
    kv_buffer_gib: float = 0.0  # GPU memory the connector holds outside the KV cache (P2pNcclConnector)

    @property
    def ep(self) -> int:
        return self.tp * self.dp if self.expert_parallel else 1


@dataclass(frozen=True)
class Term:
    gib: float
    spread: float = 0.0  # ± GiB: the band this estimate is known to within


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


# Bytes per sampler row per vocabulary entry at the profile run's peak: the logits in the model's
# dtype (2), their fp32 copy (4) and the top-k/top-p sort's fp32 values and indices over them
# (`_dummy_sampler_run` → `Sampler` → `topk_topp_sampler`), less what is freed between. Measured
# 14.8–15.6 B on the eight logs whose peak is the sampler's (Gemma, Llama-3, Qwen2.5).
SAMPLER_BYTES_PER_ROW_VOCAB = 15.0
# The dummy forward's peak per batched token: hidden states (4 × hidden: residual, normed, two
# live), the MLP's gate/up output and its activation (2 × intermediate, + 1 ×) per TP rank, q/k/v
# per rank; bf16. Fits CodeLlama-7B's 0.77 GiB at 8,192 tokens (its sampler needs 0.46).
FORWARD_HIDDEN_COPIES = 4


def activation_term(cfg: ModelConfig, s: Settings, seqs: int, batched: int) -> Term:
    """The profile run's torch peak (vllm/v1/worker/gpu_model_runner.py `profile_run`: a dummy
    forward of `max_num_batched_tokens`, then `_dummy_sampler_run` over `max_num_seqs` rows).
    The two happen one after the other, so the peak is the larger of them, not their sum; the
    fused-MoE kernels keep their workspace (two buffers of tokens × top-k × 2·moe_intermediate per
    rank) across both. The sampler's logits are gathered over the whole vocabulary on every rank
    (not split by TP); a pipeline stage without the head has no sampler."""
    tp = max(1, s.tp)
    inter = max(cfg.intermediate_size, cfg.experts_per_token * cfg.moe_intermediate_size) / tp
    qkv = (cfg.num_attention_heads + 2 * cfg.num_kv_heads) * cfg.head_dim / tp
    forward = batched * 2.0 * (FORWARD_HIDDEN_COPIES * cfg.hidden_size + 2 * inter + qkv)
    sampler = seqs * cfg.vocab_size * SAMPLER_BYTES_PER_ROW_VOCAB
    moe = 0.0
    if cfg.experts:
        moe = 2 * batched * cfg.experts_per_token * 2 * cfg.moe_intermediate_size / tp * 2.0
    peak = (max(forward, sampler) + moe) / GIB
    # residuals on 26 H100 launches: −0.30 … +0.12 GiB (the MoE workspace the loosest)
    return Term(peak, 0.12 * peak + (0.3 if cfg.experts else 0.1))


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
    return Term(NON_TORCH_MULTI_OTHER if not platform.rocm else 0.5, 0.6 if platform.rocm else 0.3)


# CUDA-graph pool: a base plus a per-layer term (the golden 64-layer TP2 pool is 0.86 GiB; the
# sweep's `Estimated CUDA graph memory` 0.52–1.60 GiB for 26–62 layers at 51 capture sizes).
GRAPH_BASE_GIB = 0.25
GRAPH_PER_LAYER_GIB = 0.01


def graph_term(cfg: ModelConfig, s: Settings) -> Term:
    """The captured pool (`gpu_model_runner.capture_model`) and, from 0.20 (or with
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), its estimate inside the KV budget
    (`profile_cudagraph_memory`). None with --enforce-eager or cudagraph_mode NONE."""
    if not s.graphs:
        return Term(0.0)
    g = GRAPH_BASE_GIB + GRAPH_PER_LAYER_GIB * math.ceil(cfg.layers / max(1, s.pp))
    return Term(g, 0.5 * g)


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
