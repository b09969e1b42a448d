"""SGLang's CUDA-graph term from the batch sizes it captures (issue 36).

The capture list follows SGLang's own rules (cockpit/backends/sglang/terms.py `decode_capture_sizes`:
server_args `_generate_cuda_graph_batch_sizes` in 0.5.9, `generate_decode_cuda_graph_batch_sizes` in
0.5.23, cuda_graph_runner `get_batch_sizes_to_capture`); the memory is the logits buffer and the
attention index table at the largest size, plus a per-graph cost fitted to the real logs'
`Capture cuda graph end … mem usage`. SGLang sizes its pool before the graphs (KV = P·mfs − W), so the
directions that hold are: the graphs never change the pool at a given mfs, more or larger graphs never
leave more headroom, and through SGLang's automatic mfs never more KV tokens.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.sglang import plan as splan
from cockpit.backends.sglang.terms import decode_capture_sizes, graph_term
from cockpit.model.config import parse_config
from cockpit.model.plan import GpuFacts, MemoryPlan
from cockpit.model.weights import Tensor, index_from_headers
from tests.data.models import synth

H100 = GpuFacts(79.19, name="NVIDIA H100 80GB HBM3")
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "deepseek-v3")


def _plan(name: str, flags: dict, version: str = "0.5.9", gpu: GpuFacts = H100) -> MemoryPlan:
    raw = synth.load_config(name)
    cfg = parse_config(raw, name, name=name)
    idx = index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)
    tp = 8 if name == "deepseek-v3" else 1
    return splan.plan(cfg, idx, gpu, splan.settings_from_flags({"tp_size": tp, **flags}, version))


def test_the_capture_list_is_sglangs() -> None:
    """52 sizes at 512 and 36 at 256 (the reference's count); 0.5.23 appends a largest size the list
    misses, 0.5.9 does not; the speculative list is finer; --cuda-graph-bs replaces the list; the request
    table's rows cut it and are captured themselves (the DeepSeek-R1 decode log: up to 128, 20 sizes)."""
    assert len(decode_capture_sizes(512, "0.5.9")) == 52
    assert len(decode_capture_sizes(256, "0.5.9")) == 36
    assert decode_capture_sizes(100, "0.5.9")[-1] == 96
    assert decode_capture_sizes(100, "0.5.23")[-1] == 100
    assert decode_capture_sizes(16, "0.5.9", speculative=True) == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
    assert decode_capture_sizes(512, "0.5.9", given=(4, 1, 2)) == (1, 2, 4)
    logged = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128)
    assert decode_capture_sizes(512, "0.5.9", table_rows=128) == logged
    assert decode_capture_sizes(512, "0.5.9", table_rows=100)[-2:] == (96, 100)
    p = _plan("deepseek-v3", {"mem_fraction_static": 0.8, "max_running_requests": 128})
    assert p.terms["cuda_graph_sizes"] == 20 and p.terms["cuda_graph_max_bs"] == 128


# The three real logs that print graph memory (tests/data/real/plan/sglang/): sizes, vocabulary,
# context, layers per rank, and `Capture cuda graph end … mem usage` (GiB).
REAL = (
    ("Llama-3.1-8B, RTX 4090", (1, 2, 4, 8), 128256, 131072, 32, 0.11),
    ("QwQ-32B TP4, L4", decode_capture_sizes(80, "0.5.9"), 152064, 131072, 64, 0.93),
    ("DeepSeek-R1 TP16 decode", decode_capture_sizes(512, "0.5.9", table_rows=128), 129280, 163840, 61, 0.83),
)


@pytest.mark.parametrize("case", REAL, ids=[c[0] for c in REAL])
def test_the_graph_term_lands_on_the_real_logs(case: tuple) -> None:
    _name, sizes, vocab, ctx, layers, logged = case
    g = graph_term(sizes, vocab=vocab, context=ctx, layers=layers)
    assert g.gib - g.low <= logged <= g.gib + g.high
    assert abs(g.gib - logged) < 0.3  # residuals: +0.00 (4090), −0.15 (L4), +0.26 (DeepSeek-R1)


