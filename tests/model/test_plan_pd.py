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
from tests.model.test_plan import cockpit


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


def _vllm_plan(kv: dict[str, object]) -> object:
    raw = synth.load_config("qwen3-32b")
    cfg = parse_config(raw)
    return vplan.plan(cfg, estimate_index(cfg, raw), GpuFacts(79.6), vplan.settings_from_flags(
        {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "kv_transfer_config": kv}, "0.19.0"))


def test_vllm_p2p_nccl_buffers_come_out_of_the_free_memory_not_the_kv_cache() -> None:
    """P2pNcclConnector keeps transferred KV on the GPU up to kv_buffer_size (vLLM's default 1e9 B):
    the KV cache is sized as before and the free memory after start-up is that much smaller; NIXL
    registers the KV cache itself and holds nothing more."""
    nixl = _vllm_plan({"kv_connector": "NixlConnector", "kv_role": "kv_consumer"})
    p2p = _vllm_plan({"kv_connector": "P2pNcclConnector", "kv_role": "kv_consumer"})
    big = _vllm_plan({"kv_connector": "P2pNcclConnector", "kv_role": "kv_consumer", "kv_buffer_size": 8e9})
    host = _vllm_plan({"kv_connector": "P2pNcclConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cpu"})
    for mp in (nixl, p2p, big, host):
        assert mp.current.max_total_num_tokens == nixl.current.max_total_num_tokens  # type: ignore[attr-defined]
    head = nixl.current.headroom_after_capture_gib  # type: ignore[attr-defined]
    assert p2p.current.headroom_after_capture_gib == pytest.approx(head - 1e9 / 2**30)  # type: ignore[attr-defined]
    assert big.current.headroom_after_capture_gib == pytest.approx(head - 8e9 / 2**30)  # type: ignore[attr-defined]
    assert host.current.headroom_after_capture_gib == pytest.approx(head)  # type: ignore[attr-defined]
    assert p2p.terms["kv_transfer_buffer_gib"] == pytest.approx(0.93, abs=0.01) and "kv_transfer_buffer_gib" not in nixl.terms  # type: ignore[attr-defined]
    assert any("registers the KV cache itself" in n for n in nixl.notes)  # type: ignore[attr-defined]
    assert any("P2pNcclConnector: up to 7.45 GiB" in n for n in big.notes)  # type: ignore[attr-defined]


def test_a_bad_kv_buffer_size_is_named() -> None:
    from cockpit.model.config import ModelConfigError

    with pytest.raises(ModelConfigError, match="kv_buffer_size"):
        vplan.settings_from_flags({"kv_transfer_config": {"kv_connector": "P2pNcclConnector", "kv_buffer_size": "lots"}}, "0.19.0")


def test_a_sglang_decode_server_with_few_requests_pre_allocates_request_rows() -> None:
    """DecodeReqToTokenPool: with max_running_requests ≤ 32 a decode server's request table holds
    2 × more rows for requests whose KV is still in flight; with more, none (SGLang's own rule)."""
    raw = synth.load_config("qwen3-32b")
    cfg = parse_config(raw)
    w = estimate_index(cfg, raw)

    def row(mode: str | None, reqs: int) -> float:
        flags: dict[str, object] = {"tp_size": 2, "mem_fraction_static": 0.85, "max_running_requests": reqs}
        if mode:
            flags["disaggregation_mode"] = mode
        return splan.plan(cfg, w, GpuFacts(79.6), splan.settings_from_flags(flags, "0.5.9")).terms["req_to_token_gib"]

    assert row("decode", 32) == pytest.approx(3 * row(None, 32))
    assert row("decode", 64) == pytest.approx(row(None, 64))
    assert row("prefill", 32) == pytest.approx(row(None, 32))


def test_the_graph_batch_stops_at_the_request_table() -> None:
    """A real decode server (tests/data/real/plan/sglang/devopsrustem-slurmv4-decode-deepseek-r1-tp16:
    DeepSeek-R1, TP16 on H100s, --max-running-requests 128) captured `bs [1, 2, 4, … 120, 128]`: SGLang
    keeps only the batch sizes up to the request table's rows, where the plan had taken the card's
    default of 512 and so 0.66 GiB more graph memory."""
    raw = synth.load_config("deepseek-v3")
    cfg = parse_config(raw)
    w = estimate_index(cfg, raw)
    flags = {"tp_size": 16, "mem_fraction_static": 0.8, "disaggregation_mode": "decode"}
    free = splan.plan(cfg, w, GpuFacts(79.65), splan.settings_from_flags(flags, "0.5.8"))
    capped = splan.plan(cfg, w, GpuFacts(79.65), splan.settings_from_flags({**flags, "max_running_requests": 128}, "0.5.8"))
    assert free.terms["cuda_graph_max_bs"] == 512
    assert capped.terms["cuda_graph_max_bs"] == 128
    assert capped.terms["graph_gib"] < free.terms["graph_gib"]
    # a set graph batch below the table stays as set; with DP attention the table is per DP rank
    small = splan.settings_from_flags({**flags, "max_running_requests": 128, "cuda_graph_max_bs": 64}, "0.5.8")
    assert splan.plan(cfg, w, GpuFacts(79.65), small).terms["cuda_graph_max_bs"] == 64
    dpa = splan.settings_from_flags({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True,
                                     "max_running_requests": 256}, "0.5.9")
    assert splan.plan(cfg, w, GpuFacts(139.8), dpa).terms["cuda_graph_max_bs"] == 32
