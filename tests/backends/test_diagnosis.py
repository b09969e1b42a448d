"""Diagnosis rules against RunStates built by hand (the parser has its own tests)."""

from __future__ import annotations

from typing import Any

import pytest

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang.diagnosis import diagnose
from cockpit.backends.sglang.rulecontext import ranks_per_node, run_version
from cockpit.core.findings import FlagChange, exit_code_for
from cockpit.core.profile import parse_profile
from cockpit.core.state import Crash, RunState


def story_state(*, mfs: float = 0.93, worst_after: float = 0.82, others_after: float = 1.12,
                fmt: str = "sglang-0.5.9", crash: Crash | None = None, pre_gap: float = 0.3) -> RunState:
    """Kimi-K2.5 TP8 at mfs 0.93: P 94.6 on TP3 (the minimum), 0.82 GiB after capture there."""
    s = RunState(format=fmt, phase="crashed" if crash else "ready")
    s.server_args = {"mem_fraction_static": mfs, "tp_size": 8, "chunked_prefill_size": 8192}
    if fmt == "sglang-0.5.9":
        s.server_args["cuda_graph_max_bs"] = 256
    s.max_total_num_tokens = 246890
    s.prefill_chunk_tokens = 8192
    s.context_len = 131072
    for i in range(8):
        r = s.rank(f"TP{i}")
        r.pre_load_avail_gb = 94.6 if i == 3 else 94.6 + pre_gap
        r.weights_gb = 71.82
        r.after_weights_avail_gb = r.pre_load_avail_gb - 71.82
        r.kv_tokens = 246890
        r.kv_gb = 16.16
        r.avail_before_capture_gb = 4.57
        r.graph_gb = 3.75
        r.avail_after_capture_gb = worst_after if i == 3 else others_after
    s.crash = crash
    return s


def by_id(findings: list[Any], fid: str) -> Any:
    hits = [f for f in findings if f.id == fid]
    assert hits, f"no {fid} in {[f.id for f in findings]}"
    return hits[0]


def test_story_low_headroom_after_capture() -> None:
    fs = diagnose(story_state())
    f = by_id(fs, "low_headroom_after_graph_capture")
    assert f.severity == "critical" and f.ranks == ("TP3",)
    assert f.changes == (FlagChange("--mem-fraction-static", 0.93, 0.88),)
    assert f.predicted["headroom_gb"] == pytest.approx(5.55, abs=0.01)
    # the pool gives up δ·P / cell tokens: 0.05 × 94.6 GiB / 70,272 B ≈ 72 K
    assert f.predicted["max_total_num_tokens"] == pytest.approx(246890 - 0.05 * 94.6 * 2**30 / 70272, abs=50)
    assert "0.82" in f.message and "0.93 → 0.88" in f.message
    assert "0.8858 → 0.88" in (f.arithmetic or "")
    alts = {c.flag: c for c in f.alternatives}
    assert alts["--chunked-prefill-size"].to_value == 4096
    assert alts["--cuda-graph-max-bs"].to_value == 128
    assert exit_code_for(fs) == 1


def test_graph_flag_spelled_per_version() -> None:
    f = by_id(diagnose(story_state(fmt="sglang-0.5.23")), "low_headroom_after_graph_capture")
    assert "--cuda-graph-max-bs-decode" in {c.flag for c in f.alternatives}
    assert "--cuda-graph-max-bs" not in {c.flag for c in f.alternatives}


def test_warning_between_warn_and_target_and_ok_above() -> None:
    f = by_id(diagnose(story_state(worst_after=4.0, others_after=4.2)), "low_headroom_after_graph_capture")
    assert f.severity == "warning"
    ok = by_id(diagnose(story_state(mfs=0.88, worst_after=5.55, others_after=5.6, pre_gap=0.0)), "headroom_ok")
    assert ok.severity == "ok"
    assert exit_code_for(diagnose(story_state(mfs=0.88, worst_after=5.55, others_after=5.6, pre_gap=0.0))) == 0


def test_target_from_argument_and_profile() -> None:
    f = by_id(diagnose(story_state(worst_after=4.0, others_after=4.2), target_headroom_gb=3.5), "headroom_ok")
    assert f.severity == "ok"
    prof = parse_profile({"name": "k", "policy": {"target-headroom-gb": 8.0, "warn-headroom-gb": 2.0}})
    f = by_id(diagnose(story_state(worst_after=4.0, others_after=4.2), prof), "low_headroom_after_graph_capture")
    assert f.severity == "warning"
    assert f.changes[0].to_value == 0.88  # 0.93 − (8 − 4)/94.6 = 0.8877 → 0.88


