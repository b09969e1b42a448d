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

if TYPE_CHECKING:
    from cockpit.model.plan import GpuFacts
    from cockpit.model.platform import Platform

# Free memory the process itself takes before `Load weight begin` (estimates; a journal run
# replaces them): the CUDA context and torch, then NCCL / custom all-reduce buffers when ranks > 1.
CUDA_CONTEXT_GIB = 0.5
DIST_INIT_GIB = 0.5
DIST_INIT_PER_RANK_GIB = 0.05


@dataclass(frozen=True)
class Spread:
    """A term with a band that need not be symmetric (memory another process holds only lowers P)."""

    gib: float
    low: float = 0.0  # how much lower it may be
    high: float = 0.0  # how much higher


def pre_load_term(gpu: GpuFacts, world: int, platform: Platform) -> Spread:
    """P: the free memory the ranks see at `Load weight begin` (`ModelRunner.init_torch_distributed`
    then `get_available_gpu_memory`, the least over ranks): the card's free memory less the CUDA /
    HIP context and the distributed group's buffers. Residuals (plan − log): H100 TP8 +0.59,
    L4 TP4 +0.34, H200 TP8 −1.7 (2 GiB of custom all-reduce buffers), 2×8 H100 TP16 −0.37; one
    GPU within 0.1. A desktop card (Windows, WSL2) held 0.7–1.1 GiB before the server started.
    ROCm: the HIP context and RCCL are larger and less regular (the MI355X log's P is not printed),
    so its band is wider."""
    base = gpu.free_gib if gpu.free_gib is not None else gpu.total_gib
    dist = DIST_INIT_GIB + DIST_INIT_PER_RANK_GIB * world if world > 1 else 0.0
    p = base - CUDA_CONTEXT_GIB - dist
    if world <= 1:
        low = high = 0.4
    elif platform.rocm:
        low = high = 1.0 + 0.15 * world
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
