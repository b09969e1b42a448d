"""The plan on tight fits (issue 36): the tight-fit batch of public launches, each term from the
engine's own arithmetic, a band instead of a confident zero, and the platforms and shapes.

tests/data/real/plan/launches-tight.yaml holds fifteen launches never used before issue 36, with
their logs' lines verbatim; bench/plan_tight.py prints the table (docs/PLAN.md records the score at
first sight and now)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bench.plan_tight as tight
from cockpit.backends.sglang import plan as splan
from cockpit.backends.vllm import plan as vplan
from cockpit.backends.vllm.terms import kv_layout
from cockpit.model.config import ModelConfigError, parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.plan import GpuFacts, MemoryPlan, PlanRow
from cockpit.model.platform import platform_of
from tests.data.models import synth

LAUNCHES = tight.launches()
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("la", LAUNCHES, ids=[la.name for la in LAUNCHES])
def test_each_launch_is_proven_by_its_quoted_lines(la: tight.Tight) -> None:
    d = la.doc
    text = "\n".join(d["quoted"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert m and int(m.group(1).replace(",", "")) == d["kv_tokens"]
    m = re.search(r"Requested memory: ([\d.]+) \(util\)", text)
    assert m and float(m.group(1)) == d["flags"]["gpu_memory_utilization"]
    m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request", text)
    assert m and int(m.group(1).replace(",", "")) == d["flags"]["max_model_len"]
    m = re.search(r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB; "
                  r"weights memory: ([\d.]+)GiB", text)
    assert m, "the profiling line"
    got = d["measured_gib"]
    assert (got["activation_peak"], got["non_torch"], got["weights"]) == tuple(float(x) for x in m.groups())
    m = re.search(r"Available KV cache memory: ([\d.]+) GiB", text)
    assert m and float(m.group(1)) == got["kv_cache"]
    assert d["version"] in d["url"] and "/logs/" in d["url"] and d["url"].startswith("https://github.com/")
    assert (tight.PLAN / d["config"]).is_file()


def test_the_batch_meets_the_bar_and_no_launch_that_ran_has_a_zero_high_end() -> None:
    """≥ 80 % within 5 % of the printed tokens (first sight was 12/15: three Gemma 3 configs refused),
    and every launch that ran has a band whose high end starts."""
    errs, zero_high = {}, []
    for la in LAUNCHES:
        mp = tight.plan_of(la)
        assert mp.current is not None and mp.weights_source == "config"
        errs[la.name] = (mp.current.max_total_num_tokens - la.kv_tokens) / la.kv_tokens
        if mp.current.high <= 0:
            zero_high.append(la.name)
    within = [n for n, e in errs.items() if abs(e) <= tight.BAND]
    assert len(within) >= tight.SHARE * len(LAUNCHES), errs
    assert not zero_high


def test_the_printed_tokens_lie_inside_the_band_on_most_launches() -> None:
    """The band is the terms' residual spread, not decoration: the printed count falls inside it."""
    inside = []
    for la in LAUNCHES:
        cur = tight.plan_of(la).current
        assert cur is not None and cur.low <= cur.max_total_num_tokens <= cur.high
        inside.append(cur.low <= la.kv_tokens <= cur.high)
    assert sum(inside) >= 0.8 * len(inside), inside


def test_gemma3_sparse_config_takes_transformers_defaults_and_other_gaps_stay_refused() -> None:
    raw = json.loads((tight.PLAN / "configs/gemma-3-4b-it/config.json").read_text())
    cfg = parse_config(raw, "config.json")
    assert (cfg.vocab_size, cfg.num_attention_heads, cfg.num_kv_heads, cfg.head_dim) == (262208, 8, 4, 256)
    assert cfg.swa_layers == 29 and cfg.full_attention_layers == 5  # every 6th layer full
    assert any("transformers' defaults" in n for n in cfg.notes)
    other = json.loads((tight.PLAN / "configs/codellama-7b/config.json").read_text())
    del other["vocab_size"]
    with pytest.raises(ModelConfigError, match="no vocab_size"):
        parse_config(other, "config.json")


def test_vllm_pads_hybrid_groups_as_the_engine_does() -> None:
    """gemma-3-27b: 52 sliding + 10 full layers in groups of 10 → 7 groups, 8 padding layers
    (the log: "Add 8 padding layers"); 19.53 GiB then hold exactly the printed 36,560 tokens."""
    raw = json.loads((tight.PLAN / "configs/gemma-3-27b-it/config.json").read_text())
    cfg = parse_config(raw, "config.json")
    layer = cfg.num_kv_heads * (cfg.head_dim + cfg.v_head_dim) * 2
    lay = kv_layout(cfg, cfg.layers, layer)
    assert (lay.group_size, lay.groups, lay.padding) == (10, 7, 8)
    assert lay.tokens(19.53, 16) == 36_560
    gpt = parse_config(synth.load_config("gpt-oss-120b"), "config.json")  # 18 + 18: no padding
    assert kv_layout(gpt, gpt.layers, 1.0).padding == 0


