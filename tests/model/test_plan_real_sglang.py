"""The real SGLang start-up logs behind the memory plan's accuracy (tests/data/real/plan/sglang/).

Each NAME.log is a verbatim excerpt of a public report; NAME.yaml names the model, GPU and flags
(what a plan before launch would know) and the figures the text prints. Cockpit's own reader must
find every printed figure, so bench/plan_real_sglang.py measures the plan against numbers the
parser really reads, and the flags the yaml gives the plan are the ones the log's server args show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cockpit.backends import get_backend

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real" / "plan" / "sglang"
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
CASES = sorted(CORPUS.glob("*.yaml"))
# the corpus's per-rank keys (tests/data/real/README.md) -> RankMemory's attributes
RANK_KEYS = {
    "pre_load_avail_gb": "pre_load_avail_gb",
    "weights_gb": "weights_gb",
    "avail_after_weights_gb": "after_weights_avail_gb",
    "kv_tokens": "kv_tokens",
    "kv_gb": "kv_gb",
    "avail_before_capture_gb": "avail_before_capture_gb",
    "graph_gb": "graph_gb",
    "avail_after_capture_gb": "avail_after_capture_gb",
}


def _doc(yml: Path) -> dict[str, Any]:
    doc = yaml.safe_load(yml.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), yml.name
    return doc


def test_the_corpus_is_there() -> None:
    assert CASES, "the plan's real-log corpus lost its excerpts"
    for yml in CASES:
        doc = _doc(yml)
        assert doc.get("source") and str(doc.get("url", "")).startswith("https://github.com/"), yml.name
        assert (yml.with_suffix(".log")).stat().st_size > 0, yml.name
        plan = doc["plan"]
        assert (MODELS / plan["model"] / "config.json").is_file(), f"{yml.name}: no model folder {plan['model']}"
        assert plan["gpu_total_gib"] > 0 and plan["gpus"] >= 1 and plan.get("gpu_note"), yml.name


@pytest.mark.parametrize("yml", CASES, ids=[p.stem for p in CASES])
def test_the_reader_finds_every_printed_figure(yml: Path) -> None:
    doc = _doc(yml)
    expect = doc["expect"]
    st = get_backend("sglang").logs.read(yml.with_suffix(".log"))
    if "max_total_num_tokens" in expect:
        assert st.max_total_num_tokens == expect["max_total_num_tokens"]
    assert expect.get("ranks"), f"{yml.name} states no per-rank figure"
    for rank, figures in expect["ranks"].items():
        assert rank in st.ranks, f"{yml.name}: {rank} not read; ranks seen: {list(st.ranks)}"
        got = st.ranks[rank]
        for key, want in figures.items():
            assert getattr(got, RANK_KEYS[key]) == pytest.approx(want, abs=1e-9), f"{yml.name} {rank} {key}"


@pytest.mark.parametrize("yml", CASES, ids=[p.stem for p in CASES])
def test_the_plan_gets_the_flags_the_log_shows(yml: Path) -> None:
    """A flag the yaml hands the plan must be the value the log's server args print (when it prints
    them), and the ranks the log shows must be the ones the parallelism implies."""
    doc = _doc(yml)
    flags = doc["plan"]["flags"]
    st = get_backend("sglang").logs.read(yml.with_suffix(".log"))
    for key, value in flags.items():
        if key in st.server_args and st.server_args[key] is not None:
            assert st.server_args[key] == pytest.approx(value), f"{yml.name}: {key}"
    tp = int(flags.get("tp_size", 1))
    assert doc["plan"]["gpus"] >= tp
    assert len(st.ranks) <= doc["plan"]["gpus"], f"{yml.name}: more ranks in the log than GPUs in the yaml"


@pytest.mark.parametrize("yml", CASES, ids=[p.stem for p in CASES])
def test_the_plan_before_launch_lands_near_the_log(yml: Path) -> None:
    """The issue's bar on real logs, before calibration: headroom after capture within 1 GiB, KV tokens
    within 3 % (a case whose yaml names a reason the plan cannot see from model and card, or an estimate
    the log is the first to check — `known_token_miss`, `known_headroom_miss` — is held to still missing
    by it, so the note goes when the plan learns it; docs/PLAN.md gives the figures)."""
    import bench.plan_real_sglang as bench

    case = next(c for c in bench.cases() if c.name == yml.stem)
    mp, _cfg, _s = bench.make_plan(case)
    cur = mp.current
    assert cur is not None
    head_log = bench.headroom_of(case)
    tok_log = bench.tokens_of(case)
    # a log cut before capture end proves the pool only (tokens), one cut before the pool nothing to hold
    assert head_log is not None or tok_log, f"{yml.name}: the log shows neither the headroom nor the pool"
    if head_log is not None and case.doc.get("known_headroom_miss"):
        # the named estimate still misses by more than 1 GiB; when the plan learns it, drop the note
        assert abs(cur.headroom_after_capture_gib - head_log) > 1.0, f"the known miss is gone: {case.doc['known_headroom_miss']}"
    elif head_log is not None:
        assert cur.headroom_after_capture_gib == pytest.approx(head_log, abs=1.0)
    if tok_log and case.doc.get("known_token_miss"):
        # the named reason still costs more than 3 %; when the plan learns it, drop the yaml's note
        assert abs(cur.max_total_num_tokens / tok_log - 1) > 0.03, f"the known miss is gone: {case.doc['known_token_miss']}"
    elif tok_log:
        assert cur.max_total_num_tokens == pytest.approx(tok_log, rel=0.03)
