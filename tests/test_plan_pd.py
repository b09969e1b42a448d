"""Prefill/decode disaggregation in the memory plan: the role comes from the server's own flags
(SGLang `--disaggregation-mode`, vLLM `--kv-transfer-config` kv_role), and `cockpit plan A B`
plans a deployment's prefill and decode groups each with its own budget — real subprocesses,
profiles on this machine, a model directory holding only config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit.backends.sglang import plan as splan
from cockpit.backends.vllm import plan as vplan
from cockpit.model.config import parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.plan import GpuFacts
from tests.data.models import synth
from tests.test_plan import cockpit


def test_a_sglang_prefill_server_captures_no_decode_graphs() -> None:
    raw = synth.load_config("qwen3-32b")
    cfg = parse_config(raw)
    w = estimate_index(cfg, raw)
    both = splan.plan(cfg, w, GpuFacts(79.6), splan.settings_from_flags({"tp_size": 2, "mem_fraction_static": 0.85}, "0.5.9"))
    pre = splan.plan(cfg, w, GpuFacts(79.6), splan.settings_from_flags(
        {"tp_size": 2, "mem_fraction_static": 0.85, "disaggregation_mode": "prefill"}, "0.5.9"))
    dec = splan.plan(cfg, w, GpuFacts(79.6), splan.settings_from_flags(
        {"tp_size": 2, "mem_fraction_static": 0.85, "disaggregation_mode": "decode"}, "0.5.9"))
    assert (both.role, pre.role, dec.role) == (None, "prefill", "decode")
    assert pre.terms["graph_gib"] == 0.0 and dec.terms["graph_gib"] == both.terms["graph_gib"] > 0
    assert pre.current and both.current
    assert pre.current.max_total_num_tokens == both.current.max_total_num_tokens  # graphs come after the pool
    assert pre.current.headroom_after_capture_gib == pytest.approx(both.current.headroom_after_capture_gib + both.terms["graph_gib"])


def test_vllm_reads_the_role_from_the_kv_transfer_config() -> None:
    s = vplan.settings_from_flags({"kv_transfer_config": {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}}, "0.19.0")
    assert s.role == "prefill"
    assert vplan.settings_from_flags({"kv_transfer_config": '{"kv_role": "kv_consumer"}'}, "0.19.0").role == "decode"


def _profile(tmp_path: Path, name: str, model: Path, mode: str, tp: int) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\nversion: 0.5.9\nhosts:\n  - ssh: local\nserver:\n  model-path: {model}\n  tp: {tp}\n"
                 f"  mem-fraction-static: 0.85\n  disaggregation-mode: {mode}\n  disaggregation-transfer-backend: nixl\n")
    return p


def test_cockpit_plan_plans_each_group_with_its_own_budget(tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(synth.load_config("qwen3-32b")))
    pre = _profile(tmp_path, "pd-prefill", model, "prefill", 2)
    dec = _profile(tmp_path, "pd-decode", model, "decode", 4)
    res = cockpit("plan", str(pre), str(dec), "--gpu-mem-gb", "79.6", "--no-calibration", "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    groups = json.loads(res.stdout)["groups"]
    assert [(g["profile"], g["role"], g["tp"]) for g in groups] == [(str(pre), "prefill", 2), (str(dec), "decode", 4)]
    assert groups[0]["weights_source"] == groups[1]["weights_source"] == "config"
    assert groups[0]["weights_gib_per_rank"] == pytest.approx(2 * groups[1]["weights_gib_per_rank"], rel=0.01)
    assert groups[0]["terms_gib"]["graph_gib"] == 0.0 < groups[1]["terms_gib"]["graph_gib"]
    text = cockpit("plan", str(pre), str(dec), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path).stdout
    assert "group 1 of 2" in text and "group 2 of 2" in text
    assert "· prefill role ·" in text and "· decode role ·" in text
