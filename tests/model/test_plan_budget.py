"""SGLang's budget (cockpit/backends/sglang/plan.py) on published configs, against SGLang's own
arithmetic and the logs: tokens, pool, req_to_token, sliding-window pools, caps, calibration."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.backends.sglang.logparse import read_log
from cockpit.backends.sglang.plan import (
    ATTN_WORKSPACE_GIB,
    Settings,
    cell_bytes,
    plan,
    req_to_token_gib,
    settings_from_flags,
)
from cockpit.model.config import ModelConfig, ModelConfigError, parse_config
from cockpit.model.plan import Calibration, GpuFacts, MemoryPlan
from cockpit.model.weights import GIB, Tensor, WeightIndex, index_from_headers
from tests.data.models import synth

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
H100 = 81559 / 1024


def facts(name: str) -> tuple[ModelConfig, WeightIndex]:
    raw = synth.load_config(name)
    return parse_config(raw, name, name=name), index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)


def test_llama70b_golden_tokens_within_a_percent() -> None:
    """Nothing from the log but the flags: the golden 0.5.9 run's 1,244,811 tokens (the reference's worked example)."""
    cfg, idx = facts("llama-3.1-70b")
    st = read_log(DATA / "sglang-0.5.9-llama70b-tp8-healthy.log")
    s = settings_from_flags({k: v for k, v in st.server_args.items() if k in ("mem_fraction_static", "tp_size", "chunked_prefill_size", "cuda_graph_max_bs")}, "0.5.9")
    mp = plan(cfg, idx, GpuFacts(H100), s)
    assert mp.current is not None and mp.current.value == 0.818
    assert mp.current.max_total_num_tokens == pytest.approx(st.max_total_num_tokens, rel=0.01)
    assert mp.weights_gib_per_rank == pytest.approx(16.49, abs=0.1)
    assert mp.terms["pre_load_avail_gib"] == pytest.approx(78.21, abs=0.1)


def test_default_mfs_is_sglangs_and_said_so() -> None:
    cfg, idx = facts("llama-3.1-70b")
    mp = plan(cfg, idx, GpuFacts(H100), settings_from_flags({"tp_size": 8, "context_length": 131072}, "0.5.23"))
    assert mp.current_is_default and mp.current is not None and mp.current.value == 0.812
    assert any("unset: SGLang 0.5.23 picks 0.812" in n for n in mp.notes)


def test_the_arithmetic_of_one_row() -> None:
    cfg, idx = facts("kimi-k2.5")
    s = Settings("0.5.9", 0.93, tp=8, chunked_prefill_size=8192)
    mp = plan(cfg, idx, GpuFacts(95.6), s)
    p, w = mp.terms["pre_load_avail_gib"], mp.weights_gib_per_rank
    row = mp.current
    assert row is not None
    kv = p * 0.93 - w
    assert row.kv_gib == pytest.approx(kv)
    assert row.max_total_num_tokens == math.floor(kv * GIB / 70272)
    rtt = 2048 * (262144 + 4) * 4 / GIB  # ReqToTokenPool: clamp(T/ctx·512, 2048, 4096) requests, int32
    assert req_to_token_gib(row.max_total_num_tokens, 262144, s) == pytest.approx(rtt)
    assert row.headroom_after_capture_gib == pytest.approx(p * 0.07 - rtt - ATTN_WORKSPACE_GIB - mp.terms["graph_gib"])
    # the δ·P rule between rows: 0.01 of P moves from headroom to the pool
    r92 = next(r for r in mp.rows if r.value == 0.92)
    assert row.headroom_after_capture_gib - r92.headroom_after_capture_gib == pytest.approx(-0.01 * p)
    assert mp.severity == "critical"
    assert mp.recommended is not None and mp.recommended.headroom_after_capture_gib >= 5.0
    nxt = round(mp.recommended.value + 0.01, 2)
    assert all(r.headroom_after_capture_gib < 5.0 for r in mp.rows if r.value >= nxt)


def test_hybrid_sliding_window_pool_and_caps() -> None:
    cfg, idx = facts("gpt-oss-120b")
    base = plan(cfg, idx, GpuFacts(H100), Settings("0.5.9", 0.85, tp=2))
    assert base.kv_bytes_per_token == 36 * 4 * (64 + 64) * 2  # 8 KV heads over 2 ranks, all 36 layers
    cur = base.current
    assert cur is not None
    naive = math.floor(cur.kv_gib * GIB / base.kv_bytes_per_token)
    # set_num_tokens_hybrid_swa: 18 full + 18 sliding layers at swa_full_tokens_ratio 0.8
    assert cur.max_total_num_tokens == int(naive * 36 / (18 + 0.8 * 18))
    capped = plan(cfg, idx, GpuFacts(H100), Settings("0.5.9", 0.85, tp=2, max_total_tokens=100_000, page_size=64))
    assert capped.current is not None and capped.current.max_total_num_tokens == 100_000 // 64 * 64


def test_dp_attention_keeps_mla_whole_and_checks_divisibility() -> None:
    cfg, idx = facts("deepseek-v3")
    tp = plan(cfg, idx, GpuFacts(140.0), Settings("0.5.9", 0.85, tp=8))
    dpa = plan(cfg, idx, GpuFacts(140.0), Settings("0.5.9", 0.85, tp=8, dp=8, ep=8, dp_attention=True))
    assert tp.kv_bytes_per_token == dpa.kv_bytes_per_token == 576 * 61 * 2  # the MLA latent is not split
    assert dpa.weights_gib_per_rank > tp.weights_gib_per_rank  # attention whole on every rank
    with pytest.raises(ModelConfigError, match="must divide"):
        plan(cfg, idx, GpuFacts(140.0), Settings("0.5.9", 0.85, tp=8, dp=3, dp_attention=True))
    fp8 = plan(cfg, idx, GpuFacts(140.0), Settings("0.5.9", 0.85, tp=8, kv_cache_dtype="fp8_e4m3"))
    assert fp8.kv_bytes_per_token == tp.kv_bytes_per_token // 2
    assert fp8.current is not None and tp.current is not None
    assert fp8.current.max_total_num_tokens == pytest.approx(2 * tp.current.max_total_num_tokens, rel=0.001)


def test_no_weights_listed_is_named() -> None:
    cfg, _ = facts("llama-3.1-8b")
    with pytest.raises(ModelConfigError, match="weights' size is unknown"):
        plan(cfg, None, GpuFacts(80.0), Settings("0.5.9", 0.85))


def test_calibration_moves_around_the_measured_point() -> None:
    cfg, idx = facts("kimi-k2.5")
    s = Settings("0.5.9", 0.93, tp=8, chunked_prefill_size=8192)
    cal = Calibration("run-1", 0.88, 58816, 5.51)
    mp: MemoryPlan = plan(cfg, idx, GpuFacts(95.6), s, calibration=cal)
    assert mp.calibrated_from == "run-1"
    r88 = next(r for r in mp.rows if r.value == 0.88)
    assert r88.max_total_num_tokens == 58816 and r88.headroom_after_capture_gib == pytest.approx(5.51)
    p = mp.terms["pre_load_avail_gib"]
    assert mp.current is not None
    assert mp.current.headroom_after_capture_gib == pytest.approx(5.51 - 0.05 * p)
    assert mp.calibration_error["max_total_num_tokens"] > 0  # the estimate saw more KV than the run had
    assert mp.to_json()["calibrated_from"] == "run-1"


def test_plan_of_a_profile_whose_model_is_a_hugging_face_id(tmp_path: Path) -> None:
    """profiles/llama-3.1-70b-h100-tp8.yaml names meta-llama/Llama-3.1-70B-Instruct: found in the HF cache."""
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-70B-Instruct" / "snapshots" / "0123abc"
    synth.write_checkpoint(snap, synth.load_config("llama-3.1-70b"), shards=30, index=True)
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"), XDG_DATA_HOME=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "cockpit", "plan", str(ROOT / "profiles" / "llama-3.1-70b-h100-tp8.yaml"),
                          "--gpu-mem-gb", str(H100), "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["current_is_default"] is True and out["current"]["value"] == 0.812
    golden = read_log(DATA / "sglang-0.5.23-llama70b-tp8-healthy.log")
    assert out["current"]["max_total_num_tokens"] == pytest.approx(golden.max_total_num_tokens, rel=0.01)
    assert cell_bytes(parse_config(synth.load_config("llama-3.1-70b"), "x"), Settings("0.5.23", None, tp=8)) == 40960


def test_a_value_below_the_floor_and_a_model_that_does_not_fit() -> None:
    cfg, idx = facts("kimi-k2.5")
    low = plan(cfg, idx, GpuFacts(95.6), Settings("0.5.9", 0.5, tp=8))
    assert low.current is not None and low.current.max_total_num_tokens == 0
    assert low.severity == "critical"
    assert low.summary().startswith("0.5 leaves no memory for the KV pool: the server refuses to start (the floor is 0.76")
    tiny = plan(cfg, idx, GpuFacts(80.0), Settings("0.5.9", 0.9, tp=4))
    assert tiny.recommended is None and tiny.severity == "critical"
    assert "do not fit" in tiny.summary() and "larger TP" in tiny.summary()


def test_which_journal_run_calibrates() -> None:
    from cockpit.backends.sglang.plan import SETUP_FLAGS
    from cockpit.journal import RunRecord
    from cockpit.model.plan import pick_calibration

    flags = {"model-path": "/m/Kimi", "tp": 8, "mem-fraction-static": 0.93}

    def rec(i: str, start: str, **kw: object) -> RunRecord:
        base: dict[str, object] = {"id": i, "profile": "p", "started_at": start, "outcome": "crashed", "hosts": ("gpu-box-1",),
                                   "flags": dict(flags), "max_total_num_tokens": 126976, "min_headroom_gb": 0.82}
        base.update(kw)
        return RunRecord(**base)  # type: ignore[arg-type]

    runs = [
        rec("old", "2026-11-01T00:00:00+00:00"),
        rec("newer", "2026-11-02T00:00:00+00:00", flags={**flags, "mem-fraction-static": 0.88}, max_total_num_tokens=58816,
            min_headroom_gb=5.51, outcome="stopped"),
        rec("other-host", "2026-11-03T00:00:00+00:00", hosts=("gpu-box-2",)),
        rec("other-tp", "2026-11-03T00:00:00+00:00", flags={**flags, "tp": 4}),
        rec("live", "2026-11-04T00:00:00+00:00", outcome="running"),
        rec("never-captured", "2026-11-05T00:00:00+00:00", min_headroom_gb=None),
        rec("auto-mfs", "2026-11-01T12:00:00+00:00", flags={"model-path": "/m/Kimi", "tp": 8}),
    ]
    pick = pick_calibration(runs, backend="sglang", flags=flags, hosts=("gpu-box-1",), value_flag="--mem-fraction-static", setup_flags=SETUP_FLAGS)
    assert pick is not None and pick.run_id == "newer" and pick.value == 0.88 and pick.max_total_num_tokens == 58816
    only_auto = pick_calibration(runs[-1:], backend="sglang", flags=flags, hosts=("gpu-box-1",),
                                 value_flag="--mem-fraction-static", setup_flags=SETUP_FLAGS, default_value=0.825)
    assert only_auto is not None and only_auto.value == 0.825
    assert pick_calibration(runs[-1:], backend="sglang", flags=flags, hosts=("gpu-box-1",), value_flag="--mem-fraction-static", setup_flags=SETUP_FLAGS) is None
