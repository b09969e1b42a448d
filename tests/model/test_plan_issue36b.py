"""Issue 36's second first-sight batch (tests/data/real/plan/launches-issue36b.yaml): sixteen public
launches the project had never used, each proven by its log's lines verbatim, scored from config.json
alone by `bench/plan_tight.py --batch issue36b` (docs/PLAN.md records the first-sight score and now)."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bench.plan_launches as pl
import bench.plan_tight as tight
from cockpit.backends.vllm import plan as vplan
from cockpit.backends.vllm.terms import activation_term
from cockpit.model.config import ModelConfig
from cockpit.model.plan import GpuFacts, MemoryPlan
from cockpit.model.weights import WeightIndex

LAUNCHES = tight.launches("issue36b")


def test_the_batch_is_new_to_the_project() -> None:
    """None of these logs is one the earlier batches used (the same sweep, other runs)."""
    used = {la.doc["url"] for la in tight.launches("tight")}
    used |= {la.source for la in pl.launches()}
    assert len(LAUNCHES) >= 15
    assert not used & {la.doc["url"] for la in LAUNCHES}
    assert len({la.doc["url"] for la in LAUNCHES}) == len(LAUNCHES)


@pytest.mark.parametrize("la", LAUNCHES, ids=[la.name for la in LAUNCHES])
def test_each_launch_is_proven_by_its_quoted_lines(la: tight.Tight) -> None:
    d = la.doc
    text = "\n".join(d["quoted"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert m and int(m.group(1).replace(",", "")) == d["kv_tokens"]
    m = re.search(r"non-default args: (\{.*\})", text)
    assert m, "the flags as vLLM printed them"
    args = ast.literal_eval(m.group(1))
    assert all(args[k] == v for k, v in d["flags"].items())
    assert args["model"] == d["hf_id"]
    m = re.search(r"Requested memory: ([\d.]+) \(util\)", text)
    assert m and float(m.group(1)) == d["flags"]["gpu_memory_utilization"]
    assert "total_memory=79.19GiB" in text
    m = re.search(r"Available KV cache memory: ([\d.]+) GiB", text)
    assert m and float(m.group(1)) == d["measured_gib"]["kv_cache"]
    m = re.search(r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB; "
                  r"weights memory: ([\d.]+)GiB", text)
    got = d["measured_gib"]
    assert m and (got["activation_peak"], got["non_torch"], got["weights"]) == tuple(float(x) for x in m.groups())
    assert d["version"] in d["url"] and "/logs/" in d["url"] and d["url"].startswith("https://github.com/")
    assert (tight.PLAN / d["config"]).is_file()


def test_the_batch_meets_the_bar_and_no_launch_that_ran_has_a_zero_high_end() -> None:
    """≥ 80 % within 5 % of the printed tokens, and every launch (all of them ran) has a band whose
    high end starts."""
    within, zero_high = [], []
    for la in LAUNCHES:
        mp = tight.plan_of(la)
        assert mp.current is not None and mp.weights_source == "config"
        err = (mp.current.max_total_num_tokens - la.kv_tokens) / la.kv_tokens
        within.append(abs(err) <= tight.BAND)
        band = tight.band_of(mp)
        assert band is not None
        if band[1] <= 0:
            zero_high.append(la.name)
    assert sum(within) >= tight.SHARE * len(LAUNCHES), within
    assert not zero_high


# The two terms issue36b changed, as properties (hypothesis): each moves the plan only the way the
# engine's own arithmetic does.

H100 = "NVIDIA H100 80GB HBM3"
CONFIGS = {  # unquantized checkpoints (configs the batches plan from) and one FP8-serialized one
    "llama-3.1-8b": "../../models/llama-3.1-8b/config.json",
    "qwen2.5-7b": "../../models/qwen2.5-7b/config.json",
    "qwen2.5-72b": "configs/qwen2.5-72b-instruct/config.json",
    "deepseek-v2-lite": "configs/deepseek-v2-lite-chat/config.json",
    "qwen1.5-moe": "configs/qwen1.5-moe-a2.7b/config.json",
    "qwen2.5-7b-fp8-dynamic": "configs/qwen2.5-7b-instruct-fp8-dynamic/config.json",
}


def _cfg(name: str) -> tuple[ModelConfig, WeightIndex]:
    return tight.model_of(CONFIGS[name], name)


def _plan(name: str, flags: dict, version: str = "0.19.0") -> MemoryPlan:
    cfg, w = _cfg(name)
    return vplan.plan(cfg, w, GpuFacts(79.19, name=H100),
                      vplan.settings_from_flags({"max_model_len": 8192, "gpu_memory_utilization": 0.95, **flags}, version))


def _tokens(mp: MemoryPlan) -> tuple[int, int, int]:
    cur = mp.current
    assert cur is not None
    lo, hi = tight.band_of(mp) or (cur.max_total_num_tokens, cur.max_total_num_tokens)
    return lo, cur.max_total_num_tokens, hi


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(CONFIGS)), tp=st.sampled_from((1, 2, 4)), util=st.sampled_from((0.5, 0.8, 0.95)),
       quant=st.sampled_from(("fp8", "fp8_per_tensor", "fp8_per_block")), version=st.sampled_from(("0.19.0", "0.33.0")))
def test_online_fp8_never_loads_more_and_never_gives_fewer_tokens(name: str, tp: int, util: float, quant: str,
                                                                   version: str) -> None:
    """vLLM's online FP8 (fp8.py / quantization/online/fp8.py) stores LinearBase and expert weights
    in one byte: the weights per rank never grow and the KV tokens (point, low and high end) never
    shrink; over a checkpoint already quantized the flag changes nothing (vLLM reads the stored format)."""
    flags = {"tensor_parallel_size": tp, "gpu_memory_utilization": util}
    base, fp8 = _plan(name, flags, version), _plan(name, {**flags, "quantization": quant}, version)
    assert fp8.weights_gib_per_rank <= base.weights_gib_per_rank + 1e-9
    if _cfg(name)[0].quant.method != "none":
        assert fp8.weights_gib_per_rank == base.weights_gib_per_rank
    if base.current is not None and fp8.current is not None:
        assert all(a <= b for a, b in zip(_tokens(base), _tokens(fp8), strict=True))


def test_online_fp8_lands_on_the_llama_log() -> None:
    """The qfp8 log: 'Model loading took 8.49 GiB' over a 14.99 GiB bf16 checkpoint — the linear
    layers at one byte, the embedding and the head at two."""
    la = next(la for la in LAUNCHES if la.name == "llama-3.1-8b-quantization-fp8")
    mp = tight.plan_of(la)
    assert abs(mp.weights_gib_per_rank - la.doc["measured_gib"]["weights"]) < 0.05


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(CONFIGS)), tp=st.sampled_from((1, 2, 4)), seqs=st.integers(1, 1024),
       batched=st.integers(1, 16384), more=st.integers(0, 16384), wide=st.sampled_from((2, 4)))
def test_the_profile_peak_never_shrinks_with_more_batched_tokens_or_a_wider_dtype(
        name: str, tp: int, seqs: int, batched: int, more: int, wide: int) -> None:
    """`profile_run` holds the dummy forward's hidden states (max_num_batched_tokens × hidden × dtype)
    under `_dummy_sampler_run`, and the logits leave the head in the model's dtype: a larger batch or
    a wider dtype never lowers the activation term (point or band)."""
    cfg, _ = _cfg(name)
    s = vplan.settings_from_flags({"tensor_parallel_size": tp}, "0.19.0")
    a = activation_term(cfg, s, seqs, batched, 2)
    b = activation_term(cfg, s, seqs, batched + more, 2)
    c = activation_term(cfg, s, seqs, batched, wide)
    assert b.gib >= a.gib and b.lower >= a.lower - 1e-12
    assert c.gib >= a.gib


def test_the_72b_tp2_activation_lands_on_its_log() -> None:
    """Qwen2.5-72B and Kimi-Dev-72B at TP2 log 2.29 GiB, Qwen2.5-7B 2.21 at the same vocabulary:
    the 0.125 GiB of held hidden states at hidden 8192 is the difference."""
    for name in ("qwen2.5-72b-tp2", "kimi-dev-72b-tp2", "qwen2.5-7b-ctx2048"):
        la = next(la for la in LAUNCHES if la.name == name)
        mp = tight.plan_of(la)
        assert abs(mp.terms["activation_peak_gib"] - la.doc["measured_gib"]["activation_peak"]) < 0.03