def _vllm(name: str, flags: dict, gpu: GpuFacts | None = None, version: str = "0.19.0") -> MemoryPlan:
    raw = json.loads((tight.PLAN / f"configs/{name}/config.json").read_text())
    cfg = parse_config(raw, "config.json", name=name)
    return vplan.plan(cfg, estimate_index(cfg, raw), gpu or GpuFacts(79.19, name=H100),
                      vplan.settings_from_flags({"max_model_len": 8192, **flags}, version))


def test_a_tight_fit_is_may_not_start_with_the_value_that_makes_its_low_end_start() -> None:
    """gemma-2-27b (50.7 GiB of weights on an 80 GB card) at the utilisation where the point
    estimate leaves fewer tokens than --max-model-len but the band's high end does not: no confident
    zero, "tight: may not start", and the value that makes the low end start."""
    tight_u = None
    for u in vplan.SEARCH:
        cur = _vllm("gemma-2-27b-it", {"gpu_memory_utilization": u}).current
        assert cur is not None
        if cur.tight and cur.max_total_num_tokens <= 0:
            tight_u = u
            break
    assert tight_u is not None, "some utilisation is tight for a 50.7 GiB model on 79 GiB"
    mp = _vllm("gemma-2-27b-it", {"gpu_memory_utilization": tight_u})
    cur = mp.current
    assert cur is not None and cur.starts and cur.tight and cur.high >= 8192
    assert mp.severity == "critical"  # the point does not start
    safe = mp.terms["low_end_safe_value"]
    assert safe > tight_u
    safe_row = _vllm("gemma-2-27b-it", {"gpu_memory_utilization": safe}).current
    assert safe_row is not None and safe_row.low >= 8192
    assert mp.summary().startswith(f"tight: {tight_u:g} may not start")
    assert f"{safe:g} makes the low end start" in mp.summary()
    js = mp.to_json()
    assert js["current"]["may_not_start"] is True and js["current"]["starts"] is True
    assert js["current"]["max_total_num_tokens"] == 0 < js["current"]["max_total_num_tokens_high"]
    # far below: even the high end leaves nothing — the one case that says it cannot start
    gone = _vllm("gemma-2-27b-it", {"gpu_memory_utilization": 0.5})
    assert gone.current is not None and not gone.current.starts and gone.severity == "critical"


def test_the_text_plan_prints_the_band_and_the_tight_rows() -> None:
    from cockpit.commands.plan import render_plan

    mp = _vllm("gemma-2-27b-it", {"gpu_memory_utilization": 0.95})
    text = render_plan(mp, current_from="--set")
    cur = mp.current
    assert cur is not None and cur.low < cur.max_total_num_tokens < cur.high
    assert f"KV tokens at 0.95 (--set): {cur.max_total_num_tokens:,} ({cur.low:,} – {cur.high:,})" in text
    assert "may not start" in text  # some table row near the floor is tight
    assert max(len(line) for line in text.splitlines()) <= 80


def test_row_semantics_cannot_start_only_when_the_high_end_is_zero() -> None:
    sure = PlanRow("--mem-fraction-static", 0.5, 0, -1.0, 9.0, 0, 0)
    maybe = PlanRow("--mem-fraction-static", 0.6, 0, -0.1, 8.0, 0, 1200)
    fine = PlanRow("--mem-fraction-static", 0.8, 5000, 1.0, 6.0, 4000, 6000)
    measured = PlanRow("--mem-fraction-static", 0.8, 5000, 1.0, 6.0)
    assert not sure.starts and not sure.tight
    assert maybe.starts and maybe.tight and maybe.band_text() == "0 (0 – 1,200)"
    assert fine.starts and not fine.tight and (fine.low, fine.high) == (4000, 6000)
    assert measured.low == measured.high == 5000 and measured.band_text() == "5,000"


