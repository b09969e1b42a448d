"""Real vLLM start-up logs for the memory plan (tests/data/real/plan/vllm/): the backend's own reader
gets every figure each yaml's `expect` states, the figures a log prints without a rank label
(`printed`, Ray workers) are in its text as stated, and the plan can be made for every case from the
yaml's `plan` section alone (model config, GPU total, the logged flags).

How close the plan comes is measured by bench/plan_real_vllm.py, not asserted here: the misses are
the integrator's to fix in cockpit/backends/vllm/plan.py. What is asserted of the plan is what the
logs prove exactly: the model half (KV bytes per token, 16-token blocks) turns each log's own
`Available KV cache memory` into its `GPU KV cache size` to within the rounding of the printed GiB.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cockpit.backends import get_backend
from cockpit.backends.vllm import plan as vplan
from cockpit.model.config import parse_config
from cockpit.model.plan import GpuFacts
from cockpit.model.weights import GIB, Tensor, index_from_headers
from tests.data.models import synth

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real" / "plan" / "vllm"
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
YAMLS = sorted(CORPUS.glob("*.yaml"))
RANK_KEYS = ("pre_load_avail_gb", "weights_gb", "kv_gb", "graph_gb", "avail_after_capture_gb")
# how each `printed` figure reads in the text
PRINTED = {"weights_gb": r"Model loading took ([\d.]+) GiB", "kv_gb": r"Available KV cache memory: ([\d.]+) GiB",
           "graph_gb": r"secs, took ([\d.]+) GiB"}


def _doc(yml: Path) -> dict[str, Any]:
    return yaml.safe_load(yml.read_text(encoding="utf-8"))


def _model(name: str) -> tuple[Any, Any]:
    raw = synth.load_config(name)
    return parse_config(raw, name, name=name), index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)


def test_the_corpus_is_there() -> None:
    assert len(YAMLS) >= 6, "the real vLLM plan corpus lost its logs"
    for yml in YAMLS:
        doc = _doc(yml)
        assert yml.with_suffix(".log").stat().st_size > 0, yml.name
        assert doc.get("source") and doc.get("url", "").startswith("https://github.com/"), yml.name
        plan = doc["plan"]
        assert (MODELS / plan["model"] / "config.json").is_file(), f"{yml.name}: no model folder {plan['model']}"
        assert plan["gpu_total_gib"] > 0 and plan.get("gpu_note"), yml.name
        assert int(plan["flags"].get("tensor_parallel_size", 1)) == int(plan["gpus"]), yml.name
        assert isinstance(doc.get("expect"), dict) and doc["expect"].get("max_total_num_tokens"), yml.name


@pytest.mark.parametrize("yml", YAMLS, ids=[y.stem for y in YAMLS])
def test_the_reader_gets_what_the_text_proves(yml: Path) -> None:
    doc = _doc(yml)
    st = get_backend("vllm").logs.read(yml.with_suffix(".log"))
    expect = doc["expect"]
    assert st.max_total_num_tokens == expect["max_total_num_tokens"]
    if "crash" in expect:
        assert (st.crash.kind if st.crash else "none") == expect["crash"]
    for rank, figures in (expect.get("ranks") or {}).items():
        assert rank in st.ranks, f"{yml.name}: no rank {rank} (got {sorted(st.ranks)})"
        got = st.ranks[rank]
        for key, want in figures.items():
            assert key in RANK_KEYS, f"{yml.name}: unknown rank key {key}"
            assert getattr(got, key) == pytest.approx(want, abs=1e-9), f"{yml.name} {rank} {key}"


@pytest.mark.parametrize("yml", [y for y in YAMLS if _doc(y).get("printed")], ids=lambda y: y.stem)
def test_printed_figures_are_in_the_text(yml: Path) -> None:
    text = yml.with_suffix(".log").read_text(encoding="utf-8")
    for key, value in _doc(yml)["printed"].items():
        seen = {float(v) for v in re.findall(PRINTED[key], text)}
        assert float(value) in seen, f"{yml.name}: {key} {value} is not printed (the text prints {sorted(seen)})"


@pytest.mark.parametrize("yml", YAMLS, ids=[y.stem for y in YAMLS])
def test_the_plan_is_made_from_the_yaml_alone(yml: Path) -> None:
    doc = _doc(yml)
    plan = doc["plan"]
    cfg, idx = _model(plan["model"])
    s = vplan.settings_from_flags(plan["flags"], str(doc["version"]))
    mp = vplan.plan(cfg, idx, GpuFacts(float(plan["gpu_total_gib"])), s)
    assert mp.current is not None and mp.current.flag == vplan.FLAG
    assert mp.current.value == pytest.approx(float(plan["flags"]["gpu_memory_utilization"]))
    assert mp.tp == int(plan["gpus"]) and mp.weights_gib_per_rank > 0


@pytest.mark.parametrize("yml", YAMLS, ids=[y.stem for y in YAMLS])
def test_the_logs_kv_gib_gives_its_tokens_through_the_plans_bytes_per_token(yml: Path) -> None:
    doc = _doc(yml)
    kv = [f["kv_gb"] for f in (doc["expect"].get("ranks") or {}).values() if "kv_gb" in f]
    kv += [doc["printed"]["kv_gb"]] if "kv_gb" in (doc.get("printed") or {}) else []
    assert kv, f"{yml.name}: no KV GiB to check"
    plan = doc["plan"]
    cfg, _ = _model(plan["model"])
    s = vplan.settings_from_flags(plan["flags"], str(doc["version"]))
    cell = vplan.cell_bytes(cfg, s)
    tokens = vplan.kv_tokens(min(kv), cell, vplan.DEFAULT_BLOCK)
    # the printed GiB are rounded to 0.01: ±0.005 GiB, plus one block either side
    slack = math.ceil(0.005 * GIB / cell) + vplan.DEFAULT_BLOCK
    assert abs(tokens - doc["expect"]["max_total_num_tokens"]) <= slack, (tokens, doc["expect"]["max_total_num_tokens"], slack)


@pytest.mark.parametrize("yml", YAMLS, ids=[y.stem for y in YAMLS])
def test_the_plan_before_launch_lands_near_the_log(yml: Path) -> None:
    """The issue's bar, before calibration: KV tokens within 3 % of the log's, and — where the log prints
    vLLM's per-rank summary (`Free memory on device (F/T GiB) on startup … Current kv cache memory in use
    is …`) — the free memory after start-up within 1 GiB of the plan's. A case whose yaml names a reason
    the plan cannot see from model, card and flags (`known_token_miss`, `known_headroom_miss`) is held to
    that miss instead, so the note goes when the plan learns the reason."""
    import bench.plan_real_vllm as bench

    doc = yaml.safe_load(yml.read_text(encoding="utf-8"))
    case = next(c for c in bench.cases() if c.log == yml.with_suffix(".log"))
    out = bench.measure(case)
    assert out.tok_plan and out.tok_log
    if doc.get("known_token_miss"):
        # the named reason still costs more than 3 %; when the plan learns it, drop the yaml's note
        assert abs(out.tok_plan / out.tok_log - 1) > 0.03, f"the known miss is gone: {doc['known_token_miss']}"
    else:
        assert out.tok_plan == pytest.approx(out.tok_log, rel=0.03)
    if out.free_log is None:
        assert not doc.get("known_headroom_miss"), "a headroom note on a log that prints no free memory after start-up"
        return
    assert out.free_plan is not None
    if doc.get("known_headroom_miss"):
        assert abs(out.free_plan - out.free_log) > 1.0, f"the known headroom miss is gone: {doc['known_headroom_miss']}"
    else:
        assert out.free_plan == pytest.approx(out.free_log, abs=1.0)
