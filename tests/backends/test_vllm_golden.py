"""`cockpit diagnose --json` on the golden vLLM logs (tests/data/vllm-*.log, written by
tests/data/make_golden_vllm.py from vLLM's format strings): backend, format, phase, the per-rank
figures, the crash and the advice, in vLLM's flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"

# name -> (format, phase, crash (kind, phase, rank) or None, finding ids that must be there)
GOLDEN: dict[str, tuple[str, str, tuple[str, str, str | None] | None, tuple[str, ...]]] = {
    "vllm-0.33.0-qwen32b-tp2-0.92-healthy.log": ("vllm-0.33.0", "ready", None, ("headroom_ok", "kv_concurrency")),
    "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log": ("vllm-0.33.0", "crashed", ("cuda_oom", "prefill", "TP1"), ("oom_crash",)),
    "vllm-0.33.0-qwen32b-tp2-0.98-graph-capture-oom.log": ("vllm-0.33.0", "crashed",
                                                           ("graph_capture_oom", "graph_capture", "TP1"), ("graph_capture_oom",)),
    "vllm-0.16.0-llama8b-no-cache-blocks.log": ("vllm-0.16.0", "crashed", ("init_not_enough_memory", "startup", "TP0"),
                                                ("init_not_enough_memory",)),
    "vllm-0.16.0-llama8b-max-model-len.log": ("vllm-0.16.0", "crashed", ("init_not_enough_memory", "startup", "TP0"),
                                              ("init_not_enough_memory",)),
    "vllm-0.33.0-qwen32b-tp2-free-memory-below-util.log": ("vllm-0.33.0", "crashed",
                                                           ("init_not_enough_memory", "startup", "TP1"), ("init_not_enough_memory",)),
    "vllm-0.16.0-llama70b-tp4-nccl-timeout.log": ("vllm-0.16.0", "crashed", ("nccl_timeout", "startup", "TP2"), ("nccl_timeout",)),
    "vllm-0.33.0-qwen32b-tp2-nccl-error.log": ("vllm-0.33.0", "crashed", ("nccl_error", "startup", None), ("nccl_error",)),
    "vllm-0.33.0-port-in-use.log": ("vllm-unknown", "crashed", ("port_in_use", "startup", None), ("port_in_use",)),
    "vllm-0.33.0-startup-error.log": ("vllm-0.33.0", "crashed", ("startup_error", "startup", None), ("startup_error",)),
    "vllm-0.33.0-qwen32b-tp2-host-oom-killed.log": ("vllm-0.33.0", "crashed", ("host_oom_killed", "serving", "TP1"),
                                                    ("host_oom_killed",)),
    "vllm-0.33.0-qwen32b-tp2-worker-sigkilled.log": ("vllm-0.33.0", "crashed", ("killed_by_signal", "serving", "TP1"),
                                                     ("killed_by_signal",)),
    "vllm-0.10.1.1-qwen7b-single-gpu.log": ("vllm-0.10.1.1", "ready", None, ("kv_concurrency",)),
}


def diagnose(name: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "cockpit", "diagnose", "--json", *extra, str(DATA / name)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def changes(out: dict[str, Any], fid: str) -> dict[str, tuple[Any, Any]]:
    f = next(f for f in out["findings"] if f["id"] == fid)
    return {c["flag"]: (c["from"], c["to"]) for c in f["changes"]}


def test_every_golden_log_is_listed() -> None:
    assert {p.name for p in DATA.glob("vllm-*.log")} == set(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden(name: str) -> None:
    fmt, phase, crash, fids = GOLDEN[name]
    rc, out = diagnose(name)
    assert out["backend"] == "vllm"
    assert out["format"] == fmt
    assert out["phase"] == phase
    if crash is None:
        assert out["crash"] is None and rc == 0
    else:
        assert rc == 1
        assert (out["crash"]["kind"], out["crash"]["phase"], out["crash"]["rank"]) == crash
    ids = {f["id"] for f in out["findings"]}
    assert set(fids) <= ids
    for f in out["findings"]:
        for c in f["changes"]:
            assert c["flag"].startswith("--") and c["from"] != c["to"], f  # never the current value
            assert not c["flag"].startswith(("--mem-fraction", "--tp-size", "--context-length")), f  # vLLM's words


def test_healthy_per_rank_figures() -> None:
    _, out = diagnose("vllm-0.33.0-qwen32b-tp2-0.92-healthy.log")
    assert out["max_total_num_tokens"] == 314160
    assert out["context_len"] == 32768
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert set(ranks) == {"TP0", "TP1"}
    for r in ranks.values():
        assert r["weights_gb"] == 30.59  # Model loading took
        assert r["kv_gb"] == 38.35  # Available KV cache memory / Current kv cache memory in use
        assert r["graph_gb"] == 0.86  # the real capture, not the V2 runner's measuring capture
        assert r["pre_load_avail_gb"] == 78.31
        assert r["total_gb"] == 79.19
        # the summary line proves it: free at start − consumed − KV − graphs
        assert r["avail_after_capture_gb"] == pytest.approx(78.31 - 31.46 - 38.35 - 0.86, abs=0.01)
        assert r["figures"]["graph_estimate_gb"] == 1.1 and r["figures"]["graph_actual_gb"] == 0.86
        assert r["figures"]["kv_fit_requested_bytes"] == int(37.34 * 2**30)


def test_prefill_oom_advice_lowers_util_by_delta_b_over_total() -> None:
    _, out = diagnose("vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log")
    f = next(f for f in out["findings"] if f["id"] == "oom_crash")
    assert changes(out, "oom_crash") == {"--gpu-memory-utilization": (0.97, 0.95)}
    headroom = out["min_headroom_gb"]
    assert headroom == pytest.approx(78.31 - 31.46 - 42.32 - 0.86, abs=0.01)
    # Δu·T per GPU, one for one into the free memory after start-up
    assert f["predicted"]["freed_gb_per_gpu"] == pytest.approx(0.02 * 79.19, abs=0.01)
    assert f["predicted"]["headroom_gb"] == pytest.approx(headroom + 0.02 * 79.19, abs=0.01)
    assert f["predicted"]["headroom_gb"] >= 5.0
    assert f["predicted"]["max_total_num_tokens"] < out["max_total_num_tokens"]
    alts = {a["flag"]: a["to"] for a in f["alternatives"]}
    kv_bytes = alts["--kv-cache-memory-bytes"]
    assert kv_bytes == pytest.approx((42.32 - 0.02 * 79.19) * 2**30, rel=1e-3)  # the precise alternative
    assert "TOTAL" in f["message"] and "--kv-cache-memory-bytes" in f["message"]


def test_target_headroom_moves_the_advice() -> None:
    _, out = diagnose("vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log", "--target-headroom-gb", "8")
    assert changes(out, "oom_crash")["--gpu-memory-utilization"] == (0.97, 0.91)


def test_init_errors_point_the_right_way() -> None:
    _, low = diagnose("vllm-0.33.0-qwen32b-tp2-free-memory-below-util.log")
    frm, to = changes(low, "init_not_enough_memory")["--gpu-memory-utilization"]
    assert to < frm and to * 79.19 <= 40.12  # LOWER: the budget must fit in what is free
    _, blocks = diagnose("vllm-0.16.0-llama8b-no-cache-blocks.log")
    frm, to = changes(blocks, "init_not_enough_memory")["--gpu-memory-utilization"]
    assert to > frm  # RAISE: the budget left no KV cache
    _, mml = diagnose("vllm-0.16.0-llama8b-max-model-len.log")
    assert changes(mml, "init_not_enough_memory") == {"--max-model-len": (131072, 68304)}


def test_capture_oom_offers_fewer_graphs() -> None:
    _, out = diagnose("vllm-0.33.0-qwen32b-tp2-0.98-graph-capture-oom.log")
    f = next(f for f in out["findings"] if f["id"] == "graph_capture_oom")
    frm, to = changes(out, "graph_capture_oom")["--gpu-memory-utilization"]
    assert (frm, to) == (0.98, 0.96)
    alts = {a["flag"] for a in f["alternatives"]}
    assert {"--max-cudagraph-capture-size", "--kv-cache-memory-bytes", "--enforce-eager"} <= alts


def test_text_report_names_vllm() -> None:
    proc = subprocess.run([sys.executable, "-m", "cockpit", "diagnose", str(DATA / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1].startswith("vllm-0.33.0 · phase CRASHED")
    assert "--gpu-memory-utilization 0.97 → 0.95" in proc.stdout
    assert "mem-fraction" not in proc.stdout


def test_sglang_logs_still_route_to_sglang() -> None:
    _, out = diagnose("sglang-0.5.9-kimi-0.93-prefill-oom.log")
    assert out["backend"] == "sglang" and out["format"] == "sglang-0.5.9"
