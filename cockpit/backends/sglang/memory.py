"""SGLang's GPU memory model (shared/reference/sglang.md §4, §9), as plain arithmetic.

Notation, per GPU, GiB: P = free memory before weights load (minimum over ranks), W = weights,
A = free after weights (minimum over ranks), mfs = --mem-fraction-static, c = KV cell size in bytes
per token per rank.

- KV pool = A − P·(1 − mfs) ≈ P·mfs − W; tokens = ⌊KV·2³⁰ / c⌋.
- δ·P rule: lowering mfs by δ moves δ·P GiB from the KV pool to free memory, one-for-one in the
  headroom after graph capture, and costs δ·P·2³⁰/c tokens. (δ × the card total overstates it.)
- Floor: mfs must stay above 1 − A/P or startup fails with "Not enough memory … increase".
- HiCache host pool is per rank, in decimal GB: ranks_per_node × size + reserve ≤ available.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cockpit.backends.sglang.flags import resolve_version, version_key

GIB = 2**30
GB = 10**9
# --mem-fraction-static lives in (0, 1). Advice stays within [MFS_LOWEST, MFS_HIGHEST]: below, the
# pool is nothing; above, nothing is left for activations. Past the floor 1 − A/P startup fails, so a
# lowering keeps FLOOR_MARGIN above it.
MFS_LOWEST = 0.05
MFS_HIGHEST = 0.99
FLOOR_MARGIN = 0.02
# SGLang keeps this much host RAM back before it sizes a HiCache host pool (both versions).
SGLANG_HICACHE_RESERVE_GIB = 10.0
SGLANG_HICACHE_RESERVE_GB = SGLANG_HICACHE_RESERVE_GIB * GIB / GB  # 10.74 decimal GB


def floor2(x: float) -> float:
    """Round DOWN to two decimals, immune to 0.88 being stored as 0.87999…"""
    return math.floor(x * 100 + 1e-9) / 100


def ceil2(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


# ---- KV pool ------------------------------------------------------------------------------------


def kv_pool_gib(pre_load_avail: float, after_weights_avail: float, mfs: float) -> float:
    """KV bytes (GiB) SGLang gives the pool: A − P·(1 − mfs)."""
    return after_weights_avail - pre_load_avail * (1.0 - mfs)


def kv_tokens(kv_gib: float, cell_bytes: float) -> int:
    """Tokens that fit in a KV pool of `kv_gib` GiB at `cell_bytes` bytes per token."""
    if kv_gib <= 0 or cell_bytes <= 0:
        return 0
    return math.floor(kv_gib * GIB / cell_bytes)


def cell_bytes_observed(kv_tokens_seen: int | None, kv_gib_seen: float | None) -> float | None:
    """c estimated from what the log says the pool holds (tokens) and weighs (GiB)."""
    if not kv_tokens_seen or not kv_gib_seen or kv_tokens_seen <= 0 or kv_gib_seen <= 0:
        return None
    return kv_gib_seen * GIB / kv_tokens_seen


def cell_bytes_mha(kv_heads_per_rank: int, head_dim: int, v_head_dim: int, layers: int, bytes_per_elem: float) -> float:
    """MHA/GQA: c = H_kv·(d_head + d_v)·L·b, H_kv per attention-TP rank (at least 1)."""
    return max(1, kv_heads_per_rank) * (head_dim + v_head_dim) * layers * bytes_per_elem


def cell_bytes_mla(kv_lora_rank: int, qk_rope_head_dim: int, layers: int, bytes_per_elem: float) -> float:
    """MLA: c = (kv_lora_rank + qk_rope_head_dim)·L·b (indexer and FP4 scale terms not included)."""
    return (kv_lora_rank + qk_rope_head_dim) * layers * bytes_per_elem


def mfs_floor(after_weights_avail: float, pre_load_avail: float) -> float:
    """The smallest mfs that leaves the KV pool any memory: 1 − A/P."""
    return 1.0 - after_weights_avail / pre_load_avail


# ---- the δ·P rule -------------------------------------------------------------------------------


def mfs_for_headroom(mfs: float, pre_load_avail: float, worst_free: float, target: float) -> float:
    """The mfs that lifts the worst rank's free memory from `worst_free` to `target` GiB.

    δ = (target − worst_free)/P, new = mfs − δ, rounded DOWN to two decimals (so the headroom
    lands at or above the target). Kimi story: 0.93 − (5.0 − 0.82)/94.6 = 0.8858 → 0.88.
    """
    delta = (target - worst_free) / pre_load_avail
    return floor2(mfs - delta)


def predicted_headroom(worst_free: float, mfs_old: float, mfs_new: float, pre_load_avail: float) -> float:
    """Free GiB after capture once mfs moves: worst_free + (mfs_old − mfs_new)·P."""
    return worst_free + (mfs_old - mfs_new) * pre_load_avail


def tokens_delta(mfs_old: float, mfs_new: float, pre_load_avail: float, cell_bytes: float) -> int:
    """KV tokens the move costs (positive when lowering mfs): δ·P·2³⁰/c, rounded."""
    return round((mfs_old - mfs_new) * pre_load_avail * GIB / cell_bytes)


@dataclass(frozen=True)
class MfsMove:
    """A worked mfs change: the numbers a finding shows."""

    mfs_old: float
    mfs_new: float
    delta: float  # exact δ before rounding
    pre_load_avail: float  # P
    worst_free: float
    target: float
    headroom: float  # predicted, GiB
    tokens_now: int | None
    tokens_after: int | None
    floor: float | None  # 1 − A/P when A is known

    @property
    def below_floor(self) -> bool:
        return self.floor is not None and self.mfs_new <= self.floor

    @property
    def lowest_workable(self) -> float:
        """The lowest mfs worth proposing: inside the flag's domain and above the startup floor."""
        lo = MFS_LOWEST if self.floor is None else max(MFS_LOWEST, self.floor + FLOOR_MARGIN)
        return ceil2(lo)

    @property
    def reachable(self) -> bool:
        """A real lowering (to < from) that stays workable. False: no setting reaches the target."""
        return self.lowest_workable <= self.mfs_new < self.mfs_old

    def arithmetic(self) -> str:
        p = self.pre_load_avail
        lines = [
            f"δ = (target {self.target:g} − worst free {self.worst_free:.2f}) / P {p:.2f} = {self.delta:.4f}",
            f"mfs {self.mfs_old:g} − {self.delta:.4f} = {self.mfs_old - self.delta:.4f} → {self.mfs_new:.2f} (rounded down)",
            f"headroom {self.worst_free:.2f} + ({self.mfs_old:g} − {self.mfs_new:.2f}) × {p:.2f} = {self.headroom:.2f} GiB",
        ]
        if self.tokens_now is not None and self.tokens_after is not None:
            lines.append(f"KV tokens {self.tokens_now:,} → {self.tokens_after:,}")
        if self.floor is not None:
            lines.append(f"floor 1 − A/P = {self.floor:.4f}")
        return "; ".join(lines)


