"""The memory model against the reference's worked examples and the Kimi story."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cockpit.backends.sglang.memory import (
    SGLANG_HICACHE_RESERVE_GB,
    cell_bytes_mha,
    cell_bytes_mla,
    cell_bytes_observed,
    default_mfs,
    floor2,
    gpu_bucket,
    hicache_budget,
    hicache_budget_per_rank_gb,
    kv_pool_gib,
    kv_tokens,
    mfs_floor,
    mfs_for_headroom,
    plan_mfs_for_headroom,
    predicted_headroom,
    prefill_graph_sizes,
    tokens_delta,
)

H100_MIB = 81559


def test_default_mfs_h100_tp8_both_versions() -> None:
    d9 = default_mfs(H100_MIB, version="0.5.9", tp=8)
    assert (d9.mfs, d9.reserve_mib, d9.chunked_prefill_size, d9.cuda_graph_max_bs) == (0.818, 14848, 8192, 512)
    d23 = default_mfs(H100_MIB, version="0.5.23", tp=8)
    assert (d23.mfs, d23.reserve_mib) == (0.812, 15312)
    assert "0.818" in d9.arithmetic()


def test_default_mfs_unknown_gpu() -> None:
    assert default_mfs(None, version="0.5.9").mfs == 0.88
    assert default_mfs(None, version="0.5.23").mfs == 0.95


def test_default_mfs_terms() -> None:
    base = default_mfs(H100_MIB, version="0.5.9", tp=8).reserve_mib
    assert default_mfs(H100_MIB, version="0.5.9", tp=8, speculative_algorithm="EAGLE").reserve_mib == base + 2048
    assert default_mfs(H100_MIB, version="0.5.9", tp=8, speculative_algorithm="STANDALONE").reserve_mib == base + 6144
    assert default_mfs(H100_MIB, version="0.5.9", tp=8, speculative_algorithm="NGRAM").reserve_mib == base
    # small GPUs: the 10 GiB floor only applies above 60 GiB
    small = default_mfs(24 * 1024, version="0.5.9", tp=1)
    assert small.reserve_mib == 512 + 1.5 * 2048 + 1024 / 8 + 2 * 24
    assert default_mfs(H100_MIB, version="0.5.23", tp=8, max_running_requests=64).cuda_graph_max_bs == 64
    assert default_mfs(H100_MIB, version="0.5.23", tp=8, mla=True).reserve_mib == 512 + 12288 + 1024 + 1024 + 1536


def test_gpu_buckets() -> None:
    assert gpu_bucket(16 * 1024, 8) == (2048, 8)
    assert gpu_bucket(24 * 1024, 8, "0.5.9") == (2048, 80)
    assert gpu_bucket(24 * 1024, 8, "0.5.23") == (4096, 160)
    assert gpu_bucket(H100_MIB, 2) == (8192, 256)
    assert gpu_bucket(141 * 1024, 8) == (8192, 512)
    assert gpu_bucket(180 * 1024, 8) == (16384, 512)
    assert gpu_bucket(None, 8) == (4096, 160)


def test_prefill_graph_sizes() -> None:
    assert len(prefill_graph_sizes(8192)) == 58
    assert prefill_graph_sizes(40) == [4, 8, 12, 16, 20, 24, 28, 32]


def test_llama_worked_example() -> None:
    c = cell_bytes_mha(1, 128, 128, 80, 2)
    assert c == 40960
    kv = kv_pool_gib(78.21, 61.72, 0.95)
    assert kv == pytest.approx(57.81, abs=0.01)
    assert kv_tokens(57.81, c) == pytest.approx(1_515_441, rel=1e-4)
    # 0.95 -> 0.90 frees 0.05 × 78.21 ≈ 3.91 GiB and costs about 102k tokens
    assert predicted_headroom(1.9, 0.95, 0.90, 78.21) - 1.9 == pytest.approx(3.91, abs=0.01)
    assert tokens_delta(0.95, 0.90, 78.21, c) == pytest.approx(102_500, rel=0.01)
    assert mfs_floor(61.72, 78.21) == pytest.approx(0.2108, abs=1e-4)


def test_kimi_story_delta_p_rule() -> None:
    assert mfs_for_headroom(0.93, 94.6, 0.82, 5.0) == 0.88
    assert predicted_headroom(0.82, 0.93, 0.88, 94.6) == pytest.approx(5.55, abs=0.01)
    move = plan_mfs_for_headroom(0.93, 94.6, 0.82, 5.0, tokens_now=131_000, cell_bytes=cell_bytes_mla(512, 64, 61, 2),
                                 after_weights_avail=15.2)
    assert move.mfs_new == 0.88 and move.delta == pytest.approx(0.0442, abs=1e-4)
    assert move.tokens_after is not None and 50_000 < move.tokens_after < 65_000
    assert not move.below_floor
    assert "0.8858 → 0.88" in move.arithmetic()


def test_rounding_is_down_and_float_safe() -> None:
    assert floor2(0.88) == 0.88  # 0.88 is stored as 0.8799999…
    assert floor2(0.8858) == 0.88
    assert mfs_for_headroom(0.90, 80.0, 5.0, 5.0) == 0.90


def test_cell_from_observation() -> None:
    assert cell_bytes_observed(1_244_811, 47.48) == pytest.approx(40960, rel=1e-3)
    assert cell_bytes_observed(None, 3.0) is None
    assert cell_bytes_observed(0, 3.0) is None


def test_hicache_budget_story() -> None:
    b = hicache_budget(8, 300, 449, 40)
    assert not b.fits
    assert b.max_size_gb == 49  # ⌊(449 − 40 − 10.74) / 8⌋
    assert "8 ranks × 300 GB = 2400 GB + 40 GB reserve" in b.arithmetic()
    assert hicache_budget(8, 48, 449, 40).fits
    assert hicache_budget_per_rank_gb(445, 40, 8) == 50
    assert pytest.approx(10.737, abs=1e-3) == SGLANG_HICACHE_RESERVE_GB
    assert hicache_budget_per_rank_gb(30, 40, 8) == 0


@given(
    mfs=st.floats(0.5, 0.98),
    p=st.floats(20.0, 190.0),
    worst=st.floats(0.0, 10.0),
    target=st.floats(0.5, 12.0),
)
def test_rounding_down_never_misses_the_target(mfs: float, p: float, worst: float, target: float) -> None:
    new = mfs_for_headroom(mfs, p, worst, target)
    assert round(new, 2) == new
    assert predicted_headroom(worst, mfs, new, p) >= target - 1e-6
    # and it is the largest such two-decimal value: one step up misses the target
    assert predicted_headroom(worst, mfs, new + 0.01, p) < target + 1e-6


def test_defaults_before_the_reserve_formula() -> None:
    """SGLang before 0.5.3 (PR #10975): the automatic mfs by TP size alone, chunked prefill and graph batch
    from one 25,000 MiB threshold — as the real logs of those versions print them (tests/data/real/plan/sglang/:
    mfs 0.88 on one GPU; chunked prefill 2048 and graph batch 8 on a 24 GB card at TP1, 80 at TP4)."""
    from cockpit.backends.sglang.memory import default_mfs, gpu_bucket

    rtx4090, h100 = 24564, 81559
    one = default_mfs(rtx4090, version="0.5.2", tp=1)
    assert (one.mfs, one.chunked_prefill_size, one.cuda_graph_max_bs) == (0.88, 2048, 8)
    assert "before 0.5.3" in one.arithmetic() and "TP1" in one.arithmetic()
    assert gpu_bucket(rtx4090, 4, "0.4.3.post4") == (2048, 80)
    assert [default_mfs(h100, version="0.4.6", tp=t).mfs for t in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]
    assert gpu_bucket(h100, 8, "0.5.2") == (8192, 160)
    # from 0.5.3 the reserve formula: an H100 at TP8 no longer gets the table's 0.81
    assert default_mfs(h100, version="0.5.9", tp=8).mfs == 0.818
