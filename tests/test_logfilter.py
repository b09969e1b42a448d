"""Log view filters: presets, regexes, ranks, highlight spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.logfilter import FILTER_PRESETS, LineFilter

DATA = Path(__file__).parent / "data"
KIMI = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_text().splitlines()
RECORD_RANK = get_backend("sglang").record_rank


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
    f = LineFilter("memory")
    kept = [line for line in KIMI if f.matches(line)]
    assert any("Capture cuda graph end" in k and "TP3" in k for k in kept)
    assert any(k.startswith("[") and "max_total_num_tokens=" in k for k in kept)
    assert not any("Decode batch" in k for k in kept)
    assert any("Allocating 48.00 GB" in k for k in kept)


def test_errors_preset_catches_what_grep_error_oom_misses() -> None:
    f = LineFilter("errors")
    kept = [line for line in KIMI if f.matches(line)]
    assert any("Scheduler hit an exception" in k for k in kept)
    assert any(k.startswith("torch.OutOfMemoryError") for k in kept)
    assert any("SIGQUIT received" in k for k in kept)
    assert kept[-1] == "Killed"


def test_batches_and_all() -> None:
    f = LineFilter("batches")
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
    f = LineFilter("memory", rank="TP3")
    kept = [line for line, rank in ranked(KIMI) if f.matches(line, rank)]
    assert kept and all("TP3]" in k for k in kept)
    assert any("avail mem=0.82" in k for k in kept)


def test_spans_for_highlighting() -> None:
    f = LineFilter("errors")
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
