"""Log view filters: presets (each backend's words), regexes, ranks, highlight spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.logfilter import GENERIC_ERROR_WORDS, PRESET_NAMES, LineFilter

DATA = Path(__file__).resolve().parents[1] / "data"
KIMI = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_text().splitlines()
RECORD_RANK = get_backend("sglang").logs.record_rank
# the presets' words are the backend's (Backend.logs.filter_presets); "all" is the core's own
SGLANG = get_backend("sglang").logs.filter_presets()
FILTER_PRESETS = {**SGLANG, "all": ()}


def rank_of(line: str) -> str | None:
    return RECORD_RANK(line) or None


def ranked(lines: list[str]) -> list[tuple[str, str | None]]:
    """Each line with its record's rank, as the log reader (NodeLog) labels it: continuation
    lines (a traceback) inherit the rank of the record they belong to."""
    out, rank = [], None
    for line in lines:
        r = RECORD_RANK(line)
        if r is not None:
            rank = r or None
        out.append((line, rank))
    return out


def test_presets_are_the_tui_issue_words() -> None:
    assert FILTER_PRESETS["memory"] == ("avail mem", "max_total_num", "KV Cache", "Allocating", "Capture")
    assert FILTER_PRESETS["errors"] == ("Traceback", "Error", "CUDA out of memory", "OutOfMemoryError", "RuntimeError",
                                 "SIGQUIT", "exception", "Killed")
    assert FILTER_PRESETS["batches"] == ("Prefill batch", "Decode batch")
    assert FILTER_PRESETS["all"] == ()


def test_memory_preset_on_a_real_log() -> None:
    f = LineFilter("memory", presets=SGLANG)
    kept = [line for line in KIMI if f.matches(line)]
    assert any("Capture cuda graph end" in k and "TP3" in k for k in kept)
    assert any(k.startswith("[") and "max_total_num_tokens=" in k for k in kept)
    assert not any("Decode batch" in k for k in kept)
    assert any("Allocating 48.00 GB" in k for k in kept)


def test_errors_preset_catches_what_grep_error_oom_misses() -> None:
    f = LineFilter("errors", presets=SGLANG)
    kept = [line for line in KIMI if f.matches(line)]
    assert any("Scheduler hit an exception" in k for k in kept)
    assert any(k.startswith("torch.OutOfMemoryError") for k in kept)
    assert any("SIGQUIT received" in k for k in kept)
    assert kept[-1] == "Killed"


def test_batches_and_all() -> None:
    f = LineFilter("batches", presets=SGLANG)
    assert f.matches("[2026-02-24 11:51:25 TP0] Decode batch, #running-req: 1")
    assert not f.matches("[2026-02-24 11:51:25] INFO:     x")
    a = LineFilter()
    assert a.is_all and all(a.matches(line) for line in KIMI)
    assert a.spans("anything") == []


def test_regex_and_invalid_regex() -> None:
    f = LineFilter(r"avail mem=\d\.\d\d")
    assert f.matches("[2026-02-24 11:51:25 TP3] Capture cuda graph end. Time elapsed: 18.44 s. mem usage=3.75 GB. avail mem=0.82 GB.")
    assert not f.matches("avail mem=12.20 GB")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        LineFilter("avail mem=(")


def test_rank_filter_follows_continuation_lines() -> None:
    f = LineFilter("all", rank="3")
    kept = [line for line, rank in ranked(KIMI) if f.matches(line, rank)]
    assert kept and all(" TP3]" in k or not k.startswith("[") for k in kept)
    # TP3's traceback stays with it; the main process's SIGQUIT line does not
    assert any(k.startswith("torch.OutOfMemoryError") for k in kept)
    assert not any("SIGQUIT" in k for k in kept)
    assert LineFilter("all", rank="TP3").matches("[2026-02-24 11:51:25.123 TP3] x", rank_of("[2026-02-24 11:51:25.123 TP3] x"))
    assert not LineFilter("all", rank="TP3").matches("[2026-02-24 11:51:25 TP13] x", rank_of("[2026-02-24 11:51:25 TP13] x"))
    assert LineFilter("all", rank="tp3").matches("[2026-02-24 11:51:25 DP3 TP3 EP3] x", rank_of("[2026-02-24 11:51:25 DP3 TP3 EP3] x"))
    assert LineFilter("all", rank="DP1 TP3").matches("[2026-02-24 11:51:25 DP1 TP3] x", rank_of("[2026-02-24 11:51:25 DP1 TP3] x"))
    assert not LineFilter("all", rank="DP1 TP3").matches("[2026-02-24 11:51:25 DP0 TP3] x", rank_of("[2026-02-24 11:51:25 DP0 TP3] x"))
    with pytest.raises(ValueError):
        LineFilter("all", rank="  ")


def test_preset_plus_rank() -> None:
    f = LineFilter("memory", rank="TP3", presets=SGLANG)
    kept = [line for line, rank in ranked(KIMI) if f.matches(line, rank)]
    assert kept and all("TP3]" in k for k in kept)
    assert any("avail mem=0.82" in k for k in kept)


def test_spans_for_highlighting() -> None:
    f = LineFilter("errors", presets=SGLANG)
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried"
    spans = f.spans(text)
    # "Error" lies inside "OutOfMemoryError": merged into one span
    assert spans == [(6, 22), (24, 42)]
    assert [text[s:e] for s, e in spans] == ["OutOfMemoryError", "CUDA out of memory"]
    r = LineFilter(r"mem(ory)?")
    assert r.spans("avail mem=1 memory") == [(6, 9), (12, 18)]
    assert LineFilter("x*").spans("abc") == []


def test_record_rank() -> None:
    assert RECORD_RANK("[2026-02-24 11:51:25.123 DP1 TP3] x") == "DP1 TP3"
    assert RECORD_RANK("[2026-02-24 11:51:25] x") == ""
    assert RECORD_RANK("  File x") is None


# ---- vLLM's words: the same presets on vLLM logs --------------------------------------------------

VLLM = get_backend("vllm").logs.filter_presets()
VLLM_092 = (DATA / "vllm-0.33.0-qwen32b-tp2-0.92-healthy.log").read_text().splitlines()
VLLM_097 = (DATA / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log").read_text().splitlines()
VLLM_RANK = get_backend("vllm").logs.record_rank


def test_every_backend_lists_every_preset() -> None:
    for name in ("sglang", "vllm"):
        presets = get_backend(name).logs.filter_presets()
        assert set(presets) == set(PRESET_NAMES) - {"all"}
        assert all(presets[p] for p in presets)


def test_vllm_memory_preset_keeps_the_memory_lifecycle() -> None:
    f = LineFilter("memory", presets=VLLM)
    kept = [line for line in VLLM_092 if f.matches(line)]
    for needle in ("Model loading took 30.59 GiB", "Available KV cache memory: 38.35 GiB", "GPU KV cache size: 314,160 tokens",
                   "Graph capturing finished", "CUDA graph pool memory", "Free memory on device (78.31/79.19 GiB)"):
        assert any(needle in k for k in kept), needle
    assert not any("Avg prompt throughput" in k for k in kept)
    # SGLang's words miss vLLM's lines: the reason the words are the backend's
    sg = LineFilter("memory", presets=SGLANG)
    assert not any("Available KV cache memory" in k for k in VLLM_092 if sg.matches(k))


def test_vllm_errors_and_batches() -> None:
    errors = [line for line in VLLM_097 if LineFilter("errors", presets=VLLM).matches(line)]
    assert any("torch.OutOfMemoryError: CUDA out of memory" in k for k in errors)
    assert any("EngineCore encountered" in k or "EngineDeadError" in k or "WorkerProc" in k for k in errors)
    assert not any("Available KV cache memory" in k for k in errors)
    batches = [line for line in VLLM_097 if LineFilter("batches", presets=VLLM).matches(line)]
    assert batches and all("Avg prompt throughput" in k for k in batches)


def test_vllm_preset_plus_rank() -> None:
    f = LineFilter("memory", rank="TP1", presets=VLLM)
    kept, rank = [], None
    for line in VLLM_092:
        r = VLLM_RANK(line)
        if r is not None:
            rank = r or None
        if f.matches(line, rank):
            kept.append(line)
    assert kept and all("Worker_TP1" in k for k in kept)
    assert any("Model loading took" in k for k in kept)


def test_without_the_backends_words() -> None:
    """The core lists no engine's words: "errors" falls back to what any Python/CUDA process prints,
    the engine-specific presets are refused rather than guessed."""
    assert LineFilter("errors").matches("torch.OutOfMemoryError: CUDA out of memory.")
    assert LineFilter("errors")._needles == GENERIC_ERROR_WORDS
    with pytest.raises(ValueError, match="needs the server's own words"):
        LineFilter("memory")
    assert LineFilter("all").is_all
