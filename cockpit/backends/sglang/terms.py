"""SGLang's memory terms before launch that the plan estimates, one function per term, each with
the SGLang source it follows and the uncertainty it carries (GiB, the half-widths of its band).

SGLang's own arithmetic fixes the rest exactly (`model_runner_kv_cache_mixin.profile_max_num_token`:
KV = A − P·(1 − mfs), A = P − W; `get_cell_size_per_token`), so the band of the KV pool is the
band of P and W carried through it: KV = P·mfs − W, so ΔKV = mfs·ΔP + ΔW.

The widths come from the residuals on the real start-up logs (docs/PLAN.md, "Residuals per term").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cockpit.backends.sglang.flags import resolve_version, version_key

if TYPE_CHECKING:
    from cockpit.model.plan import GpuFacts
    from cockpit.model.platform import Platform

# Free memory the process itself takes before `Load weight begin` (estimates; a journal run
# replaces them): the CUDA context and torch, then the distributed group when ranks > 1. Of that
# group SGLang's own buffers are small on CUDA — the custom all-reduce's buffer and rank data, 8 MiB
# each (distributed/device_communicators/custom_all_reduce.py `_MAX_CAR_SIZE`; peers' buffers are
# IPC-mapped, not allocated here) — so the GiB the logs show at TP8 (H100 0.81, H200 ~3.1) are NCCL's
# own channels and NVLS buffers, which no SGLang source sizes: the point and band come from the logs.
CUDA_CONTEXT_GIB = 0.5
DIST_INIT_GIB = 0.5
DIST_INIT_PER_RANK_GIB = 0.05


@dataclass(frozen=True)
class Spread:
    """A term with a band that need not be symmetric (memory another process holds only lowers P)."""

    gib: float
    low: float = 0.0  # how much lower it may be
    high: float = 0.0  # how much higher


# ROCm (MI300X, MI325X, MI350X/MI355X), what SGLang itself allocates before `Load weight begin`
# (parallel_state `GroupCoordinator`): the custom all-reduce's buffer and its rank data, 16 MiB each
# on HIP where CUDA takes 8 (custom_all_reduce.py `_MAX_CAR_SIZE`, "crossover is at 16MB buffer size
# for ROCm"), and the quick all-reduce's buffer only when the operator turns it on
# (cockpit.model.platform.quick_reduce_gib: 4 GiB per rank at its default). The HIP context and
# RCCL's own channels are not stated by any source read here; the one ROCm log with the figures
# (Kimi-K2.5 TP8 on MI355X, SGLang 0.5.8: 288 GiB card, P 283.53) holds 4.47 GiB before the weights
# where the CUDA estimate takes 1.4 (residual +3.07 GiB, recorded, not fitted): the point stays the
# CUDA estimate plus the buffers the source names, and the band's low end reaches that log.
ROCM_CUSTOM_AR_GIB = 2 * 16 / 1024
ROCM_LOW_BASE_GIB = 1.0
ROCM_LOW_PER_RANK_GIB = 0.3
ROCM_HIGH_PER_RANK_GIB = 0.15


def pre_load_term(gpu: GpuFacts, world: int, platform: Platform, quick_reduce_gib: float = 0.0) -> Spread:
    """P: the free memory the ranks see at `Load weight begin` (`ModelRunner.init_torch_distributed`
    then `get_available_gpu_memory`, the least over ranks): the card's free memory less the CUDA /
    HIP context and the distributed group's buffers. Residuals (plan − log): H100 TP8 +0.59,
    L4 TP4 +0.34, H200 TP8 −1.7, 2×8 H100 TP16 −0.37; one
    GPU within 0.1. A desktop card (Windows, WSL2) held 0.7–1.1 GiB before the server started.
    ROCm: the buffers above, and a band whose low end covers the MI355X log (+3.07 GiB at the point).
    `quick_reduce_gib`: ROCm's quick all-reduce buffer when the launch's environment turns it on."""
    base = gpu.free_gib if gpu.free_gib is not None else gpu.total_gib
    dist = DIST_INIT_GIB + DIST_INIT_PER_RANK_GIB * world if world > 1 else 0.0
    if platform.rocm and world > 1:
        dist += ROCM_CUSTOM_AR_GIB + quick_reduce_gib
    p = base - CUDA_CONTEXT_GIB - dist
    if world <= 1:
        low = high = 0.4
    elif platform.rocm:
        low = ROCM_LOW_BASE_GIB + ROCM_LOW_PER_RANK_GIB * world
        high = ROCM_LOW_BASE_GIB + ROCM_HIGH_PER_RANK_GIB * world
    else:  # NVLS / custom all-reduce buffers on Hopper and newer, an unnamed card may be one
        low = 0.4 + (0.15 if platform.sm90_plus or not platform.known else 0.05) * world
        high = 0.7 if world <= 8 else 0.7 + 0.02 * world
    if platform.desktop:
        low += 1.1
    measured = gpu.free_gib is not None
    if measured:  # the agent read the free memory: only the context and the group are estimated
        low, high = low * 0.6, high * 0.6
    return Spread(p, low, high)


def weights_term(w_gib: float, estimated: bool, platform: Platform) -> Spread:
    """W: `Load weight end … mem usage`: the checkpoint split the way SGLang shards it. Residuals:
    from safetensors headers within 1.5 % (DeepSeek-R1 TP16 +1.1 %); from config.json alone within
    0.03 GiB on the vLLM launches; the MI355X Kimi-K2.5 log loads 2.4 % more than the checkpoint."""
    share = 0.03 if platform.rocm else 0.025 if estimated else 0.015
    return Spread(w_gib, share * w_gib + 0.05, share * w_gib + 0.05)


def kv_band(mfs: float, p: Spread, w: Spread) -> tuple[float, float]:
    """(how much less, how much more) KV the pool may get than its point: KV = P·mfs − W."""
    return mfs * p.low + w.high, mfs * p.high + w.low


# ---- CUDA graphs ------------------------------------------------------------------------------
# Where SGLang's graphs sit in its budget: the KV pool is P·mfs − W whatever is captured
# (`profile_max_num_token` never looks at the graphs), and the graphs are captured afterwards
# (`ModelRunner.init_device_graphs`) out of what mfs left, P·(1 − mfs). So the capture sizes move
# the pool only through SGLang's automatic mfs (server_args `_handle_gpu_memory_settings` reserves
# 2 MiB per unit of the largest batch size: memory.default_mfs), and otherwise the term is the
# check that the reserve covers the graphs: the headroom after capture, and a note when the
# graphs' high end does not fit (a capture OOM: "Capture cuda graph failed").
#
# The decode capture list (server_args `_generate_cuda_graph_batch_sizes` in 0.5.9,
# arg_groups/cuda_graph_hook `generate_decode_cuda_graph_batch_sizes` in 0.5.23): 1, 2, 4, 8, 12,
# every 8 from 16 to 256, every 16 from 272 below 512, every 32 from 512 — with speculative
# decoding 1…8, every 2 from 10 to 32, every 4 from 40 to 64, every 8 from 72 to 256, every 16
# from 272 — cut at the largest size; 0.5.23 appends the largest when the list misses it.
# `--cuda-graph-bs` (`--cuda-graph-bs-decode`) replaces the list and its largest becomes the
# max bs; cuda_graph_runner `get_batch_sizes_to_capture` then drops sizes above the request
# table's rows and adds the row count itself.
CAPTURE_APPENDS_MAX_SINCE = "0.5.23"
# What a capture costs, from the code that allocates it:
# - the float32 logits every graph writes into, one buffer of max_bs × tokens per request × vocab
#   (0.5.9 input_buffers.GraphInputBuffers `next_token_logits_buffer`; 0.5.23 GraphSharedOutput);
# - the attention backend's graph state, a token-index table of max_bs × tokens per request ×
#   context int32 (`init_cuda_graph_state`: flashinfer's `cuda_graph_kv_indices`, FA3's page table);
# - then each graph's own cost in the shared graph pool (captured largest first so the smaller reuse
#   its activations): what is left per graph per layer once the two buffers are taken out of the
#   logs' `Capture cuda graph end … mem usage`, fitted — Llama-3.1-8B on a 4090 (4 graphs, 32 layers)
#   0.82 MiB, QwQ-32B TP4 on L4s (13, 64) 1.04, DeepSeek-R1 TP16 decode (20, 61) 0.58.
GRAPH_LOGITS_BYTES = 4
GRAPH_INDEX_BYTES = 4
GRAPH_MIB_PER_GRAPH_LAYER = 0.8
GRAPH_MIB_PER_GRAPH_LAYER_SPREAD = 0.25  # ± MiB: the three logs lie within 0.58 … 1.04
# The fitted range (graphs per capture, largest batch size). Beyond it (SGLang's default at 512
# captures 52 graphs: none of the three logs did) the band widens both ways: toward less, because
# the two many-graph figures the project has are lower per graph (sgl-project/sglang#7873: Llama-3-8B
# TP2 on an H200, 36 graphs, "cuda graph 0.6 GB" — 0.42 MiB per graph per layer once the two buffers
# are out; the reference's Llama-3.1-70B TP8 at 512, 1.7 GiB — 0.30), and toward more, twice the fitted
# spread (the story's Kimi-K2.5 golden, 36 graphs of an MoE model, is written at 1.56).
GRAPH_CALIBRATED = (20, 160)
GRAPH_BEYOND_LOW_SHARE = 0.65  # the per-graph part may be this much lower beyond the fitted range
# 0.5.23's prefill graphs (breakable, by token count): not re-derived here, an estimate.
PREFILL_GRAPH_GIB = 0.5
PREFILL_GRAPH_SPREAD = 0.3


def decode_capture_sizes(max_bs: int, version: str, speculative: bool = False, given: tuple[int, ...] | None = None,
                         table_rows: int | None = None) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures (see the comment above for the engine's rules)."""
    if given:
        sizes = sorted({int(b) for b in given if int(b) > 0})
    else:
        if speculative:
            base = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
        else:
            base = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
        sizes = [b for b in base if b <= max_bs]
        if version_key(resolve_version(version)) >= version_key(CAPTURE_APPENDS_MAX_SINCE) and max_bs not in sizes:
            sizes.append(max_bs)
    if table_rows is not None and sizes and max(sizes) > table_rows:
        sizes = [b for b in sizes if b <= table_rows] + [table_rows]
    return tuple(sorted(set(b for b in sizes if b > 0)))


