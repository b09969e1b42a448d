"""`cockpit diagnose` on real log excerpts from public reports (tests/data/real/): every key an
excerpt's yaml states is what diagnose says, one test per file.

The comparison is bench/accuracy.py's (the same code path as `cockpit diagnose --json`, in
process), so the accuracy figures in docs/ACCURACY.md and this suite cannot disagree. Logs of a
server no backend reads yet (vllm/, until a vLLM backend exists) and files that are not logs at all
(nonlogs/) must be refused: exit 2 with "no SGLang or vLLM log lines recognised" (the engines
named when the file reads as none of them); logs of other programs (others/: llama.cpp, TGI,
TensorRT-LLM, LMDeploy, Ollama, Rust engines named after vLLM, benchmark clients) are refused with
exit 2 and "looks like <that program's log>, not SGLang or vLLM".
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("accuracy", Path(__file__).resolve().parents[2] / "bench" / "accuracy.py")
assert _spec is not None and _spec.loader is not None
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)

CASES = accuracy.cases()


def test_the_corpus_is_there() -> None:
    sglang = [c for c in CASES if c[0] == "sglang"]
    assert len(sglang) >= 40, "the SGLang corpus lost its excerpts"
    for directory, log, yml in CASES:
        doc = accuracy.yaml.safe_load(yml.read_text())
        assert doc.get("source") and isinstance(doc.get("expect"), dict), yml.name
        assert log.stat().st_size > 0 or directory == "nonlogs", log.name
    others = [c for c in CASES if c[0] == "others"]
    assert len(others) >= 20, "the negative corpus (other programs' logs) lost its excerpts"


@pytest.mark.parametrize(("directory", "log", "yml"), CASES, ids=[f"{d}/{p.stem}" for d, p, _ in CASES])
def test_excerpt(directory: str, log: Path, yml: Path, request: pytest.FixtureRequest) -> None:
    miss = (accuracy.yaml.safe_load(yml.read_text()) or {}).get("known_miss")
    if miss:  # a named miss (docs/ACCURACY.md): it must still miss, or its name must go
        request.applymarker(pytest.mark.xfail(strict=True, reason=miss))
    expect = accuracy.expectations(yml, accuracy.backend_reads(directory))
    assert expect, f"{yml.name} states no expectation"
    code, out, err = accuracy.diagnose_json(log)
    wrong = {k: (got, want) for k, (ok, got, want) in accuracy.compare(expect, code, out, err).items() if not ok}
    assert not wrong, f"{log.name}: (got, want) per key: {wrong} {err}"
    if directory == "others":
        # another program's log: refused, naming that program, before any of it is diagnosed
        assert code == 2 and out is None and f"looks like {expect['looks_like']}, not SGLang or vLLM" in err, err
    elif code == 2:
        # a file that reads as no engine's (nonlogs/) names them all; an engine's excerpt names its engine
        engines = {"nonlogs": "SGLang or vLLM", "sglang": "SGLang", "vllm": "vLLM"}[directory]
        # torch's or CUDA's words alone (issue 35): no engine's own line; the refusal names both
        # engines, or the one whose hints (a hostname, a path) scored the opening higher
        named = (engines, "SGLang or vLLM") if expect.get("recognised") is False else (engines,)
        assert any(err.startswith(f"no {e} log lines recognised in ") for e in named) and "lines read" in err, err
    else:
        json.dumps(out, allow_nan=False)  # strict JSON


def test_a_collection_batch_scores_alone() -> None:
    # issue 23's second batch: each excerpt says its batch, and --batch reads only those
    batch = accuracy.cases(batch="issue23-2")
    assert len(batch) >= 30
    assert {d for d, _, _ in batch} == {"sglang", "vllm"}
    assert all(accuracy.batch_of(yml) == "issue23-2" for _, _, yml in batch)
    assert not accuracy.cases(batch="no-such-batch")