def test_oom_crash_in_prefill() -> None:
    crash = Crash(kind="cuda_oom", phase="prefill", rank="TP3", line=812, message="torch.OutOfMemoryError: CUDA out of memory.")
    fs = diagnose(story_state(crash=crash))
    assert fs[0].id == "oom_crash"
    assert fs[0].changes == (FlagChange("--mem-fraction-static", 0.93, 0.88),)
    assert fs[0].predicted["headroom_gb"] == pytest.approx(5.55, abs=0.01)
    assert "prefill" in fs[0].message and "TP3" in fs[0].message


def test_oom_crash_without_memory_lines_still_advises() -> None:
    s = RunState(format="sglang-0.5.9", phase="crashed")
    s.server_args = {"mem_fraction_static": 0.9}
    s.crash = Crash(kind="cuda_oom", phase="decode", rank="TP0", line=3, message="CUDA out of memory")
    f = by_id(diagnose(s), "oom_crash")
    assert f.changes[0].from_value == 0.9 and f.changes[0].to_value < 0.9
    assert f.predicted == {}


def test_graph_capture_oom() -> None:
    s = story_state(crash=Crash(kind="graph_capture_oom", phase="graph_capture", rank="TP5", line=40, message="Capture cuda graph failed"))
    for r in s.ranks.values():
        r.avail_after_capture_gb = None
        r.graph_gb = None
    f = by_id(diagnose(s), "graph_capture_oom")
    assert f.severity == "critical"
    # needs 5 GiB free after ~4 GiB of graphs from 4.57 before: 0.93 − (9 − 4.57)/94.6 = 0.883 → 0.88
    assert f.changes[0].to_value == 0.88
    assert "--cuda-graph-max-bs" in f.message


def test_graph_capture_oom_0523_offers_prefill_backend_off() -> None:
    s = story_state(fmt="sglang-0.5.23",
                    crash=Crash(kind="graph_capture_oom", phase="graph_capture", rank="TP0", line=9, message="x"))
    f = by_id(diagnose(s), "graph_capture_oom")
    flags = {c.flag: c.to_value for c in f.alternatives}
    assert flags["--cuda-graph-backend-prefill"] == "disabled"
    assert "--cuda-graph-max-bs-decode" in flags


