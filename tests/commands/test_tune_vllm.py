"""`cockpit tune` for vLLM: the policy on its own (worked cases and hypothesis properties), then one
bounded session against the vLLM simulator (Qwen3-32B on 2 simulated H100, TP2) on loopback: real
launches, benches and the journal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends import get_backend
from cockpit.backends.vllm.tuning import (
    CAPTURE_FLAG,
    GIB,
    KV_BYTES_FLAG,
    MBT_FLAG,
    MIB,
    SEQS_FLAG,
    UTIL_FLAG,
    Step,
    best_step,
    next_move,
    round_capture,
)
from tests.conftest import free_port, isolated_env

PY = sys.executable
BASE = {"model": "Qwen/Qwen3-32B", "tensor-parallel-size": 2, "gpu-memory-utilization": 0.97}
T = 79.18  # an H100-80GB's total memory as vLLM prints it


def ready(u: float | None, h: float, **kw: object) -> Step:
    flags = dict(BASE)
    if u is None:
        flags.pop(UTIL_FLAG)
    else:
        flags[UTIL_FLAG] = u
    fields: dict[str, object] = dict(flags=flags, outcome="ready", headroom_gb=h, total_gb=T, graph_gb=0.86,
                                     activation_gb=1.94, kv_tokens=200000, kv_gb=24.4, max_num_seqs=1024,
                                     max_num_batched_tokens=8192, capture_size=512, concurrency=32, version="0.33.0")
    fields.update(kw)
    return Step(**fields)  # type: ignore[arg-type]


def test_the_backend_hands_out_its_policy() -> None:
    policy = get_backend("vllm").tuner.policy()
    assert policy.next_move is next_move and policy.MEMORY_FLAG == UTIL_FLAG


def test_memory_move_is_delta_b_over_total() -> None:
    # the demo's 0.97 leaves 3.70 GiB: 5 GiB needs 1.30 GiB more free, Δu = 1.30 / 79.18 = 0.0164 → 0.95
    m = next_move([ready(0.97, 3.70)], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides == {UTIL_FLAG: 0.95}
    assert m.predicted_headroom_gb == pytest.approx(3.70 + 0.02 * T, abs=0.01)
    # 9.2 GiB free at 0.90 and benched: raise to the highest value that still keeps 5 GiB
    m = next_move([ready(0.90, 9.2, output_tok_s=1000.0)], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides[UTIL_FLAG] == 0.95 and (m.predicted_headroom_gb or 0.0) >= 5.0
    # not benched: a higher setting is not launched on an unmeasured workload
    assert next_move([ready(0.90, 9.2)], BASE, target=5.0, warn=3.0) is None
    # no util flag: vLLM 0.33's default 0.92 is the starting point
    m = next_move([ready(None, 3.0)], {k: v for k, v in BASE.items() if k != UTIL_FLAG}, target=5.0, warn=2.0)
    assert m is not None and m.overrides == {UTIL_FLAG: 0.89}


def test_a_pinned_kv_cache_moves_its_bytes_not_util() -> None:
    pinned = {**BASE, KV_BYTES_FLAG: "20G"}
    s = ready(0.97, 3.5, flags=pinned)
    m = next_move([s], pinned, target=5.0, warn=3.0)
    assert m is not None and set(m.overrides) == {KV_BYTES_FLAG}
    assert m.overrides[KV_BYTES_FLAG] == 20 * GIB - 1536 * MIB  # 1.5 GiB less, whole MiB
    assert m.predicted_headroom_gb == pytest.approx(5.0, abs=0.01)


def test_batch_knobs_when_the_measurements_say_they_bind() -> None:
    at_target = 0.95  # 5.20 GiB free at 0.95: the memory move is done
    seqs = ready(at_target, 5.2, output_tok_s=900.0, max_num_seqs=32, capture_size=64, peak_running=32.0,
                 peak_queue=20.0, peak_token_usage=0.2, concurrency=64)
    m = next_move([seqs], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides[SEQS_FLAG] == 64
    # the unpinned capture size follows the seq cap: its graph growth is charged to the headroom
    assert m.predicted_headroom_gb is not None and m.predicted_headroom_gb < 5.2
    prefill = ready(at_target, 5.2, output_tok_s=900.0, peak_running=20.0, peak_queue=12.0, peak_token_usage=0.3)
    m = next_move([prefill], BASE, target=5.0, warn=3.0)
    # the step's run-time peak grows by 2.5 × the profiled 1.94 GiB: vLLM frees 1.94 of it by itself, the
    # other 2.91 GiB come from the KV cache (Δu = 2.91 / 79.18, rounded down: 0.95 → 0.91)
    assert m is not None and m.overrides == {MBT_FLAG: 16384, UTIL_FLAG: 0.91}
    assert m.predicted_headroom_gb == pytest.approx(5.2 + 0.04 * T, abs=0.01)  # vLLM's freed A not counted on
    # launched: the memory move keeps the larger step's reserve on top of the target
    bigger = ready(0.91, 10.3, output_tok_s=900.0, max_num_batched_tokens=16384, activation_gb=3.88,
                   peak_running=20.0, peak_queue=0.0, peak_token_usage=0.3,
                   flags={**BASE, UTIL_FLAG: 0.91, MBT_FLAG: 16384})
    m = next_move([prefill, bigger], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides[UTIL_FLAG] == 0.94  # keeps 5 + 1.5 × 1.94 = 7.91 GiB
    assert m.predicted_headroom_gb is not None and m.predicted_headroom_gb >= 7.91
    assert best_step([prefill, bigger], "throughput", {}, 5.0) is bigger
    tight = ready(0.94, 7.0, output_tok_s=2000.0, max_num_batched_tokens=16384, activation_gb=3.88,
                  flags={**BASE, UTIL_FLAG: 0.94, MBT_FLAG: 16384})
    assert best_step([prefill, tight], "throughput", {}, 5.0) is prefill  # 7.0 GiB free misses 7.91
    eager = ready(at_target, 5.2, output_tok_s=900.0, capture_size=16, peak_running=30.0, peak_queue=0.0,
                  peak_token_usage=0.3)
    m = next_move([eager], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides[CAPTURE_FLAG] == 40  # min(30, 32 in flight) × 1.25 → 40
    small = ready(at_target, 5.2, output_tok_s=900.0, peak_running=28.0, peak_queue=9.0, peak_token_usage=0.9)
    m = next_move([small], BASE, target=5.0, warn=3.0)
    assert m is not None and m.overrides[CAPTURE_FLAG] == 40 < 512  # min(56, 32) × 1.25
    done = ready(at_target, 5.2, output_tok_s=900.0, peak_running=30.0, peak_queue=0.0, peak_token_usage=0.3)
    assert next_move([done], BASE, target=5.0, warn=3.0) is None  # nothing binds


def test_best_keeps_the_target_and_the_capture_ladder() -> None:
    steps = [ready(0.97, 3.7, output_tok_s=2000.0), ready(0.95, 5.2, output_tok_s=1500.0),
             ready(0.93, 6.8, output_tok_s=1000.0)]
    assert best_step(steps, "throughput", {}, 5.0) is steps[1]
    assert round_capture(1) == 8 and round_capture(250) == 256 and round_capture(257) == 272


# ---- properties over generated measurements -------------------------------------------------------

utils = st.integers(min_value=5, max_value=100).map(lambda i: i / 100)
headrooms = st.floats(min_value=0.0, max_value=60.0, allow_nan=False)
opt_f = st.none() | st.floats(min_value=0.0, max_value=2000.0, allow_nan=False)


@st.composite
def steps(draw: st.DrawFn) -> tuple[Step, float, float]:
    # headroom policies are written in hundredths of a GiB (target-headroom-gb: 5.0)
    warn = draw(st.integers(min_value=50, max_value=800)) / 100
    target = round(warn + draw(st.integers(min_value=0, max_value=600)) / 100, 2)
    flags = dict(BASE, **{UTIL_FLAG: draw(utils)})
    if draw(st.booleans()):
        flags[KV_BYTES_FLAG] = draw(st.integers(min_value=1, max_value=70)) * GIB
    seqs = draw(st.sampled_from([8, 32, 128, 256, 1024]))
    cap = draw(st.sampled_from([0, 8, 64, 256, 512]))
    total = draw(st.sampled_from([None, 47.5, T, 139.8]))
    # often just above the target (less than 0.01 × T): the memory move is done, the batch knobs speak
    near = target + draw(st.floats(min_value=0.0, max_value=0.009)) * (total or 0.0)
    s = Step(flags=flags, outcome="ready", headroom_gb=draw(headrooms | st.just(near)), total_gb=total,
             graph_gb=draw(st.none() | st.floats(min_value=0.0, max_value=5.0)),
             activation_gb=draw(st.none() | st.floats(min_value=0.0, max_value=8.0)), kv_tokens=100000, kv_gb=20.0,
             max_num_seqs=seqs, max_num_batched_tokens=draw(st.sampled_from([2048, 8192])), capture_size=cap,
             concurrency=draw(st.sampled_from([None, 16, 64, 256])),
             output_tok_s=draw(st.none() | st.floats(min_value=1.0, max_value=1e5)),
             peak_running=draw(opt_f), peak_queue=draw(opt_f),
             peak_token_usage=draw(st.none() | st.floats(min_value=0.0, max_value=1.0)),
             version=draw(st.sampled_from(["0.16.0", "0.33.0", None])))
    return s, target, warn


@settings(max_examples=400, deadline=None)
@given(steps())
def test_moves_go_the_way_they_say_and_stay_in_the_flags_domain(case: tuple[Step, float, float]) -> None:
    s, target, warn = case
    m = next_move([s], BASE, target=target, warn=warn)
    if m is None:
        return
    new = {**BASE, **m.overrides}  # overrides are relative to the profile
    changed = {k for k in (UTIL_FLAG, KV_BYTES_FLAG, SEQS_FLAG, MBT_FLAG, CAPTURE_FLAG) if new.get(k) != s.flags.get(k)}
    assert changed, m  # never the current value
    assert m.predicted_headroom_gb is None or m.predicted_headroom_gb >= warn  # never below the warn headroom
    memory_move = MBT_FLAG not in changed  # a larger step takes its run-time peak from the KV cache
    if UTIL_FLAG in changed:
        u_old, u_new = s.flags[UTIL_FLAG], new[UTIL_FLAG]
        assert 0 < u_new <= 1.0 and round(u_new, 2) == u_new
        assert KV_BYTES_FLAG not in s.flags  # a pinned KV cache moves its bytes instead
        if memory_move:
            assert (u_new > u_old) == m.why.startswith("raise") and (u_new < u_old) == m.why.startswith("lower")
            assert m.predicted_headroom_gb is not None and m.predicted_headroom_gb >= target - 1e-6
        else:
            assert u_new < u_old and "less KV cache" in m.why
    if KV_BYTES_FLAG in changed:
        b_old, b_new = s.flags.get(KV_BYTES_FLAG), new[KV_BYTES_FLAG]
        assert b_old is not None and isinstance(b_new, int) and b_new > 0 and b_new % MIB == 0
        if memory_move:
            assert (b_new > b_old) == m.why.startswith("raise")
            assert m.predicted_headroom_gb is not None and m.predicted_headroom_gb >= target - 1e-6
        else:
            assert b_new < b_old and "less KV cache" in m.why
    if SEQS_FLAG in changed:
        assert isinstance(new[SEQS_FLAG], int) and new[SEQS_FLAG] > (s.max_num_seqs or 0)
    if MBT_FLAG in changed:
        assert isinstance(new[MBT_FLAG], int) and new[MBT_FLAG] > (s.max_num_batched_tokens or 0)
    if CAPTURE_FLAG in changed:
        c = new[CAPTURE_FLAG]
        assert isinstance(c, int) and 8 <= c <= 1024 and c % 8 == 0
        assert (c > (s.capture_size or 0)) == ("without CUDA graphs" in m.why)
    # a move is never proposed again once launched
    launched = Step(**{**s.__dict__, "flags": new})
    again = next_move([s, launched], BASE, target=target, warn=warn)
    assert again is None or {**s.flags, **again.overrides} != new


# ---- a bounded session on the vLLM simulator ------------------------------------------------------

def sim_env(tmp_path: Path, util: float) -> dict[str, str]:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    (tmp_path / "profiles").mkdir()
    # the start-ups at 300, the benches at 30: memory, crashes and advice do not depend on the speed
    program = [PY, "-m", "cockpit", "sim", "--sim-backend", "vllm", "--sim-gpu", "h100", "--sim-speed", "30",
               "--sim-startup-speed", "300", "--sim-traffic", "none", "--sim-dir", str(sim_dir), "serve"]
    (tmp_path / "profiles" / "qwen.yaml").write_text(
        "name: qwen\nbackend: vllm\nversion: 0.33.0\nhosts:\n  - ssh: local\n"
        f"program: {json.dumps(program)}\nworkdir: {tmp_path / 'work'}\nlog: logs/vllm.log\n"
        "server:\n  model: Qwen/Qwen3-32B\n  tensor-parallel-size: 2\n"
        f"  gpu-memory-utilization: {util}\n  max-model-len: 32768\n  port: {free_port()}\n"
        "policy:\n  target-headroom-gb: 5.0\n  warn-headroom-gb: 3.0\n"
    )
    return isolated_env(tmp_path, sim_dir)


def test_tune_on_the_vllm_simulator_without_a_crash(tmp_path: Path) -> None:
    env = sim_env(tmp_path, 0.90)
    bench = ("--concurrency", "32", "--input-len", "256", "--output-len", "128", "--duration", "3", "--requests", "300")
    out = subprocess.run([PY, "-m", "cockpit", "tune", "qwen", "--max-launches", "2", *bench, "--json"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["crashes"] == 0 and r["launches"] == 2, out.stderr
    first, second = r["steps"]
    assert first["flags"][UTIL_FLAG] == 0.90 and first["outcome"] == "ready" and first["output_tok_s"] > 0
    assert first["total_gb"] == pytest.approx(T, abs=0.5) and first["headroom_gb"] > 5.0
    # Δu = (free − 5 GiB) / T, rounded down: the second launch raises util and keeps the target
    u2 = second["flags"][UTIL_FLAG]
    assert 0.90 < u2 <= 0.90 + (first["headroom_gb"] - 5.0) / first["total_gb"] + 1e-9
    assert second["outcome"] == "ready" and second["headroom_gb"] >= 5.0 and second["output_tok_s"] > 0
    assert second["headroom_gb"] == pytest.approx(second["predicted_headroom_gb"], abs=0.3)
    best = r["best"]
    assert best["headroom_gb"] >= 5.0
    tuned = Path(r["profile_written"])
    assert tuned.name == "qwen.tuned.yaml" and tuned.exists()
    data = yaml.safe_load(tuned.read_text())
    assert data["backend"] == "vllm" and data["server"] == best["flags"]
    runs = json.loads(subprocess.run([PY, "-m", "cockpit", "runs", "--json"], env=env, cwd=tmp_path,
                                     capture_output=True, text=True, timeout=60).stdout)
    assert {x["tune_session"] for x in runs} == {r["session"]} and len(runs) == 2
    assert all(x["outcome"] == "stopped" for x in runs)


def test_a_vllm_crash_is_diagnosed_and_its_advice_applied(tmp_path: Path) -> None:
    # util 0.45 leaves too little KV cache for one 32k request: vLLM refuses to start
    env = sim_env(tmp_path, 0.45)
    bench = ("--concurrency", "16", "--input-len", "256", "--output-len", "64", "--duration", "2", "--requests", "100")
    out = subprocess.run([PY, "-m", "cockpit", "tune", "qwen", "--max-launches", "2", *bench, "--json"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    r = json.loads(out.stdout)
    assert r["launches"] == 2 and r["crashes"] == 1 and r["advice_applied"] == 1, out.stderr
    first, second = r["steps"]
    assert first["outcome"] == "crashed" and first["crash_kind"] == "init_not_enough_memory", first
    assert first["advice"] and all(second["flags"][k] == v for k, v in first["advice"].items())
    assert second["outcome"] == "ready" and second["headroom_gb"] > 5.0