def test_beyond_the_fitted_range_the_band_widens() -> None:
    """52 graphs at 512 (SGLang's default on an 80 GB card at TP ≥ 4) are outside the logs' range: the
    band is wider both ways than the 20-graph capture's."""
    near = graph_term(decode_capture_sizes(128, "0.5.9"), vocab=128256, context=131072, layers=80)
    far = graph_term(decode_capture_sizes(512, "0.5.9"), vocab=128256, context=131072, layers=80)
    assert far.gib > near.gib
    assert far.low / far.gib > near.low / near.gib and far.high / far.gib > near.high / near.gib
    assert graph_term((), vocab=128256, context=131072, layers=80).gib == 0.0


SIZES = st.lists(st.integers(1, 768), min_size=1, max_size=40, unique=True)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS), a=SIZES, b=SIZES, version=st.sampled_from(("0.5.9", "0.5.23")),
       auto=st.booleans())
def test_more_capture_sizes_never_predict_more(name: str, a: list[int], b: list[int], version: str, auto: bool) -> None:
    """A capture list that holds another never leaves more headroom and never gets more KV tokens (with
    SGLang's automatic mfs its reserve grows with the largest size; with mfs given the pool is the same)."""
    flag = "cuda_graph_bs_decode" if version == "0.5.23" else "cuda_graph_bs"
    base = {} if auto else {"mem_fraction_static": 0.85}
    small = _plan(name, {**base, flag: sorted(a)}, version)
    large = _plan(name, {**base, flag: sorted(set(a) | set(b))}, version)
    assert small.current and large.current
    assert large.current.max_total_num_tokens <= small.current.max_total_num_tokens
    assert large.current.low <= small.current.low and large.current.high <= small.current.high
    assert large.terms["graph_gib"] >= small.terms["graph_gib"]
    if not auto:
        assert large.current.max_total_num_tokens == small.current.max_total_num_tokens
        assert large.current.headroom_after_capture_gib <= small.current.headroom_after_capture_gib + 1e-9


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(MODELS), top=st.integers(1, 1024), more=st.integers(0, 1024),
       version=st.sampled_from(("0.5.9", "0.5.23")))
def test_a_larger_max_bs_never_predicts_more(name: str, top: int, more: int, version: str) -> None:
    flag = "cuda_graph_max_bs_decode" if version == "0.5.23" else "cuda_graph_max_bs"
    small = _plan(name, {flag: top}, version)
    large = _plan(name, {flag: top + more}, version)
    assert small.current and large.current
    assert large.current.max_total_num_tokens <= small.current.max_total_num_tokens
    fixed = {"mem_fraction_static": 0.85}
    s2, l2 = _plan(name, {**fixed, flag: top}, version), _plan(name, {**fixed, flag: top + more}, version)
    assert s2.current and l2.current
    assert l2.current.headroom_after_capture_gib <= s2.current.headroom_after_capture_gib + 1e-9


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("auto", [True, False])
def test_disabling_graphs_never_predicts_fewer_tokens(name: str, version: str, auto: bool) -> None:
    """--disable-cuda-graph: no graph term; with SGLang's automatic mfs 0.5.23 also drops the graph
    reserve (more tokens), 0.5.9 keeps it (the same); with mfs given the headroom only grows."""
    base = {} if auto else {"mem_fraction_static": 0.85}
    on = _plan(name, base, version)
    off = _plan(name, {**base, "disable_cuda_graph": True}, version)
    assert on.current and off.current
    assert off.terms["graph_gib"] == 0.0
    assert off.current.max_total_num_tokens >= on.current.max_total_num_tokens
    if not auto:
        assert off.current.max_total_num_tokens == on.current.max_total_num_tokens
        assert off.current.headroom_after_capture_gib >= on.current.headroom_after_capture_gib


def test_graphs_that_do_not_fit_the_reserve_are_named() -> None:
    """At 0.95 on an H100, Llama-3.1-8B's 52 graphs (TP8 gets SGLang's 512) do not fit in what mfs leaves
    at the high end: the plan says so, and the pool is the same as without graphs."""
    raw = synth.load_config("llama-3.1-8b")
    cfg = parse_config(raw, "llama-3.1-8b", name="llama-3.1-8b")
    idx = index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)
    s = splan.settings_from_flags({"tp_size": 8, "mem_fraction_static": 0.95}, "0.5.9")
    p = splan.plan(cfg, idx, H100, s)
    assert p.current is not None
    assert any("CUDA graphs:" in n and "do not fit" in n for n in p.notes) or p.current.headroom_after_capture_gib < 0


# ---- the ROCm reserve (issue 36) ---------------------------------------------------------------

MI355X = "AMD Instinct MI355X"