def graph_term(sizes: tuple[int, ...], *, vocab: int, context: int, layers: int, tokens_per_req: int = 1,
               prefill: bool = False) -> Spread:
    """Graph memory (`Capture … end … mem usage`, summed over the captures) for these decode sizes:
    the logits buffer and the attention index table at the largest size, exact from the code, and
    the fitted per-graph cost × graphs × the rank's layers. No sizes: no decode graphs."""
    mib = 2.0**20
    g = low = high = 0.0
    if sizes:
        rows = max(sizes) * max(1, tokens_per_req)
        fixed = rows * (vocab * GRAPH_LOGITS_BYTES + context * GRAPH_INDEX_BYTES) / mib
        n = len(sizes) * max(1, layers)
        g = (fixed + GRAPH_MIB_PER_GRAPH_LAYER * n) / 1024
        spread = GRAPH_MIB_PER_GRAPH_LAYER_SPREAD * n / 1024
        beyond = len(sizes) > GRAPH_CALIBRATED[0] or max(sizes) > GRAPH_CALIBRATED[1]
        per_graph = GRAPH_MIB_PER_GRAPH_LAYER * n / 1024
        low = (max(spread, GRAPH_BEYOND_LOW_SHARE * per_graph) if beyond else spread) + 0.1 * fixed / 1024 + 0.05
        high = (2 if beyond else 1) * spread + 0.1 * fixed / 1024 + 0.05
    if prefill:
        g += PREFILL_GRAPH_GIB
        low += PREFILL_GRAPH_SPREAD
        high += PREFILL_GRAPH_SPREAD
    return Spread(g, min(low, g), high)


