"""Issue 36's second first-sight batch (tests/data/real/plan/launches-issue36b.yaml): sixteen public
launches the project had never used, each proven by its log's lines verbatim, scored from config.json
alone by `bench/plan_tight.py --batch issue36b` (docs/PLAN.md records the first-sight score and now)."""

from __future__ import annotations

import ast
import re

import pytest

import bench.plan_tight as tight

LAUNCHES = tight.launches("issue36b")


def test_the_batch_is_new_to_the_project() -> None:
    """None of these logs is one the earlier batches used (the same sweep, other runs)."""
    used = {la.doc["url"] for la in tight.launches("tight")}
    import bench.plan_launches as pl

    used |= {la.source for la in pl.launches()}
    assert len(LAUNCHES) >= 15
    assert not used & {la.doc["url"] for la in LAUNCHES}
    assert len({la.doc["url"] for la in LAUNCHES}) == len(LAUNCHES)


@pytest.mark.parametrize("la", LAUNCHES, ids=[la.name for la in LAUNCHES])
def test_each_launch_is_proven_by_its_quoted_lines(la: tight.Tight) -> None:
    d = la.doc
    text = "\n".join(d["quoted"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert m and int(m.group(1).replace(",", "")) == d["kv_tokens"]
    m = re.search(r"non-default args: (\{.*\})", text)
    assert m, "the flags as vLLM printed them"
    args = ast.literal_eval(m.group(1))
    assert all(args[k] == v for k, v in d["flags"].items())
    assert args["model"] == d["hf_id"]
    m = re.search(r"Requested memory: ([\d.]+) \(util\)", text)
    assert m and float(m.group(1)) == d["flags"]["gpu_memory_utilization"]
    assert "total_memory=79.19GiB" in text
    m = re.search(r"Available KV cache memory: ([\d.]+) GiB", text)
    assert m and float(m.group(1)) == d["measured_gib"]["kv_cache"]
    m = re.search(r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB; "
                  r"weights memory: ([\d.]+)GiB", text)
    got = d["measured_gib"]
    assert m and (got["activation_peak"], got["non_torch"], got["weights"]) == tuple(float(x) for x in m.groups())
    assert d["version"] in d["url"] and "/logs/" in d["url"] and d["url"].startswith("https://github.com/")
    assert (tight.PLAN / d["config"]).is_file()


def test_the_batch_meets_the_bar_and_no_launch_that_ran_has_a_zero_high_end() -> None:
    """≥ 80 % within 5 % of the printed tokens, and every launch (all of them ran) has a band whose
    high end starts."""
    within, zero_high = [], []
    for la in LAUNCHES:
        mp = tight.plan_of(la)
        assert mp.current is not None and mp.weights_source == "config"
        err = (mp.current.max_total_num_tokens - la.kv_tokens) / la.kv_tokens
        within.append(abs(err) <= tight.BAND)
        band = tight.band_of(mp)
        assert band is not None
        if band[1] <= 0:
            zero_high.append(la.name)
    assert sum(within) >= tight.SHARE * len(LAUNCHES), within
    assert not zero_high