def test_platforms_widen_the_band_where_the_engine_is_less_regular() -> None:
    """SGLang Llama-3.1-70B TP8: ROCm's band is wider than an H100's; a desktop card widens only
    the low end (another process's memory lowers P); the agent's measured free memory narrows it."""
    raw = synth.load_config("llama-3.1-70b")
    cfg = parse_config(raw, "config.json", name="llama-3.1-70b")
    idx = estimate_index(cfg, raw)
    s = splan.settings_from_flags({"tp_size": 8, "mem_fraction_static": 0.85}, "0.5.9")

    def width(gpu: GpuFacts) -> tuple[int, int]:
        cur = splan.plan(cfg, idx, gpu, s).current
        assert cur is not None
        return cur.max_total_num_tokens - cur.low, cur.high - cur.max_total_num_tokens

    h100 = width(GpuFacts(79.6, name=H100))
    mi = width(GpuFacts(79.6, name="AMD Instinct MI300X"))
    measured = width(GpuFacts(79.6, free_gib=79.0, name=H100))
    assert mi[0] > h100[0] and mi[1] > h100[1]
    assert measured[0] < h100[0]
    assert platform_of("NVIDIA GeForce RTX 4090").desktop and platform_of("AMD Instinct MI355X").rocm
    one = splan.settings_from_flags({"mem_fraction_static": 0.85}, "0.5.9")
    q = parse_config(synth.load_config("qwen2.5-7b"), "config.json")
    qi = estimate_index(q, synth.load_config("qwen2.5-7b"))
    desk = splan.plan(q, qi, GpuFacts(23.5, name="NVIDIA GeForce RTX 4090"), one).current
    card = splan.plan(q, qi, GpuFacts(23.5, name="NVIDIA L4"), one).current
    assert desk is not None and card is not None
    assert desk.max_total_num_tokens - desk.low > card.max_total_num_tokens - card.low
    assert desk.high - desk.max_total_num_tokens == card.high - card.max_total_num_tokens


def test_a_kv_offload_connector_is_named_outside_the_gpu_pool() -> None:
    plain = _vllm("qwen2.5-7b-instruct-fp8-dynamic", {"gpu_memory_utilization": 0.9})
    lm = _vllm("qwen2.5-7b-instruct-fp8-dynamic", {"gpu_memory_utilization": 0.9, "kv_transfer_config":
                                                   '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'})
    assert plain.current is not None and lm.current is not None
    assert lm.current.max_total_num_tokens == plain.current.max_total_num_tokens
    assert lm.current.low < plain.current.low and lm.current.high == plain.current.high
    assert any("outside the GPU pool" in n and "cannot see" in n for n in lm.notes)


def test_non_torch_memory_follows_tp_and_platform() -> None:
    """vLLM 0.19 on H100: ~0.25 GiB on one GPU, ~2 GiB per rank with TP (NCCL/NVLS buffers); PP
    stages exchange point to point (no all-reduce buffers); an A100 keeps the small figure."""
    one = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9})
    tp2 = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 2})
    pp2 = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9, "pipeline_parallel_size": 2})
    a100 = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 2},
                 GpuFacts(79.15, name="NVIDIA A100-SXM4-80GB"))
    assert one.terms["non_torch_gib"] == pytest.approx(0.25)
    assert tp2.terms["non_torch_gib"] == pytest.approx(2.0)
    assert pp2.terms["non_torch_gib"] == pytest.approx(0.25)
    assert a100.terms["non_torch_gib"] == pytest.approx(0.26)


def test_the_activation_peak_is_a_function_of_the_profiled_batch() -> None:
    """The larger of the dummy forward (max_num_batched_tokens) and the sampler (max_num_seqs ×
    vocabulary): more sequences raise a 256 K-vocabulary Gemma's peak, more batched tokens a 32 K
    CodeLlama's."""
    g_small = _vllm("gemma-2-9b-it", {"gpu_memory_utilization": 0.9, "max_num_seqs": 256})
    g_big = _vllm("gemma-2-9b-it", {"gpu_memory_utilization": 0.9, "max_num_seqs": 1024})
    c_small = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 8192})
    c_big = _vllm("codellama-7b", {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 16384})
    assert g_big.terms["activation_peak_gib"] > 3 * g_small.terms["activation_peak_gib"] * 0.9
    assert c_big.terms["activation_peak_gib"] > 1.8 * c_small.terms["activation_peak_gib"]


# ---- the band's direction (property tests) --------------------------------------------------------

VLLM_MODELS = ("codellama-7b", "gemma-2-9b-it", "gemma-3-27b-it", "qwen1.5-moe-a2.7b", "granite-3.1-8b-instruct")


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(VLLM_MODELS), tp=st.sampled_from((1, 2)),
       u=st.floats(0.3, 0.97), du=st.floats(0.0, 0.3))
