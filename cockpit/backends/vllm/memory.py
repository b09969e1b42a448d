"""vLLM's GPU memory model (shared/reference/vllm.md §4), as plain arithmetic.

Notation, per GPU, GiB: T = the card's total memory, u = --gpu-memory-utilization, KV = the KV
cache, c = KV bytes per token per rank, G = the captured graph pool, Ĝ = vLLM's estimate of it.

- Budget = u·T: a fraction of the card's TOTAL memory, not of what was free (SGLang's mfs·P). So a
  change of Δu moves Δu·T GiB between the KV cache and free memory, one for one:
  Δu = ΔB / T (SGLang's rule divides by P, the free memory before load).
- KV tokens change by Δu·T·2³⁰ / c, rounded to whole blocks by vLLM.
- `--kv-cache-memory-bytes` pins KV instead (bytes per GPU, util ignored): the precise way to ask
  for "this KV and not a byte more".
- Start-up refuses u·T above the free memory at start (`… less than desired GPU memory
  utilization`), so u ≤ F₀/T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 2**30
# vLLM's own safety margin in the `--kv-cache-memory=` suggestions (150 MiB).
VLLM_KV_SUGGESTION_MARGIN_GIB = 150 / 1024
# An estimate this far from the captured pool (GiB, and share of the pool) is worth a finding.
GRAPH_ESTIMATE_OFF_GB = 0.5
GRAPH_ESTIMATE_OFF_SHARE = 0.25
UTIL_MAX = 1.0  # vLLM accepts (0, 1]


def floor2(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def ceil2(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


def util_delta(delta_gib: float, total_gib: float) -> float:
    """Δu for ΔB GiB per GPU: ΔB / T."""
    return delta_gib / total_gib


def cell_bytes(kv_gib: float | None, kv_tokens: int | None) -> float | None:
    """c from what the log says the KV cache weighs (GiB) and holds (tokens)."""
    if not kv_gib or not kv_tokens or kv_gib <= 0 or kv_tokens <= 0:
        return None
    return kv_gib * GIB / kv_tokens


def tokens_for(kv_gib: float, c: float) -> int:
    return max(0, math.floor(kv_gib * GIB / c)) if c > 0 else 0


@dataclass(frozen=True)
class UtilMove:
    """A worked --gpu-memory-utilization change and what it buys (GiB per GPU)."""

    util_old: float
    util_new: float
    total: float  # T
    moved_gb: float  # (old − new)·T: > 0 frees memory, < 0 gives the KV cache more
    headroom_before: float | None
    headroom_after: float | None
    kv_before: float | None
    kv_after: float | None
    tokens_before: int | None
    tokens_after: int | None

    @property
    def kv_bytes_after(self) -> int | None:
        """The same KV size pinned in bytes: the `--kv-cache-memory-bytes` alternative."""
        if self.kv_after is None or self.kv_after <= 0:
            return None
        return int(self.kv_after * GIB)

    def arithmetic(self) -> str:
        d = self.util_old - self.util_new
        parts = [f"Δu = {self.util_old:g} − {self.util_new:g} = {d:.2f}; Δu × T {self.total:.2f} GiB = {d * self.total:.2f} GiB per GPU"]
        if self.headroom_before is not None and self.headroom_after is not None:
            parts.append(f"free after start-up {self.headroom_before:.2f} + {self.moved_gb:.2f} = {self.headroom_after:.2f} GiB")
        if self.kv_before is not None and self.kv_after is not None:
            parts.append(f"KV cache {self.kv_before:.2f} → {self.kv_after:.2f} GiB")
        if self.tokens_before is not None and self.tokens_after is not None:
            parts.append(f"KV tokens {self.tokens_before:,} → {self.tokens_after:,}")
        return "; ".join(parts)


def _move(util: float, new: float, total: float, headroom: float | None, kv: float | None,
          tokens: int | None) -> UtilMove:
    moved = (util - new) * total
    c = cell_bytes(kv, tokens)
    kv_after = kv - moved if kv is not None else None
    tokens_after = tokens_for(kv_after, c) if (kv_after is not None and c) else None
    return UtilMove(util, new, total, moved, headroom, headroom + moved if headroom is not None else None,
                    kv, kv_after, tokens, tokens_after)


def lower_util_for(util: float, total: float, need_gb: float, *, headroom: float | None = None,
                   kv: float | None = None, tokens: int | None = None) -> UtilMove:
    """Lower u to free at least `need_gb` GiB per GPU: u − ΔB/T rounded DOWN (at least 0.01 lower)."""
    new = floor2(util - max(need_gb, 0.0) / total)
    if new >= util:
        new = floor2(util - 0.01)
    return _move(util, max(new, 0.01), total, headroom, kv, tokens)


def raise_util_for(util: float, total: float, need_gb: float, *, kv: float | None = None,
                   tokens: int | None = None, ceiling: float = UTIL_MAX) -> UtilMove:
    """Raise u to give the KV cache at least `need_gb` more GiB per GPU: u + ΔB/T rounded UP."""
    new = ceil2(util + max(need_gb, 0.0) / total)
    if new <= util:
        new = ceil2(util + 0.01)
    return _move(util, min(new, ceiling), total, None, kv, tokens)


def graph_estimate_off(estimate_gb: float, actual_gb: float) -> bool:
    """Is vLLM's CUDA-graph estimate far from the pool it then captured?"""
    gap = abs(actual_gb - estimate_gb)
    return gap >= GRAPH_ESTIMATE_OFF_GB and gap >= GRAPH_ESTIMATE_OFF_SHARE * max(actual_gb, estimate_gb)


def large_batch_card(gpu_total_gib: float, gpu_name: str | None = None) -> bool:
    """vLLM's API server takes its large batch defaults on cards of ≥ 70 GiB that are not A100s
    (vllm/engine/arg_utils.py `get_batch_defaults`: an A100 keeps the small ones, vLLM PR #17885).
    An unnamed card (a what-if size) is judged by its size alone."""
    return gpu_total_gib >= 70 and "a100" not in (gpu_name or "").lower()


def default_max_num_seqs(gpu_total_gib: float | None, gpu_name: str | None = None) -> int | None:
    """vLLM's serve default: 1024 on large-batch cards (H100 class and up), else 256; None if unknown."""
    if gpu_total_gib is None:
        return None
    return 1024 if large_batch_card(gpu_total_gib, gpu_name) else 256
