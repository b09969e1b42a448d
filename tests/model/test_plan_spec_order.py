"""SGLang's two orders of allocation for a speculative draft (issue 25 item 2), each side of the
release that changed it (0.5.14, checked in the released wheels: 0.5.13's ModelRunner.initialize
sizes the target's pool before the draft worker exists; 0.5.14's Scheduler.init_model_worker loads
both models' weights, then sizes the pools — sgl-project/sglang#28855 after #23862/#28683).

Up to 0.5.13 the draft's weights, pool and graphs come out of the headroom and the automatic
--mem-fraction-static holds a flat draft reserve (2 GiB on 0.5.9, 4 GiB on 0.5.10–0.5.13, 6 GiB
for STANDALONE). From 0.5.14 the draft's weights count against --mem-fraction-static (the target's
KV tokens fall), each pool token is budgeted the draft's layers (cell × (1 + draft layers / target
layers), pool_configurator.DefaultPoolConfigurator), and the flat reserve is gone."""

from __future__ import annotations

import pytest

from cockpit.backends.sglang import plan as splan
from cockpit.backends.sglang.memory import default_mfs
from cockpit.model.plan import GpuFacts, MemoryPlan
from cockpit.model.weights import GIB
from tests.data.models import synth
from tests.model.test_plan_spec import _eagle_head, _facts

H100_MIB = 81559


def _eagle_plans(version: str) -> tuple[MemoryPlan, MemoryPlan]:
    llama = _facts(synth.load_config("llama-3.1-8b"), "llama")
    draft = _facts(_eagle_head(), "eagle")
    gpu = GpuFacts(79.6)
    flags = {"mem_fraction_static": 0.85}
    plain = splan.plan(llama.config, llama.weights, gpu, splan.settings_from_flags(flags, version))
    spec = splan.plan(llama.config, llama.weights, gpu, splan.settings_from_flags(
        {**flags, "speculative_algorithm": "EAGLE", "speculative_draft_model_path": "/d", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}, version), draft=draft)
    return plain, spec


def test_up_to_0_5_13_the_draft_comes_out_of_the_headroom() -> None:
    assert not splan.draft_weights_in_static("0.5.13") and splan.draft_weights_in_static("0.5.14")
    plain, spec = _eagle_plans("0.5.13")
    assert plain.current and spec.current
    assert spec.current.max_total_num_tokens == plain.current.max_total_num_tokens  # the pool does not move
    assert spec.terms["after_weights_avail_gib"] == pytest.approx(plain.terms["after_weights_avail_gib"])
    t = spec.terms
    drop = plain.current.headroom_after_capture_gib - spec.current.headroom_after_capture_gib
    target_more = t["graph_gib"] - plain.terms["graph_gib"]  # the target's verify graphs (4 tokens per request)
    assert target_more > 0
    assert drop == pytest.approx(t["draft_weights_gib"] + t["draft_kv_gib"] + t["draft_graph_gib"] + target_more, abs=1e-6)
    assert t["draft_pool_tokens"] == spec.current.max_total_num_tokens  # draft_runner_cache_size = max_total_num_tokens
    assert "draft_budget_bytes_per_token" not in t


