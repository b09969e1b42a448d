"""Speculative decoding in the memory plan: the draft's weights, KV pool and graphs.

SGLang builds the draft worker after the target's pool and graphs, so the draft comes out of the
headroom (the target's KV tokens do not move); its pool holds the target's tokens
(draft_runner_cache_size; in-flight draft/verify tokens too before 0.5.7: tests/model/test_plan_spec_order.py). vLLM loads the drafter inside load_model and gives
its attention layers KV like the target's, so the draft moves the KV tokens. Models: published
configs (tests/data/models), an EAGLE head of Llama-3.1-8B's shape (one decoder layer), and the
CLI on directories holding only config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit.backends.sglang import plan as splan
from cockpit.backends.vllm import plan as vplan
from cockpit.model.config import parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.plan import GpuFacts
from cockpit.model.read import ModelFacts
from cockpit.model.weights import GIB
from tests.data.models import synth
from tests.model.test_plan import cockpit


def _facts(raw: dict, name: str) -> ModelFacts:
    cfg = parse_config(raw, name, name=name)
    return ModelFacts(name, cfg, estimate_index(cfg, raw))


def _eagle_head() -> dict:
    raw = dict(synth.load_config("llama-3.1-8b"))
    raw.update({"architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1})
    return raw


def test_sglang_nextn_draft_comes_out_of_the_headroom_not_the_pool() -> None:
    ds = _facts(synth.load_config("deepseek-v3"), "deepseek-v3")
    gpu = GpuFacts(139.8)
    flags = {"tp_size": 8, "mem_fraction_static": 0.88}
    plain = splan.plan(ds.config, ds.weights, gpu, splan.settings_from_flags(flags, "0.5.9"))
    spec = splan.plan(ds.config, ds.weights, gpu, splan.settings_from_flags(
        {**flags, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 4}, "0.5.9"))
    assert plain.current and spec.current
    assert spec.current.max_total_num_tokens == plain.current.max_total_num_tokens
    assert spec.weights_gib_per_rank == pytest.approx(plain.weights_gib_per_rank)  # the target never loads the MTP layer
    t = spec.terms
    tok = spec.current.max_total_num_tokens
    assert t["draft_pool_tokens"] == tok  # 0.5.9: draft_runner_cache_size = max_total_num_tokens
    assert t["draft_kv_bytes_per_token"] == (512 + 64) * 1 * 2  # one MLA layer, bf16
    assert t["draft_kv_gib"] == pytest.approx(t["draft_pool_tokens"] * 1152 / GIB)
    # one MoE layer of 256 fp8 experts split over 8 ranks, plus its attention; not its embedding or head
    assert 0.8 < t["draft_weights_gib"] < 1.6
    drop = plain.current.headroom_after_capture_gib - spec.current.headroom_after_capture_gib
    # the target captures verify graphs (4 draft tokens per request, SGLang's speculative batch list): more
    # than its plain decode graphs (cuda_graph_runner: num_tokens_per_bs = speculative_num_draft_tokens)
    target_more = t["graph_gib"] - plain.terms["graph_gib"]
    assert target_more > 0
    assert drop == pytest.approx(t["draft_weights_gib"] + t["draft_kv_gib"] + t["draft_graph_gib"] + target_more, abs=1e-6)
    assert any("after the target's graphs" in n for n in spec.notes)


def test_sglang_eagle_reads_the_draft_model_it_is_given() -> None:
    llama = _facts(synth.load_config("llama-3.1-8b"), "llama")
    draft = _facts(_eagle_head(), "eagle")
    gpu = GpuFacts(79.6)
    s = splan.settings_from_flags({"mem_fraction_static": 0.85, "speculative_algorithm": "EAGLE",
                                   "speculative_draft_model_path": "/d"}, "0.5.9")
    with_draft = splan.plan(llama.config, llama.weights, gpu, s, draft=draft)
    t = with_draft.terms
    # one Llama decoder layer (218 M parameters, bf16); EAGLE takes the target's embedding and head
    assert t["draft_weights_gib"] == pytest.approx(218_112_000 * 2 / GIB, rel=0.01)
    assert t["draft_kv_bytes_per_token"] == 8 * 128 * 2 * 1 * 2
    unread = splan.plan(llama.config, llama.weights, gpu, s)
    assert "draft_weights_gib" not in unread.terms
    assert any("was not read" in n for n in unread.notes)
    assert any("unset: planned with SGLang's generic 3 steps" in n for n in with_draft.notes)


def test_vllm_drafter_loads_with_the_model_and_shares_the_kv_budget() -> None:
    llama = _facts(synth.load_config("llama-3.1-8b"), "llama")
    draft = _facts(_eagle_head(), "eagle")
    gpu = GpuFacts(79.19, name="NVIDIA H100 80GB HBM3")
    base = {"gpu_memory_utilization": 0.9, "max_model_len": 8192}
    plain = vplan.plan(llama.config, llama.weights, gpu, vplan.settings_from_flags(base, "0.19.0"))
    spec = vplan.plan(llama.config, llama.weights, gpu, vplan.settings_from_flags(
        {**base, "speculative_config": json.dumps({"method": "eagle", "model": "/d", "num_speculative_tokens": 3})}, "0.19.0"),
        draft=draft)
    assert spec.weights_gib_per_rank - plain.weights_gib_per_rank == pytest.approx(218_112_000 * 2 / GIB, rel=0.01)
    assert spec.kv_bytes_per_token == plain.kv_bytes_per_token + 8 * 128 * 2 * 2  # 32 target layers + 1 draft layer
    assert plain.current and spec.current and spec.current.max_total_num_tokens < plain.current.max_total_num_tokens


def test_vllm_mtp_uses_the_checkpoints_own_layers() -> None:
    ds = _facts(synth.load_config("deepseek-v3"), "deepseek-v3")
    gpu = GpuFacts(139.8)
    base = {"gpu_memory_utilization": 0.9, "max_model_len": 32768, "tensor_parallel_size": 8}
    plain = vplan.plan(ds.config, ds.weights, gpu, vplan.settings_from_flags(base, "0.19.0"))
    spec = vplan.plan(ds.config, ds.weights, gpu, vplan.settings_from_flags(
        {**base, "speculative_config": {"method": "deepseek_mtp", "num_speculative_tokens": 1}}, "0.19.0"))
    assert spec.kv_bytes_per_token == plain.kv_bytes_per_token + 576 * 2
    assert 0.8 < spec.weights_gib_per_rank - plain.weights_gib_per_rank < 1.6


def test_the_cli_reads_the_draft_directory(tmp_path: Path) -> None:
    target, draft = tmp_path / "llama", tmp_path / "eagle"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps(synth.load_config("llama-3.1-8b")))
    (draft / "config.json").write_text(json.dumps(_eagle_head()))
    res = cockpit("plan", "--model-config", str(target), "--gpu-mem-gb", "79.6", "--tp", "1", "--set", "speculative-algorithm=EAGLE",
                  "--set", f"speculative-draft-model-path={draft}", "--set", "speculative-num-steps=3", "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    terms = json.loads(res.stdout)["terms_gib"]
    assert terms["draft_weights_gib"] == pytest.approx(0.406, abs=0.01) and terms["draft_kv_gib"] > 0
    bad = cockpit("plan", "--model-config", str(target), "--gpu-mem-gb", "79.6", "--tp", "1", "--set", "speculative-algorithm=NEXTN",
                  env_root=tmp_path)
    assert bad.returncode == 2 and "num_nextn_predict_layers" in bad.stderr