def plan_mfs_for_headroom(
    mfs: float,
    pre_load_avail: float,
    worst_free: float,
    target: float,
    *,
    tokens_now: int | None = None,
    cell_bytes: float | None = None,
    after_weights_avail: float | None = None,
) -> MfsMove:
    delta = (target - worst_free) / pre_load_avail
    new = mfs_for_headroom(mfs, pre_load_avail, worst_free, target)
    tokens_after = None
    if tokens_now is not None and cell_bytes:
        tokens_after = max(0, tokens_now - tokens_delta(mfs, new, pre_load_avail, cell_bytes))
    floor = mfs_floor(after_weights_avail, pre_load_avail) if after_weights_avail is not None else None
    return MfsMove(
        mfs_old=mfs, mfs_new=new, delta=delta, pre_load_avail=pre_load_avail, worst_free=worst_free,
        target=target, headroom=predicted_headroom(worst_free, mfs, new, pre_load_avail),
        tokens_now=tokens_now, tokens_after=tokens_after, floor=floor,
    )


# ---- default --mem-fraction-static (§4.1) -------------------------------------------------------

# (upper bound of the bucket in GiB, cps, bs tp<4, bs tp≥4) for 0.5.9; 0.5.23 differs in one row.
_BUCKETS_059 = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512), (160, 8192, 256, 512))
_BUCKETS_0523 = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512), (160, 8192, 256, 512))
_BIG = (16384, 512, 512)
_UNKNOWN = (4096, 160, 160)
# Before 0.5.3 (PR #10975, merged 2025-09-27) server_args.py took the automatic mfs from a table by TP
# size and the chunked-prefill / graph-batch defaults from one 25,000 MiB threshold; the graph runner
# captured up to batch 160 otherwise. Real logs of those versions show it (tests/data/real/plan/sglang/:
# 0.88 on one GPU, chunked prefill 2048 and graph batch 8 / 80 on 24 GB cards).
LEGACY_UNTIL = "0.5.3"
_LEGACY_MFS = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def legacy_defaults(version: str | None) -> bool:
    """Does this SGLang version predate the reserve formula?"""
    return version_key(resolve_version(version)) < version_key(LEGACY_UNTIL)


