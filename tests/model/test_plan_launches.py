"""The plan from config.json alone against every real launch the project holds (issue 25's bar):
at least 15 launches whose config.json, card, parallelism, memory flag and printed KV tokens are
known, and at least 80 % of them planned within 5 % of the KV tokens the server printed — with no
safetensors index or header, only config.json. bench/plan_launches.py prints the table.

The launches of tests/data/real/plan/launches.yaml carry the lines of their logs that prove them;
this test holds every stated figure to those lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

import bench.plan_launches as bench

PLAN = Path(__file__).resolve().parents[1] / "data" / "real" / "plan"
NEW = yaml.safe_load((PLAN / "launches.yaml").read_text(encoding="utf-8"))["launches"]


def test_at_least_fifteen_launches_with_sources() -> None:
    ls = bench.launches()
    assert len(ls) >= 15
    for la in ls:
        assert la.source.startswith("https://github.com/"), la.name
        assert la.kv_tokens > 0 and la.gpu_total_gib > 0


@pytest.mark.parametrize("d", NEW, ids=[d["name"] for d in NEW])
def test_each_new_launch_is_proven_by_its_quoted_lines(d: dict) -> None:
    text = "\n".join(d["quoted"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert m and int(m.group(1).replace(",", "")) == d["kv_tokens"]
    m = re.search(r"total_memory=([\d.]+)GiB", text)
    assert m and float(m.group(1)) == d["gpu_total_gib"]
    m = re.search(r"non-default args: (\{.*\})", text)
    assert m, "the flags vLLM printed"
    args = ast.literal_eval(m.group(1))
    for key, value in d["flags"].items():
        assert args.get(key) == value, key
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len"):
        if key in args:
            assert d["flags"].get(key) == args[key], f"the log sets {key}; the yaml must hand it to the plan"
    assert d["version"] in d["url"] and "/logs/" in d["url"]


def test_eighty_percent_land_within_five_percent_from_config_alone() -> None:
    ls = bench.launches()
    errs = {la.name: bench.error(la) for la in ls}
    within = [n for n, e in errs.items() if e is not None and abs(e) <= bench.BAND]
    assert len(within) >= bench.SHARE * len(ls), {n: e for n, e in errs.items() if n not in within}


def test_the_launchs_dtype_reaches_the_plan() -> None:
    """The float32 launch of a bfloat16 checkpoint holds 4 bytes per weight and KV element; the
    fp8 KV launch 1 byte per KV element: both land within the band only through the launch's dtype."""
    by = {la.name: la for la in bench.launches()}
    f32 = bench.plan_from_config(by["llama-3.1-8b-dtype-float32"])
    bf16 = bench.plan_from_config(by["llama-3.1-8b-tp1"])
    fp8 = bench.plan_from_config(by["llama-3.1-8b-kv-fp8"])
    assert f32.weights_gib_per_rank == pytest.approx(2 * bf16.weights_gib_per_rank, rel=1e-6)
    assert f32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token == 4 * fp8.kv_bytes_per_token
    for name in ("llama-3.1-8b-dtype-float32", "llama-3.1-8b-kv-fp8"):
        err = bench.error(by[name])
        assert err is not None and abs(err) <= bench.BAND, (name, err)
