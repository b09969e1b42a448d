"""A REAL speculative-decoding start-up (issue 25): vLLM 0.32.0's CPU build serving tiny-llama with
its draft model (tests/data/real-engine/vllm-0.32.0-cpu-spec-draft-model.log, written by the engine
on this machine; command, env and checkpoints in the .yaml beside it, their config.json files in
spec-draft-model/). The log is the judge of the plan's draft terms: the KV tokens its 1 GiB
(VLLM_CPU_KVCACHE_SPACE, the CPU build's stand-in for a GPU's memory) holds with the draft's layer,
and the draft checkpoint's size the loader printed after `Loading drafter model...`.
tests/real_engine/test_spec_decode.py launches the same profile through `cockpit up`. A second real
log (vllm-0.32.0-cpu-spec-ngram.log) is method ngram: no draft weights, no draft KV."""

from __future__ import annotations

import json
from pathlib import Path

from cockpit.backends import get_backend
from tests.model.test_plan import cockpit

DATA = Path(__file__).resolve().parents[1] / "data" / "real-engine"
LOG = DATA / "vllm-0.32.0-cpu-spec-draft-model.log"
NO_DRAFT_LOG = DATA / "vllm-0.32.0-cpu-outside-sigterm-after-ready.log"  # the same target, 1 GiB, no draft
NGRAM_LOG = DATA / "vllm-0.32.0-cpu-spec-ngram.log"  # the same target, 1 GiB, method ngram
TARGET = DATA / "spec-draft-model" / "tiny-llama"
DRAFT = DATA / "spec-draft-model" / "tiny-draft-llama"
KV_SPACE = 2**30  # VLLM_CPU_KVCACHE_SPACE=1
CPU_BLOCK = 128  # vLLM's CPU platform block size when none is asked (vllm/platforms/cpu.py)


def test_the_drafters_lines_are_read() -> None:
    st = get_backend("vllm").logs.read(LOG)
    assert st.phase == "ready" and st.device == "cpu" and st.format == "vllm-0.32.0"
    assert st.server_args["speculative_config"]["method"] == "draft_model"
    assert st.max_total_num_tokens == 699_008
    tp0 = st.ranks["TP0"]
    # the loader's `Checkpoint size` once per model: the target's, then (after `Loading drafter
    # model...`) the draft's
    assert tp0.figures["checkpoint_gb"] == 0.0
    assert tp0.figures["draft_checkpoint_gb"] == 0.09
    assert tp0.kv_gb == 1.0 and tp0.kv_tokens == 699_008
    assert tp0.weights_gb is None  # the CPU build prints no `Model loading took`: not measured
    assert st.lines_unparsed == 0
    # without a draft the loader's line is the model's own
    plain = get_backend("vllm").logs.read(NO_DRAFT_LOG).ranks["TP0"].figures
    assert "checkpoint_gb" in plain and "draft_checkpoint_gb" not in plain


def _plan(tmp_path: Path, spec: dict[str, object] | None) -> dict:  # type: ignore[type-arg]
    args = ["plan", "--model-config", str(TARGET), "--backend", "vllm", "--server-version", "0.32.0",
            "--gpu-mem-gb", "10", "--tp", "1", "--set", "dtype=bfloat16", "--set", "max-model-len=512",
            "--set", f"kv-cache-memory-bytes={KV_SPACE}", "--json"]
    if spec is not None:
        args += ["--set", "speculative-config=" + json.dumps(spec)]
    res = cockpit(*args, env_root=tmp_path)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    out: dict = json.loads(res.stdout)  # type: ignore[type-arg]
    return out


def test_the_plans_draft_terms_meet_the_log(tmp_path: Path) -> None:
    logged = get_backend("vllm").logs.read(LOG)
    spec = {"method": "draft_model", "model": str(DRAFT), "num_speculative_tokens": 2}
    p = _plan(tmp_path, spec)
    alone = _plan(tmp_path, None)
    # KV: the draft's one layer beside the target's two; the engine's 1 GiB over its tokens is the
    # bytes a token costs (within one CPU block)
    assert p["terms"]["draft_kv_bytes_per_token"] == 512
    assert p["kv_bytes_per_token"] == alone["kv_bytes_per_token"] + 512 == 1536
    tokens = logged.max_total_num_tokens
    assert tokens is not None
    assert p["kv_bytes_per_token"] * tokens <= KV_SPACE < p["kv_bytes_per_token"] * (tokens + CPU_BLOCK)
    # the plan's tokens: blocks of 16 (a GPU's), the engine's of 128: at most one CPU block apart
    assert 0 <= p["current"]["max_total_num_tokens"] - tokens < CPU_BLOCK
    assert alone["current"]["max_total_num_tokens"] == 1_048_576 == get_backend("vllm").logs.read(NO_DRAFT_LOG).max_total_num_tokens
    # weights: loaded in bfloat16, half the float32 checkpoint the drafter's loader measured
    # (±0.005 GiB for the line's two decimals, ±0.0005 for terms_gib's three)
    draft_gib = p["terms_gib"]["draft_weights_gib"]
    assert abs(2 * draft_gib - logged.ranks["TP0"].figures["draft_checkpoint_gb"]) <= 0.006
    assert abs(p["weights_gib_per_rank"] - alone["weights_gib_per_rank"] - draft_gib) <= 0.006
    assert "draft_weights_gib" not in alone["terms_gib"] and "draft_kv_bytes_per_token" not in alone["terms"]


def test_an_unread_draft_is_no_draft_term(tmp_path: Path) -> None:
    """A draft the plan could not read (here: none named) is said in the notes, and no draft term
    claims a 0."""
    p = _plan(tmp_path, {"method": "eagle", "num_speculative_tokens": 2})  # no "model": nothing to read
    assert "draft_weights_gib" not in p["terms_gib"] and "draft_kv_bytes_per_token" not in p["terms"]
    assert any("was not read" in n for n in p["notes"]), p["notes"]


def test_an_ngram_launch_drafts_without_weights_or_kv(tmp_path: Path) -> None:
    """The n-gram proposer prints `Loading drafter model...` too, but loads nothing and takes no
    KV: the engine's tokens are the target's alone, as the plan says (draft terms 0)."""
    st = get_backend("vllm").logs.read(NGRAM_LOG)
    assert st.server_args["speculative_config"]["method"] == "ngram"
    assert st.phase == "ready" and st.max_total_num_tokens == 1_048_576
    assert "draft_checkpoint_gb" not in st.ranks["TP0"].figures
    p = _plan(tmp_path, dict(st.server_args["speculative_config"]))
    assert p["terms_gib"]["draft_weights_gib"] == 0.0 and p["terms"]["draft_kv_bytes_per_token"] == 0.0
    assert p["current"]["max_total_num_tokens"] == st.max_total_num_tokens