@dataclass(frozen=True)
class DefaultMfs:
    mfs: float
    reserve_mib: float | None  # R; None when the GPU size is unknown
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    gpu_mem_mib: float | None
    legacy_tp: int | None = None  # set when the version predates the reserve formula: the TP the table used

    def arithmetic(self) -> str:
        if self.legacy_tp is not None:
            return f"SGLang before {LEGACY_UNTIL} takes {self.mfs:g} for TP{self.legacy_tp} from its table"
        if self.gpu_mem_mib is None or self.reserve_mib is None:
            return f"GPU size unknown: SGLang falls back to mfs {self.mfs:g}"
        m = self.gpu_mem_mib
        return f"mfs = round(({m:.0f} − {self.reserve_mib:.0f}) / {m:.0f}, 3) = {self.mfs:.3f}"


def gpu_bucket(gpu_mem_mib: float | None, tp: int, version: str | None = None) -> tuple[int, int]:
    """SGLang's default (chunked_prefill_size, decode cuda_graph_max_bs) for this GPU size."""
    if gpu_mem_mib is None:
        return _UNKNOWN[0], _UNKNOWN[1]
    if legacy_defaults(version):
        if gpu_mem_mib < 25_000:
            return 2048, (8 if tp < 4 else 80)
        return 8192, 160
    buckets = _BUCKETS_0523 if version_key(resolve_version(version)) >= version_key("0.5.23") else _BUCKETS_059
    for upper_gib, cps, bs_small, bs_large in buckets:
        if gpu_mem_mib < upper_gib * 1024:
            return cps, (bs_small if tp < 4 else bs_large)
    return _BIG[0], (_BIG[1] if tp < 4 else _BIG[2])


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """0.5.23's prefill CUDA-graph token sizes up to `max_tokens` (58 sizes at 8192)."""
    sizes = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
    sizes += list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512))
    return [s for s in sizes if s <= max_tokens]


def default_mfs(
    gpu_mem_mib: float | None,
    *,
    version: str | None = None,
    tp: int = 1,
    pp: int = 1,
    attn_dp: int = 1,  # dp_size with --enable-dp-attention (0.5.9), or --attn-dp-size (0.5.23)
    chunked_prefill_size: int | None = None,
    max_prefill_tokens: int = 16384,
    cuda_graph_max_bs: int | None = None,
    max_running_requests: int | None = None,
    speculative_algorithm: str | None = None,
    mla: bool = False,
    decode_graph: bool = True,
    prefill_graph: bool = True,
    deepep: bool = False,
) -> DefaultMfs:
    """The mfs SGLang picks when --mem-fraction-static is unset (reference §4.1).

    `gpu_mem_mib` is the smallest visible GPU's memory.total in MiB. H100 (81559 MiB), TP8:
    0.818 on 0.5.9, 0.812 on 0.5.23.
    """
    v = resolve_version(version)
    new = version_key(v) >= version_key("0.5.23")
    bucket_cps, bucket_bs = gpu_bucket(gpu_mem_mib, tp, v)
    cps = chunked_prefill_size if chunked_prefill_size is not None else bucket_cps
    bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else bucket_bs
    if new and cuda_graph_max_bs is None and max_running_requests is not None:
        bs = min(bs, max_running_requests)
    if legacy_defaults(v):
        return DefaultMfs(next(m for t, m in _LEGACY_MFS if tp >= t), None, cps, bs, gpu_mem_mib, legacy_tp=tp)
    if gpu_mem_mib is None:
        return DefaultMfs(0.95 if new else 0.88, None, cps, bs, None)

    act = max(cps, 2048) if cps > 0 else max(max_prefill_tokens, 2048)
    r = 512 + 1.5 * act + (tp * pp / 8) * 1024
    if not new:
        r += 2 * bs
        if attn_dp > 1:
            r += 3 * bs * attn_dp + (1.5 * bs * attn_dp if bs > 300 else 0)
        if gpu_mem_mib > 60 * 1024:
            r = max(r, 10240)
        # the flat draft reserve: 2 GiB (0.5.9), 4 GiB (0.5.10–0.5.13) for every algorithm but NGRAM,
        # 6 GiB for STANDALONE; gone from 0.5.14, which counts the draft's weights against mfs instead
        # (server_args.py of each release's wheel; plan.DRAFT_IN_STATIC_SINCE)
        algo = (speculative_algorithm or "").upper()
        if algo and algo != "NGRAM" and version_key(v) < version_key("0.5.14"):
            r += 6144 if algo == "STANDALONE" else 4096 if version_key(v) >= version_key("0.5.10") else 2048
    else:
        if decode_graph:
            r += 2 * bs
            if attn_dp > 1:
                r += 3 * bs * attn_dp + (1.5 * bs * attn_dp if bs > 300 else 0)
        if prefill_graph:
            r += 1536 if mla else 8 * len(prefill_graph_sizes(min(cps, 8192) if mla else cps))
            if deepep:
                r += 1024
        if gpu_mem_mib > 60 * 1024:
            r = max(r, 10240)
        if deepep and decode_graph:
            r += 2048
    mfs = round((gpu_mem_mib - r) / gpu_mem_mib, 3)
    return DefaultMfs(mfs, r, cps, bs, gpu_mem_mib)