def test_vllm_more_utilisation_never_means_fewer_tokens(name: str, tp: int, u: float, du: float) -> None:
    hi_u = min(0.98, u + du)
    pa = _vllm(name, {"gpu_memory_utilization": round(u, 4), "tensor_parallel_size": tp})
    a = pa.current
    b = _vllm(name, {"gpu_memory_utilization": round(hi_u, 4), "tensor_parallel_size": tp}).current
    assert a is not None and b is not None
    for r in (a, b):
        assert r.low <= r.max_total_num_tokens <= r.high
    if b.value <= pa.terms["util_ceiling"]:  # above it vLLM refuses whatever the KV (free memory at start-up)
        assert a.low <= b.low and a.max_total_num_tokens <= b.max_total_num_tokens and a.high <= b.high


SG_MODELS = ("llama-3.1-70b", "qwen3-32b", "deepseek-v3", "gpt-oss-120b")
SG_CARDS = (GpuFacts(79.6, name=H100), GpuFacts(191.5, name="AMD Instinct MI300X"), GpuFacts(95.0), GpuFacts(22.0, name="NVIDIA L4"))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(SG_MODELS), card=st.sampled_from(SG_CARDS), tp=st.sampled_from((4, 8)),
       m=st.floats(0.4, 0.95), dm=st.floats(0.0, 0.3))
def test_sglang_more_memory_fraction_never_means_fewer_tokens(name: str, card: GpuFacts, tp: int, m: float, dm: float) -> None:
    raw = synth.load_config(name)
    cfg = parse_config(raw, "config.json", name=name)
    idx = estimate_index(cfg, raw)
    s = splan.settings_from_flags({"tp_size": tp}, "0.5.9")
    lo = splan.plan(cfg, idx, card, dataclasses.replace(s, mfs=round(m, 4))).current
    hi = splan.plan(cfg, idx, card, dataclasses.replace(s, mfs=round(min(0.99, m + dm), 4))).current
    assert lo is not None and hi is not None
    for r in (lo, hi):
        assert r.low <= r.max_total_num_tokens <= r.high
    assert lo.low <= hi.low and lo.max_total_num_tokens <= hi.max_total_num_tokens and lo.high <= hi.high


def test_sglang_names_what_it_cannot_see_and_why_its_band_is_wide() -> None:
    """A HiCache host pool is outside the device pool the plan sizes; a ROCm card says why its band
    is wider. The pool itself (what the HiCache gate compares against) is unchanged by the flag."""
    raw = synth.load_config("llama-3.1-70b")
    cfg = parse_config(raw, "config.json", name="llama-3.1-70b")
    idx = estimate_index(cfg, raw)
    flags = {"tp_size": 8, "mem_fraction_static": 0.85}
    plain = splan.plan(cfg, idx, GpuFacts(191.5, name="AMD Instinct MI300X"), splan.settings_from_flags(flags, "0.5.9"))
    hic = splan.plan(cfg, idx, GpuFacts(191.5, name="AMD Instinct MI300X"),
                     splan.settings_from_flags({**flags, "enable_hierarchical_cache": True}, "0.5.9"))
    assert plain.current is not None and hic.current is not None
    assert hic.current.max_total_num_tokens == plain.current.max_total_num_tokens
    assert any("host KV pool beside this device pool" in n for n in hic.notes)
    assert not any("HiCache" in n for n in plain.notes)
    assert any(n.startswith("ROCM cdna3: the KV band is wider") for n in plain.notes)


def test_sglang_just_above_its_floor_is_tight_not_a_confident_zero() -> None:
    """Llama-3.1-70B at TP2 on H100s (65.7 GiB of weights per rank): the mfs just below the point
    estimate's floor 1 − A/P is "tight: may not start" (the band's high end still holds a pool),
    not "cannot start"; the plan names the mfs whose low end starts, and only far below the floor
    does it say the server refuses."""
    raw = synth.load_config("llama-3.1-70b")
    cfg = parse_config(raw, "config.json", name="llama-3.1-70b")
    idx = estimate_index(cfg, raw)
    gpu = GpuFacts(79.6, name=H100)

    def at(m: float) -> MemoryPlan:
        return splan.plan(cfg, idx, gpu, splan.settings_from_flags({"tp_size": 2, "mem_fraction_static": m}, "0.5.9"))

    tight_m = next(m for m in splan.SEARCH if (c := at(m).current) is not None and c.tight and c.max_total_num_tokens == 0)
    mp = at(tight_m)
    assert mp.current is not None and mp.current.starts and mp.severity == "critical"
    safe = mp.terms["low_end_safe_value"]
    assert safe > tight_m and (s_row := at(safe).current) is not None and s_row.low > 0
    assert mp.summary().startswith(f"tight: {tight_m:g} may not start") and f"{safe:g} makes the low end start" in mp.summary()
    far = at(0.5)
    assert far.current is not None and not far.current.starts
    assert "the server refuses to start" in far.summary()
