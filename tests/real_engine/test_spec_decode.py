"""Speculative decoding on the REAL vLLM (its CPU build, issue 25): `cockpit up` launches tiny-llama
with its draft model (`--speculative-config {"method": "draft_model", …}`, tiny-draft-llama: one
layer of the same attention shape, a wide MLP), to READY; Cockpit reads the draft's lines (the
loader's `Checkpoint size` after `Loading drafter model...`, the KV cache the draft shares) and the
plan's draft terms meet what the engine printed.

On the CPU build "memory" is the KV-cache space VLLM_CPU_KVCACHE_SPACE (1 GiB here), not a GPU: the
engine prints no `Model loading took X GiB` (cpu_model_runner.load_model replaces the GPU runner's)
and sizes no KV cache from free memory. What its text proves, and what is checked here: the KV
tokens the 1 GiB holds with the draft's layer beside the target's two (the draft's bytes per
token), and the draft checkpoint's size on disk (float32) against the plan's draft weights (loaded
in bfloat16: half). The recorded start-up of this launch is
tests/data/real-engine/vllm-0.32.0-cpu-spec-draft-model.log (tests/backends/test_vllm_spec_log.py)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.real_engine.conftest import RealVllm
from tests.real_engine.lifecycle_kit import FAST, READY_TIMEOUT_S, api_port_of, cockpit

pytestmark = pytest.mark.timeout(1500)  # waits for the machine-wide engine lock, then ~60–90 s

CPU_BLOCK = 128  # vLLM's CPU platform block size when none is asked (vllm/platforms/cpu.py)
KV_SPACE = 2**30  # VLLM_CPU_KVCACHE_SPACE=1 (RealVllm.env)


def test_a_draft_model_launch_is_read_and_planned(real_vllm: RealVllm, engine_lock: None, tmp_path: Path) -> None:
    spec = {"method": "draft_model", "model": str(real_vllm.draft), "num_speculative_tokens": 2}
    # a profile's server values are scalars: the JSON flag is written as its JSON text
    ck = cockpit(tmp_path, real_vllm.profile(tmp_path, "spec", server={**FAST, "speculative-config": json.dumps(spec)}))
    try:
        up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S),
                    timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 0, up.stdout + up.stderr
        # a request, so the engine drafts (and exports its spec-decode counters)
        body = json.dumps({"model": str(real_vllm.tiny), "prompt": "Hello world, this is", "max_tokens": 8}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{api_port_of(ck.profile)}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            assert resp.status == 200

        data = ck.status()
        assert data["phase"] == "ready", data
        assert data["server_args"]["speculative_config"] == spec, data["server_args"]
        tokens = data["max_total_num_tokens"]
        # the draft's layer takes KV beside the target's: 1,536 B a token, not 1,024 (1,048,576 tokens)
        assert tokens == (KV_SPACE // (1536 * CPU_BLOCK)) * CPU_BLOCK == 699_008, tokens
        (tp0,) = data["ranks"]
        # the loader's line for each model, the second after `Loading drafter model...`
        assert tp0["figures"]["checkpoint_gb"] == 0.0, tp0
        draft_on_disk = tp0["figures"]["draft_checkpoint_gb"]
        assert draft_on_disk == 0.09, tp0  # 101,452,552 B of float32 safetensors
        assert tp0["weights_gb"] is None, tp0  # the CPU build prints no `Model loading took`: not measured
        serving = data["serving"]
        assert serving is not None and serving["counters"].get("spec_draft_tokens", 0) > 0, serving
        assert serving["spec_acceptance_pct"] is not None, serving

        plan = ck.run("plan", str(ck.profile), "--gpu-mem-gb", "10", "--set", f"kv-cache-memory-bytes={KV_SPACE}",
                      "--json")
        assert plan.returncode in (0, 1), plan.stdout + plan.stderr
        p = json.loads(plan.stdout)
        # the draft's KV: its bytes per token are what the engine's 1 GiB held beyond the target's
        assert p["terms"]["draft_kv_bytes_per_token"] == 512, p["terms"]
        assert p["kv_bytes_per_token"] == 1536 and p["kv_bytes_per_token"] * tokens <= KV_SPACE, p
        # the plan's tokens for the same 1 GiB: blocks of 16 (a GPU's) where the CPU takes 128
        planned = p["current"]["max_total_num_tokens"]
        assert 0 <= planned - tokens < CPU_BLOCK, (planned, tokens)
        # the draft's weights: loaded in bfloat16, half the float32 checkpoint the loader measured
        # (±0.005 GiB: the line's two decimals; +0.001: terms_gib's three)
        assert abs(2 * p["terms_gib"]["draft_weights_gib"] - draft_on_disk) <= 0.006 + 0.002, p["terms_gib"]
        assert p["weights_gib_per_rank"] >= p["terms_gib"]["draft_weights_gib"]
    finally:
        ck.reap()