# ---- HiCache host memory (§9) -------------------------------------------------------------------


@dataclass(frozen=True)
class HiCacheBudget:
    """Does ranks_per_node × size fit in the host's available RAM after both reserves?"""

    ranks_per_node: int
    size_gb: float  # per rank, decimal GB
    reserve_gb: float  # the operator's reserve (policy host-reserve-gb)
    sglang_reserve_gb: float  # SGLang's own 10 GiB, in decimal GB
    available_gb: float  # MemAvailable_eff, decimal GB

    @property
    def needed_gb(self) -> float:
        return self.ranks_per_node * self.size_gb + self.reserve_gb + self.sglang_reserve_gb

    @property
    def fits(self) -> bool:
        return self.needed_gb <= self.available_gb

    @property
    def max_size_gb(self) -> int:
        """The largest per-rank --hicache-size that fits: ⌊(avail − reserves) / ranks⌋."""
        return hicache_budget_per_rank_gb(self.available_gb, self.reserve_gb + self.sglang_reserve_gb, self.ranks_per_node)

    def arithmetic(self) -> str:
        n, s = self.ranks_per_node, self.size_gb
        cmp = "≤" if self.fits else ">"
        return (
            f"{n} ranks × {s:g} GB = {n * s:g} GB + {self.reserve_gb:g} GB reserve + "
            f"{self.sglang_reserve_gb:.1f} GB SGLang reserve (10 GiB) = {self.needed_gb:.1f} GB {cmp} "
            f"{_num(self.available_gb)} GB available; the most per rank is "
            f"⌊({_num(self.available_gb)} − {self.reserve_gb:g} − {self.sglang_reserve_gb:.1f}) / {n}⌋ = {self.max_size_gb} GB"
        )


def _num(x: float) -> str:
    """449 -> "449", 939.147 -> "939.1": whole numbers stay whole, others get one decimal."""
    return f"{x:g}" if abs(x - round(x, 1)) < 1e-9 else f"{x:.1f}"


def hicache_budget_per_rank_gb(available_gb: float, reserve_gb: float, ranks_per_node: int) -> int:
    """⌊(available − reserve) / ranks_per_node⌋ in decimal GB (0 when nothing is left)."""
    if ranks_per_node <= 0:
        raise ValueError("ranks_per_node must be positive")
    return max(0, math.floor((available_gb - reserve_gb) / ranks_per_node + 1e-9))


def hicache_budget(
    ranks_per_node: int, size_gb: float, available_gb: float, reserve_gb: float = 40.0, *, sglang_reserve: bool = True
) -> HiCacheBudget:
    return HiCacheBudget(
        ranks_per_node=ranks_per_node,
        size_gb=size_gb,
        reserve_gb=reserve_gb,
        sglang_reserve_gb=SGLANG_HICACHE_RESERVE_GB if sglang_reserve else 0.0,
        available_gb=available_gb,
    )