# ---- multimodal models --------------------------------------------------------------------------
# SGLang holds back part of --mem-fraction-static for a multimodal model's image work, three ways
# over its releases:
# - until 0.4.5 ModelRunner multiplies the fraction by 0.95 whenever the model is multimodal, set by
#   the operator or not (model_executor/model_runner.py: `if self.is_multimodal:
#   self.mem_fraction_static *= 0.95`); a Gemma-3-4B log of 2025-03-27 (sglang#4826, 0.4.4, H200)
#   sizes its pool at exactly 0.88 × 0.95;
# - 0.4.5 – 0.4.6 the same with 0.90 (sglang PR #6881's description: "multiplied with a fixed factor
#   F(0.9) for multimodal models");
# - from 0.4.7 (PR #6881) server_args.adjust_mem_fraction_for_vlm, only when the operator left the
#   flag unset: × 0.95 × clamp(1 − 0.1 · (L·H² / (24·1024²) − 1), 0.8, 1.05) over the vision tower's
#   layers L and width H (getattr defaults 24 and 1024; no vision_config: no change). The MI355X
#   Kimi-K2.5 log (0.5.8, MoonViT 27 × 1152) prints 0.8260405859375 = 0.908 × 0.95 × 0.95762.
VLM_FIXED_095_UNTIL = "0.4.5"
VLM_FIXED_090_UNTIL = "0.4.7"
VLM_BASE_FACTOR = 0.95
VLM_BASELINE_LAYERS, VLM_BASELINE_HIDDEN = 24, 1024


