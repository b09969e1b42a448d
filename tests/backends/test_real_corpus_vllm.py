"""The real vLLM corpus (tests/data/real/vllm, format: tests/data/real/README.md): every stated
expectation checked through `cockpit diagnose --json`, as an operator would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real" / "vllm"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))
RANK_KEYS = {"pre_load_avail_gb", "weights_gb", "kv_gb", "avail_before_capture_gb", "graph_gb",
             "avail_after_capture_gb", "avail_after_weights_gb"}


def diagnose(path: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "cockpit", "diagnose", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 25
    for name in CASES:
        assert (CORPUS / f"{name}.log").is_file(), name


@pytest.mark.parametrize("name", CASES)
def test_excerpt(name: str, request: pytest.FixtureRequest) -> None:
    spec = yaml.safe_load((CORPUS / f"{name}.yaml").read_text(encoding="utf-8"))
    if spec.get("known_miss"):  # a named miss (docs/ACCURACY.md): it must still miss, or its name must go
        request.applymarker(pytest.mark.xfail(strict=True, reason=spec["known_miss"]))
    expect = spec.get("expect") or {}
    rc, out = diagnose(CORPUS / f"{name}.log")
    if expect.get("recognised") is False:
        assert out["backend"] != "vllm" or out["format"] in (None, "vllm-unknown")
        return
    assert out["backend"] == "vllm", name
    assert out["format"] and out["format"].startswith("vllm-")
    crash = out["crash"]
    if "crash" in expect:
        if expect["crash"] == "none":
            assert crash is None, crash
        else:
            assert crash is not None, f"{name}: no crash found, expected {expect['crash']}"
            assert crash["kind"] == expect["crash"], (name, crash["kind"], crash["message"][:200])
            assert rc == 1
    if "phase" in expect and crash is not None:
        assert crash["phase"] == expect["phase"], (name, crash["phase"])
    if "rank" in expect and crash is not None:
        assert crash["rank"] == expect["rank"], (name, crash["rank"])
    if "state" in expect:
        assert out["phase"] == expect["state"], (name, out["phase"])
    if "max_total_num_tokens" in expect:
        assert out["max_total_num_tokens"] == expect["max_total_num_tokens"]
    for rank, figures in (expect.get("ranks") or {}).items():
        got = {r["rank"]: r for r in out["ranks"]}
        assert rank in got, (name, rank, list(got))
        for key, value in figures.items():
            field = "after_weights_avail_gb" if key == "avail_after_weights_gb" else key
            assert key in RANK_KEYS
            assert got[rank].get(field) == pytest.approx(value, abs=0.006), (name, rank, key)
    found = {f["id"] for f in out["findings"]}
    for fid in expect.get("findings") or []:
        assert fid in found, (name, fid, sorted(found))