def test_from_0_5_14_draft_weights_count_against_mfs_and_the_pool_budgets_the_draft() -> None:
    plain, spec = _eagle_plans("0.5.14")
    assert plain.current and spec.current
    t = spec.terms
    cell = plain.kv_bytes_per_token  # Llama-3.1-8B bf16: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B
    assert cell == 131072 and spec.kv_bytes_per_token == cell
    # one draft layer over the target's 32: SGLang budgets int(cell × (1 + 1/32)) − cell more per token
    assert t["draft_budget_bytes_per_token"] == int(cell * (1 + 1 / 32)) - cell == 4096
    # the draft's weights are resident when the pool is profiled: A falls by them, so does the pool
    assert t["after_weights_avail_gib"] == pytest.approx(plain.terms["after_weights_avail_gib"] - t["draft_weights_gib"])
    kv = spec.current.kv_gib
    assert kv == pytest.approx(plain.current.kv_gib - t["draft_weights_gib"])
    assert spec.current.max_total_num_tokens == int(kv * GIB / (cell + 4096))
    fewer = plain.current.max_total_num_tokens - spec.current.max_total_num_tokens
    by_weights = t["draft_weights_gib"] * GIB / (cell + 4096)  # "draft weights / cell bytes"
    by_share = plain.current.max_total_num_tokens * 4096 / (cell + 4096)  # the draft's share of each token
    assert fewer == pytest.approx(by_weights + by_share, abs=2)
    # the draft's pool holds the target's tokens, inside the static budget: only its graphs leave the headroom
    assert t["draft_pool_tokens"] == spec.current.max_total_num_tokens
    assert t["draft_kv_gib"] == pytest.approx(spec.current.max_total_num_tokens * 4096 / GIB)
    head_plain_same_tokens = (plain.terms["pre_load_avail_gib"] * 0.15 - t["req_to_token_gib"]
                              - splan.ATTN_WORKSPACE_GIB - t["graph_gib"])
    assert spec.current.headroom_after_capture_gib == pytest.approx(head_plain_same_tokens - t["draft_graph_gib"], abs=1e-6)
    assert spec.current.headroom_after_capture_gib > (plain.current.headroom_after_capture_gib - t["draft_graph_gib"]
                                                      - (t["graph_gib"] - plain.terms["graph_gib"]) - 0.01)
    assert any("since 0.5.14" in n and "count against --mem-fraction-static" in n for n in spec.notes)
    # the floor under --mem-fraction-static carries the draft's weights (SGLang's "minimum viable")
    assert t["mfs_floor"] > plain.terms["mfs_floor"]


def test_nextn_on_0_5_14_budgets_one_mla_layer_per_token() -> None:
    ds = _facts(synth.load_config("deepseek-v3"), "deepseek-v3")
    flags = {"tp_size": 8, "mem_fraction_static": 0.88}
    spec_flags = {**flags, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                  "speculative_num_draft_tokens": 4}
    old = splan.plan(ds.config, ds.weights, GpuFacts(139.8), splan.settings_from_flags(spec_flags, "0.5.13"))
    new = splan.plan(ds.config, ds.weights, GpuFacts(139.8), splan.settings_from_flags(spec_flags, "0.5.14"))
    assert old.current and new.current
    cell = new.kv_bytes_per_token
    assert cell == 61 * 1152  # 61 MLA layers of (512 + 64) × 2 B
    assert new.terms["draft_budget_bytes_per_token"] == int(cell * (1 + 1 / 61)) - cell
    assert new.current.max_total_num_tokens < old.current.max_total_num_tokens
    assert new.current.kv_gib == pytest.approx(old.current.kv_gib - new.terms["draft_weights_gib"])
    assert new.current.headroom_after_capture_gib > old.current.headroom_after_capture_gib  # weights moved into the static part


@pytest.mark.parametrize(("version", "algo", "extra"), [
    ("0.5.9", "EAGLE", 2048), ("0.5.9", "STANDALONE", 6144), ("0.5.10", "EAGLE", 4096), ("0.5.13", "NEXTN", 4096),
    ("0.5.13", "STANDALONE", 6144), ("0.5.13", "NGRAM", 0), ("0.5.14", "EAGLE", 0), ("0.5.14", "STANDALONE", 0),
    ("0.5.22", "EAGLE3", 0),
])
def test_the_automatic_mfs_holds_the_flat_draft_reserve_until_0_5_14(version: str, algo: str, extra: int) -> None:
    base = default_mfs(H100_MIB, version=version, tp=8).reserve_mib
    assert base is not None
    assert default_mfs(H100_MIB, version=version, tp=8, speculative_algorithm=algo).reserve_mib == base + extra


def test_up_to_0_5_6_the_draft_pool_also_holds_in_flight_draft_and_verify_tokens() -> None:
    """0.5.6's model_runner sized the draft pool tokens + reqs·steps·topk + reqs·draft_tokens + 100;
    0.5.7 gave it the target's tokens (checked in both wheels)."""
    old = _eagle_plans("0.5.6")[1]
    new = _eagle_plans("0.5.7")[1]
    assert old.current and new.current
    tok = old.current.max_total_num_tokens
    reqs = min(max(int(tok / 131072 * 512), 2048), 4096)  # Llama-3.1-8B's 131072-token context
    assert old.terms["draft_pool_tokens"] == tok + reqs * 3 * 1 + reqs * 4 + 100
    assert new.terms["draft_pool_tokens"] == new.current.max_total_num_tokens