def test_init_not_enough_memory_raises_mfs() -> None:
    s = RunState(format="sglang-0.5.9", phase="crashed")
    s.server_args = {"mem_fraction_static": 0.75}
    for i in range(2):
        r = s.rank(f"TP{i}")
        r.pre_load_avail_gb = 78.21
        r.weights_gb = 62.0
        r.after_weights_avail_gb = 16.21
    s.crash = Crash(kind="init_not_enough_memory", phase="startup", rank="TP0", line=20,
                    message="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                            "Current value: self.server_args.mem_fraction_static=0.75")
    f = by_id(diagnose(s), "init_not_enough_memory")
    floor = 1 - 16.21 / 78.21  # 0.7927
    assert f.changes[0].from_value == 0.75 and f.changes[0].to_value == 0.82  # ceil(0.7927 + 0.02)
    assert f.changes[0].to_value > floor
    assert "RAISE" in f.message and "opposite" in f.message
    assert f"{floor:.3f}" in f.message


def test_init_not_enough_memory_uses_0523_numbers() -> None:
    s = RunState(format="sglang-0.5.23", phase="crashed")
    s.server_args = {"mem_fraction_static": 0.7}
    s.crash = Crash(kind="init_not_enough_memory", phase="startup", rank="TP0", line=20,
                    message="ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.7. "
                            "Raise --mem-fraction-static above 0.812 (minimum viable = 1 - available/pre = 0.7921). "
                            "If using speculative decoding, draft weights are now counted.")
    f = by_id(diagnose(s), "init_not_enough_memory")
    assert f.changes[0].to_value == 0.82


def test_kv_pool_exhausted() -> None:
    s = story_state(mfs=0.8, worst_after=12.0, others_after=12.2,
                    crash=Crash(kind="kv_pool_exhausted", phase="decode", rank="TP0", line=99,
                                message="Decode out of memory. Try to lower your batch size."))
    s.running_requests_cap = 256
    f = by_id(diagnose(s), "kv_pool_exhausted")
    assert f.changes[0].flag == "--mem-fraction-static" and f.changes[0].to_value > 0.8
    assert f.predicted["headroom_gb"] >= 5.0
    tight = story_state(crash=Crash(kind="kv_pool_exhausted", phase="decode", rank="TP0", line=99, message="x"))
    tight.running_requests_cap = 256
    f = by_id(diagnose(tight), "kv_pool_exhausted")
    assert f.changes == (FlagChange("--max-running-requests", 256, 128),)


def test_hicache_crash_with_host_facts() -> None:
    s = story_state(crash=Crash(kind="hicache_host_memory", phase="startup", rank="TP6", line=50,
                                message="ValueError: Not enough host memory available. Requesting 300.00 GB but only have 128.41 GB free."))
    s.server_args.update(enable_hierarchical_cache=True, hicache_size=300)
    f = by_id(diagnose(s, hosts=[HostFacts(host="gpu-box-1", mem_available_gb=449.0)]), "hicache_host_memory")
    assert f.changes == (FlagChange("--hicache-size", 300.0, 49),)
    assert "8 ranks × 300 GB = 2400 GB + 40 GB reserve" in f.message
    s.crash = Crash(kind="hicache_host_memory", phase="startup", rank="TP6", line=50, message="Killed")
    no_facts = by_id(diagnose(s), "hicache_host_memory")
    assert "cockpit check" in no_facts.message and no_facts.changes == ()


def test_host_oom_killed() -> None:
    s = story_state(crash=Crash(kind="host_oom_killed", phase="startup", rank=None, line=60, message="Killed"))
    f = by_id(diagnose(s), "host_oom_killed")
    assert "HiCache is off" in f.message
    s.server_args.update(enable_hierarchical_cache=True, hicache_size=200)
    f = by_id(diagnose(s, hosts=[HostFacts(host="h", mem_available_gb=1000.0)]), "host_oom_killed")
    assert f.changes[0].flag == "--hicache-size" and f.changes[0].to_value == 118  # ⌊(1000 − 40 − 10.74)/8⌋


@pytest.mark.parametrize(("kind", "fid"), [("nccl_timeout", "nccl_timeout"), ("port_in_use", "port_in_use"),
                                           ("warmup_failed", "warmup_failed"), ("unknown", "crash_unclassified")])
def test_other_crashes(kind: str, fid: str) -> None:
    s = story_state(mfs=0.88, worst_after=5.5, others_after=5.5, pre_gap=0.0,
                    crash=Crash(kind=kind, phase="startup", rank="TP1", line=7, message="boom"))
    s.server_args["port"] = 8000
    fs = diagnose(s)
    assert fs[0].id == fid and fs[0].severity == "critical"
    assert "headroom_ok" not in {f.id for f in fs}  # no reassurance next to a crash
    if kind == "port_in_use":
        assert fs[0].changes == (FlagChange("--port", 8000, 8001),)


def test_rank_memory_imbalance() -> None:
    fs = diagnose(story_state(pre_gap=0.45))
    f = by_id(fs, "rank_memory_imbalance")
    assert f.ranks == ("TP3",) and f.severity == "warning"
    assert "GPU 3" in f.message and "0.45" in f.message
    assert "rank_memory_imbalance" not in {f.id for f in diagnose(story_state(pre_gap=0.1, others_after=0.9))}


def test_imbalance_from_headroom_only() -> None:
    s = story_state(mfs=0.88, pre_gap=0.0, worst_after=5.1, others_after=5.6)
    f = by_id(diagnose(s), "rank_memory_imbalance")
    assert f.ranks == ("TP3",) and "after graph capture" in f.message


def test_kv_pool_below_context() -> None:
    s = story_state(mfs=0.88, worst_after=5.5, others_after=5.5, pre_gap=0.0)
    s.context_len = 262144
    f = by_id(diagnose(s), "kv_pool_below_context")
    assert f.severity == "warning" and "246,890" in f.message and "262,144" in f.message
    assert f.changes[0].to_value == 246784


def test_kv_pool_below_context_under_1024_tokens_caps_the_context_at_the_pool() -> None:
    # SGLang's CPU engine with --max-total-tokens 64 (tests/real_engine/test_sglang_endings.py):
    # the change must fit the pool, or the restart it proposes warns again
    s = story_state(mfs=0.88, worst_after=5.5, others_after=5.5, pre_gap=0.0)
    s.context_len, s.max_total_num_tokens = 2048, 64
    f = by_id(diagnose(s), "kv_pool_below_context")
    assert f.changes[0].flag == "--context-length" and f.changes[0].to_value == 64


def test_sorted_most_severe_first_and_json() -> None:
    fs = diagnose(story_state(pre_gap=0.45))
    order = [f.severity for f in fs]
    assert order == sorted(order, key=["critical", "warning", "info", "ok"].index)
    js = fs[0].to_json()
    assert js["changes"] == [{"flag": "--mem-fraction-static", "from": 0.93, "to": 0.88}]


def test_empty_state_has_no_findings() -> None:
    assert diagnose(RunState()) == []


def test_helpers() -> None:
    assert run_version(RunState(format="sglang-0.5.23")) == "0.5.23"
    assert run_version(RunState(), parse_profile({"name": "x", "version": "0.5.15"})) == "0.5.15"
    assert run_version(RunState()) == "0.5.9"
    assert ranks_per_node({"tp_size": 16}, 2) == 8
    assert ranks_per_node({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}) == 8
    assert ranks_per_node({"tp_size": 2, "dp_size": 4}) == 8


def test_hicache_crash_host_estimated_from_the_log_059() -> None:
    s = RunState(format="sglang-0.5.9", phase="crashed")
    s.server_args = {"tp_size": 8, "enable_hierarchical_cache": True, "hicache_size": 200}
    s.host_cache_allocating_ranks = ["TP0", "TP1", "TP2", "TP3"]
    s.crash = Crash(kind="hicache_host_memory", phase="startup", rank="TP6", line=9,
                    message="ValueError: Not enough host memory available. Requesting 200.00 GB but only have 128.41 GB free. "
                            "Please reduce the size of the hierarchical cache.")
    f = by_id(diagnose(s), "hicache_host_memory")
    # available ≈ 128.41 + 10.74 + 4 × 200 = 939.1 GB -> ⌊(939.1 − 40 − 10.74) / 8⌋ = 111
    assert f.changes == (FlagChange("--hicache-size", 200, 111),)
    assert "estimated from the log" in f.message and "8 ranks × 200 GB" in f.message


def test_hicache_crash_host_estimated_from_the_log_0523() -> None:
    s = RunState(format="sglang-0.5.23", phase="crashed")
    s.server_args = {"tp_size": 8, "enable_hierarchical_cache": True, "hicache_size": 200}
    s.crash = Crash(kind="hicache_host_memory", phase="startup", rank="TP0", line=9,
                    message="ValueError: Not enough host memory available. Requesting 200.00 GB but only have 133.70 GB free.")
    f = by_id(diagnose(s), "hicache_host_memory")
    # the share already excludes SGLang's 10 GiB: 133.70 − 40/8 = 128.7 -> 128
    assert f.changes == (FlagChange("--hicache-size", 200, 128),)


def test_profile_flags_fill_what_the_log_lacks() -> None:
    s = story_state()
    s.server_args = {}  # e.g. a log that starts after the server_args dump
    prof = parse_profile({"name": "k", "server": {"tp": 8, "mem-fraction-static": 0.93, "chunked-prefill-size": 8192,
                                                   "cuda-graph-max-bs": 256}})
    f = by_id(diagnose(s, prof), "low_headroom_after_graph_capture")
    assert f.changes == (FlagChange("--mem-fraction-static", 0.93, 0.88),)
    assert {c.flag: c.from_value for c in f.alternatives} == {"--chunked-prefill-size": 8192, "--cuda-graph-max-bs": 256}


def test_auto_mfs_is_inferred_from_the_pool() -> None:
    """Llama-3.1-70B on H100 with SGLang's own mfs 0.818, not printed anywhere in this log."""
    s = RunState(format="sglang-0.5.9", phase="ready")
    for i in range(8):
        r = s.rank(f"TP{i}")
        r.pre_load_avail_gb, r.weights_gb, r.after_weights_avail_gb = 78.21, 16.49, 61.72
        r.kv_tokens, r.kv_gb = 1_244_811, 47.48
        r.avail_after_capture_gb = 2.2
    f = by_id(diagnose(s), "low_headroom_after_graph_capture")
    assert f.changes[0].from_value == 0.818
    assert f.changes[0].to_value == 0.78  # 0.818 − (5 − 2.2)/78.21 = 0.7822 → 0.78
    assert "inferred" in f.message