def vlm_factor(vision_layers: int | None, vision_hidden: int | None) -> float:
    """adjust_mem_fraction_for_vlm's factor for a vision tower of this depth and width."""
    layers = vision_layers or VLM_BASELINE_LAYERS
    hidden = vision_hidden or VLM_BASELINE_HIDDEN
    ratio = layers * hidden**2 / (VLM_BASELINE_LAYERS * VLM_BASELINE_HIDDEN**2)
    return VLM_BASE_FACTOR * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def vlm_mfs_factor(version: str, multimodal: bool, has_vision_config: bool, explicit: bool,
                   vision_layers: int | None = None, vision_hidden: int | None = None) -> float:
    """What SGLang multiplies --mem-fraction-static by for this model at this version (1.0: nothing).
    `explicit`: the operator set the flag (from 0.4.7 only the automatic value is lowered)."""
    if not multimodal:
        return 1.0
    v = version_key(version)
    if v < version_key(VLM_FIXED_095_UNTIL):
        return 0.95
    if v < version_key(VLM_FIXED_090_UNTIL):
        return 0.90
    if explicit or not has_vision_config:
        return 1.0
    return vlm_factor(vision_layers, vision_hidden)


# ---- sliding-window layers ----------------------------------------------------------------------
# SGLang's hybrid SWA pool (full-attention layers hold every token, sliding-window layers a share of
# them: model_runner `set_num_tokens_hybrid_swa`) came with sgl-project/sglang#7367 (July 2025; the
# first release carrying it taken as 0.4.10). Before it every layer caches the whole context. After
# it server_args turns it off for the Gemma 2 / Gemma 3 / Gemma 3n and Olmo 2 architectures ("Disable
# hybrid SWA memory for ... as it is not yet supported", 0.4.10 – 0.5.x); 0.5.23's arg_groups
# overrides keep it off only for Gemma 3n (and for Gemma on the aiter / fa3 backends or with a host
# cache, which the plan does not model).
HYBRID_SWA_SINCE = "0.4.10"
HYBRID_SWA_GEMMA_SINCE = "0.5.23"
_NO_HYBRID_SWA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma3nForCausalLM",
                  "Gemma3nForConditionalGeneration", "Olmo2ForCausalLM")
_NO_HYBRID_SWA_EVER = ("Gemma3nForCausalLM", "Gemma3nForConditionalGeneration")


def hybrid_swa_pool(version: str, architecture: str) -> bool:
    """Does SGLang at this version give this architecture's sliding-window layers a smaller pool?"""
    v = version_key(version)
    if v < version_key(HYBRID_SWA_SINCE) or architecture in _NO_HYBRID_SWA_EVER:
        return False
    return architecture not in _NO_HYBRID_SWA or v >= version_key(HYBRID_SWA_GEMMA_SINCE)
