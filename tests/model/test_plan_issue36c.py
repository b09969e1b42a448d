"""Issue 36's third first-sight batch (tests/data/real/plan/launches-issue36c.yaml): fifteen public
launches the plan had never scored — ROCm, SGLang, Blackwell, MLA, MoE, FP8/INT8, sliding window —
each proven by its source's lines verbatim, scored from config.json alone by
`bench/plan_tight.py --batch issue36c` (docs/PLAN.md records the first-sight score)."""

from __future__ import annotations

import ast
import re

import pytest

import bench.plan_launches as pl
import bench.plan_tight as tight

LAUNCHES = tight.launches("issue36c")


def test_the_batch_is_new_to_the_project() -> None:
    """No launch of this batch is one an earlier batch scored."""
    used = {la.doc["url"] for batch in ("tight", "issue36b") for la in tight.launches(batch)}
    used |= {la.source for la in pl.launches()}
    assert len(LAUNCHES) >= 15
    assert not used & {la.doc["url"] for la in LAUNCHES}
    assert len({la.name for la in LAUNCHES}) == len(LAUNCHES)
    assert len({la.doc["url"] for la in LAUNCHES}) == len(LAUNCHES)


def _printed_tokens(text: str) -> int | None:
    """The KV tokens as the engine printed them: vLLM V1's token count, vLLM V0's blocks × 16, or
    SGLang's pool line."""
    if m := re.search(r"GPU KV cache size: ([\d,]+) tokens", text):
        return int(m.group(1).replace(",", ""))
    if m := re.search(r"# (?:rocm|GPU) blocks: (\d+)", text):
        return int(m.group(1)) * 16
    if m := re.search(r"#tokens: (\d+)", text) or re.search(r"max_total_num_tokens=(\d+)", text):
        return int(m.group(1))
    return None


@pytest.mark.parametrize("la", LAUNCHES, ids=[la.name for la in LAUNCHES])
def test_each_launch_is_proven_by_its_quoted_lines(la: tight.Tight) -> None:
    d = la.doc
    text = "\n".join(d["quoted"])
    assert _printed_tokens(text) == d["kv_tokens"]
    assert (tight.PLAN / d["config"]).is_file()
    assert d["url"].startswith("https://")
    if m := re.search(r"non-default args: (\{.*\})", text):  # vLLM V1 prints the flags it was given
        args = ast.literal_eval(m.group(1))
        assert args["model"] == d["hf_id"]
        assert all(args[k] == v for k, v in d["flags"].items())
    if d["engine"] == "vllm" and (m := re.search(r"Available KV cache memory: ([\d.]+) GiB", text)):
        assert float(m.group(1)) == d["measured_gib"]["kv_cache"]
    if (util := d["flags"].get("gpu_memory_utilization")) is not None and "non-default args" not in text:
        assert f"gpu-memory-utilization {util}" in text or f"gpu_memory_utilization ({util:.2f})" in text
    if (mfs := d["flags"].get("mem_fraction_static")) is not None:
        assert f"mem_fraction_static={mfs}" in text or f"--mem-fraction-static {mfs}" in text
    if d["engine"] == "sglang" and (m := re.search(r"mem usage=([\d.]+) GB", text)):
        assert float(m.group(1)) == d["measured_gib"]["weights"]
    assert ("inferred" in d) or d["engine"] == "vllm", "an SGLang excerpt names no card: say how it was judged"