def test_rocm_quick_reduce_buffer_is_twice_its_largest_problem() -> None:
    """Off unless the environment names a quantization; then 2 × 2048 MB per rank, or twice the max set."""
    from cockpit.backends.vllm import plan as vplan
    from cockpit.model.platform import quick_reduce_gib

    def vllm(env: dict[str, str]) -> float:
        return quick_reduce_gib(env, vplan.QUICK_REDUCE_ENV, vplan.QUICK_REDUCE_MAX_ENV)

    def sglang(env: dict[str, str]) -> float:
        return quick_reduce_gib(env, splan.QUICK_REDUCE_ENV, splan.QUICK_REDUCE_MAX_ENV)

    assert vllm({}) == vllm({"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "NONE"}) == 0.0
    assert vllm({"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4"}) == 4.0
    assert sglang({"ROCM_QUICK_REDUCE_QUANTIZATION": "fp", "ROCM_QUICK_REDUCE_MAX_SIZE_BYTES_MB": "512"}) == 1.0
    assert sglang({"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4"}) == 0.0  # SGLang reads its own name


def test_the_mi355x_log_lies_inside_the_rocm_band() -> None:
    """Kimi-K2.5 TP8 on MI355X (bench/plan_accuracy.py): P 283.53 on a 288 GiB card. The point (the CUDA
    estimate + HIP's custom all-reduce buffers) misses it by about 3 GiB — recorded, not fitted — and
    the band's low end reaches it."""
    from cockpit.backends.sglang.terms import pre_load_term
    from cockpit.model.platform import platform_of

    p = pre_load_term(GpuFacts(288.0, name=MI355X), 8, platform_of(MI355X, 288.0))
    assert 2.5 < p.gib - 283.53 < 3.5
    assert p.gib - p.low <= 283.53 <= p.gib + p.high


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_sglang_quick_reduce_only_ever_takes_from_the_pool(tp: int) -> None:
    """ROCm's quick all-reduce is allocated before the weights: P falls by its buffer at TP 2/4/8, so
    the pool never grows; at TP1 (and on NVIDIA cards) nothing changes."""
    raw = synth.load_config("llama-3.1-8b")
    cfg = parse_config(raw, "llama-3.1-8b", name="llama-3.1-8b")
    idx = index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)
    s = splan.settings_from_flags({"tp_size": tp, "mem_fraction_static": 0.85}, "0.5.9")
    on = splan.dataclasses.replace(s, env=(("ROCM_QUICK_REDUCE_QUANTIZATION", "INT4"),))
    for gpu, moves in ((GpuFacts(192.0, name="AMD Instinct MI300X"), tp > 1), (H100, False)):
        a, b = splan.plan(cfg, idx, gpu, s), splan.plan(cfg, idx, gpu, on)
        assert a.current and b.current
        assert b.current.max_total_num_tokens <= a.current.max_total_num_tokens
        assert (b.terms["pre_load_avail_gib"] < a.terms["pre_load_avail_gib"] - 3.9) is moves
        assert any("quick all-reduce" in n for n in b.notes) is moves


def test_vllm_quick_reduce_leaves_the_budget_and_takes_the_headroom() -> None:
    """vLLM allocates it at distributed init, before its start snapshot: u × total and the KV tokens
    do not move, the free memory after start-up is 4 GiB less (TP2 on an MI300X)."""
    import json

    import bench.plan_tight as tight
    from cockpit.backends.vllm import plan as vplan
    from cockpit.model.estimate import estimate_index

    raw = json.loads((tight.PLAN / "configs/llama-3.2-3b/config.json").read_text())
    cfg = parse_config(raw, "config.json", name="llama")
    gpu = GpuFacts(191.5, name="AMD Instinct MI300X")
    flags = {"tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.9}
    off = vplan.plan(cfg, estimate_index(cfg, raw), gpu, vplan.settings_from_flags(flags, "0.19.0"))
    on = vplan.plan(cfg, estimate_index(cfg, raw), gpu,
                    vplan.settings_from_flags(flags, "0.19.0", {"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4"}))
    assert off.current and on.current
    assert on.current.max_total_num_tokens == off.current.max_total_num_tokens
    assert on.current.headroom_after_capture_gib == pytest.approx(off.current.headroom_after_capture_gib - 4.0, abs=1e-6)
    assert any("quick all-reduce" in n for n in on.notes)
