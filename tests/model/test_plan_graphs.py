"""vLLM's CUDA-graph term from the capture sizes the launch will use (issue 36).

The capture list and modes follow vLLM's own rules (cockpit/backends/vllm/terms.py `capture_plan`:
`VllmConfig._set_cudagraph_sizes`, the FULL decode graphs of `capture_model`), the memory the
estimate's own arithmetic (`profile_cudagraph_memory`) with constants fitted to the graph lines of the
26 sweep launches (tests/data/real/plan/vllm-graphs.yaml), and the directions hold as properties.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bench.plan_graphs as graphs
import bench.plan_tight as tight
from cockpit.backends.vllm import plan as vplan
from cockpit.backends.vllm.terms import capture_plan, default_capture_sizes, non_torch_term
from cockpit.model.config import parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.plan import GpuFacts, MemoryPlan
from cockpit.model.platform import platform_of

H100 = "NVIDIA H100 80GB HBM3"


def _vllm(name: str, flags: dict, version: str = "0.33.0", gpu: GpuFacts | None = None) -> MemoryPlan:
    raw = json.loads((tight.PLAN / f"configs/{name}/config.json").read_text())
    cfg = parse_config(raw, "config.json", name=name)
    return vplan.plan(cfg, estimate_index(cfg, raw), gpu or GpuFacts(79.19, name=H100),
                      vplan.settings_from_flags({"max_model_len": 8192, "gpu_memory_utilization": 0.9, **flags}, version))


def test_the_default_capture_list_is_the_engines() -> None:
    """51 sizes at 512 from 0.11.1 (every 8 below 256, every 16 above), 67 before (every 8); the
    largest is min(max_num_seqs × 2, 512) and never above max_num_batched_tokens; FULL decode graphs
    stop at max_num_seqs; -O1 is PIECEWISE only; before 0.11.0 the default mode is PIECEWISE."""
    assert len(default_capture_sizes(512, "0.19.0")) == 51
    assert len(default_capture_sizes(512, "0.10.1.1")) == 67
    s = vplan.settings_from_flags({}, "0.19.0")
    c = capture_plan(s, 1024, 8192)
    assert (c.mode, c.full, c.piecewise, c.largest_piecewise) == ("FULL_AND_PIECEWISE", 51, 51, 512)
    c = capture_plan(s, 128, 8192)  # largest 256; FULL decode graphs up to 128
    assert c.largest_piecewise == 256 and c.largest_full == 128 and c.full < c.piecewise
    assert capture_plan(s, 1024, 100).largest_piecewise <= 100
    assert capture_plan(vplan.settings_from_flags({"optimization_level": 1}, "0.19.0"), 1024, 8192).full == 0
    assert capture_plan(vplan.settings_from_flags({"optimization_level": 0}, "0.19.0"), 1024, 8192).graphs == 0
    assert capture_plan(vplan.settings_from_flags({}, "0.10.1.1"), 256, 2048).mode == "PIECEWISE"
    flags = {"max_cudagraph_capture_size": 64}
    assert capture_plan(vplan.settings_from_flags(flags, "0.19.0"), 1024, 8192).largest_piecewise == 64
    cc = {"compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8], "cudagraph_mode": "FULL_DECODE_ONLY"}}
    c = capture_plan(vplan.settings_from_flags(cc, "0.19.0"), 1024, 8192)
    assert (c.full, c.piecewise, c.largest_full) == (4, 0, 8)
    assert capture_plan(vplan.settings_from_flags({"cudagraph_capture_sizes": [1, 2, 4]}, "0.19.0"), 1024, 8192).sizes == (1, 2, 4)


def test_the_graph_term_lands_on_the_sweeps_own_estimates() -> None:
    """vllm-graphs.yaml: every sweep launch's `Estimated CUDA graph memory` inside the term's band
    but two (Llama-8B TP2 and granite-2b, whose second piecewise capture cost 26 MiB — vLLM's own
    estimate overshot their captured pools by 0.9 and 0.8 GiB); the planned term within 0.55 GiB of
    every captured pool."""
    rows = graphs.residuals()
    assert len(rows) == 26
    outside = {r["name"] for r in rows if abs(r["plan"] - r["estimated"]) > r["spread"]}
    assert outside <= {"llama-3.1-8b-tp2", "granite-3.1-2b-instruct"}
    assert all(abs(r["plan"] - r["actual"]) <= 0.55 for r in rows)


def test_sizes_beyond_the_fitted_range_widen_the_band() -> None:
    base = _vllm("codellama-7b", {})
    few = _vllm("codellama-7b", {"cudagraph_capture_sizes": [1, 2, 4, 8]})
    many = _vllm("codellama-7b", {"max_num_seqs": 1024, "max_cudagraph_capture_size": 2048})
    assert few.terms["graph_gib"] < base.terms["graph_gib"] < many.terms["graph_gib"]
    assert base.terms["graph_spread_gib"] == pytest.approx(0.3 * base.terms["graph_gib"] + 0.1)
    assert many.terms["graph_spread_gib"] == pytest.approx(0.6 * many.terms["graph_gib"] + 0.1)
    assert any("outside the range the graph estimate was fitted to" in n for n in many.notes)
    assert not any("outside the range" in n for n in base.notes + few.notes)


MODELS = ("codellama-7b", "gemma-2-9b-it", "qwen1.5-moe-a2.7b", "granite-3.1-8b-instruct", "phi-2-2048")
SIZES = st.lists(st.integers(1, 1024), min_size=1, max_size=40, unique=True)


def _cfg_name(name: str) -> str:
    return "phi-2" if name == "phi-2-2048" else name


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), tp=st.sampled_from((1, 2)), a=SIZES, b=SIZES,
       mode=st.sampled_from(("FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY")))
def test_more_capture_sizes_never_predict_more_kv_tokens(name: str, tp: int, a: list[int], b: list[int], mode: str) -> None:
    """A capture list that holds another (vLLM ≥ 0.20: the estimate inside the budget) never gets
    more KV tokens — point, low and high end; eager never gets fewer than any list."""
    name = _cfg_name(name) if (tight.PLAN / f"configs/{name}").exists() else "codellama-7b"
    small = sorted(a)
    big = sorted(set(a) | set(b))

    def plan(flags: dict) -> MemoryPlan:
        return _vllm(name, {"tensor_parallel_size": tp, "compilation_config": {"cudagraph_mode": mode}, **flags})

    p_small, p_big, eager = plan({"cudagraph_capture_sizes": small}), plan({"cudagraph_capture_sizes": big}), plan({"enforce_eager": True})
    s, g, e = p_small.current, p_big.current, eager.current
    assert s is not None and g is not None and e is not None
    assert g.max_total_num_tokens <= s.max_total_num_tokens and g.low <= s.low and g.high <= s.high
    assert e.max_total_num_tokens >= s.max_total_num_tokens and e.low >= s.low and e.high >= s.high


@settings(max_examples=30, deadline=None)
@given(seqs=st.integers(1, 2048), more=st.integers(0, 2048), top=st.integers(1, 1024))
def test_a_larger_default_list_never_predicts_more_kv_tokens(seqs: int, more: int, top: int) -> None:
    """More sequences (a larger default largest size) or a larger --max-cudagraph-capture-size never
    predict more KV tokens (the sampler's peak aside: the batch is pinned here)."""
    flags = {"max_num_batched_tokens": 8192}
    lo = _vllm("codellama-7b", {**flags, "max_num_seqs": 256, "max_cudagraph_capture_size": top})
    hi = _vllm("codellama-7b", {**flags, "max_num_seqs": 256, "max_cudagraph_capture_size": min(2048, top + more)})
    assert hi.terms["graph_gib"] >= lo.terms["graph_gib"]
    assert lo.current is not None and hi.current is not None
    assert hi.current.max_total_num_tokens <= lo.current.max_total_num_tokens


@pytest.mark.parametrize("card", [H100, "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X", "NVIDIA L4", None])
@pytest.mark.parametrize("version", ["0.10.1.1", "0.19.0", "0.33.0"])
def test_non_torch_memory_with_tp_is_never_below_one_gpus(card: str | None, version: str) -> None:
    """What vLLM's arithmetic guarantees: the all-reduce buffers (custom all-reduce, NCCL/RCCL,
    symmetric memory) exist only with TP > 1, so no TP predicts less non-torch memory per rank than
    one GPU; their size does not shrink with more ranks (each rank's buffers are per peer or fixed),
    so the plan keeps one figure for every TP > 1 on a platform."""
    plat = platform_of(card, 80.0)
    s1 = vplan.settings_from_flags({}, version)
    ones = non_torch_term(s1, plat).gib
    multi = [non_torch_term(vplan.settings_from_flags({"tensor_parallel_size": tp}, version), plat).gib for tp in (2, 4, 8, 16)]
    assert all(m >= ones for m in multi)
    assert len(set(multi)) == 1
