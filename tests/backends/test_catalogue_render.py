"""Every decisive message of the engines' released source, rendered as each release prints it, is
read by `cockpit diagnose` as the failure it states (issue 23, "the grammar checks itself").

tests/data/catalogue/messages.json holds the logger format strings and exception messages of 41
SGLang releases (0.3.0–0.5.23) and all 74 vLLM releases (0.5.0–0.33.0) on the paths a diagnosis
reads, with their releases and file:line origins (tools/message_catalogue.py built it from the
release wheels). bench/catalogue_coverage.py renders each failure message with typical values under
its release's record head and rank prefix (SGLang `[… TP3]` / `[… DP1 TP3]`; vLLM `(Worker_TP3 pid=N)`,
`(VllmWorker rank=3 pid=N)`, V0's `(VllmWorkerProcess pid=N)`), bare and under docker compose,
kubectl --timestamps and srun -l, a raised message as the traceback ending with it, and checks the
crash's kind (one its family allows), phase (the start-up the short log proves, or the batch the
message names) and rank (the prefix's). Each message is checked at its newest sampled release; the
ones diagnose does not classify yet are named in tests/data/catalogue/known_misses.json, and this
test fails both when a message stops being classified and when a named miss starts to be (so the
list only shrinks). The per-release figures are in docs/ACCURACY.md.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("catalogue_coverage", ROOT / "bench" / "catalogue_coverage.py")
assert _spec is not None and _spec.loader is not None
coverage = importlib.util.module_from_spec(_spec)
sys.modules["catalogue_coverage"] = coverage
_spec.loader.exec_module(coverage)

CATALOGUE = json.loads((ROOT / "tests" / "data" / "catalogue" / "messages.json").read_text())
KNOWN = json.loads((ROOT / "tests" / "data" / "catalogue" / "known_misses.json").read_text())["misses"]
FAILURES = coverage.failures(CATALOGUE["messages"])


def test_the_catalogue_spans_the_releases_and_names_its_origins() -> None:
    sampled = CATALOGUE["sampled"]
    assert sampled["sglang"][0] == "0.3.0" and sampled["sglang"][-1] == "0.5.23" and len(sampled["sglang"]) >= 40
    # every vLLM final release and post-release on PyPI from 0.5.0 to 0.33.0 (74; none lacks a wheel)
    assert sampled["vllm"][0] == "0.5.0" and sampled["vllm"][-1] == "0.33.0" and len(sampled["vllm"]) == 74
    assert {"0.5.0.post1", "0.6.1.post2", "0.8.5.post1", "0.9.0.1", "0.10.1.1", "0.27.1"} <= set(sampled["vllm"])
    families = {f for f, _ in coverage_families()}
    for e in CATALOGUE["messages"]:
        vs = e["versions"]
        assert vs == sorted(vs, key=coverage.vkey) and set(vs) <= set(sampled[e["engine"]]), e["text"]
        assert (e["first"], e["last"]) == (vs[0], vs[-1])
        assert e["family"] in families and e["text"].strip()
        for version, origin in e["origins"].items():
            assert version in (e["first"], e["last"])
            assert re.fullmatch(rf"{e['engine']}/[\w/.-]+\.py:\d+", origin), origin
    # the messages of each family the issue names are there
    for fam in ("device_oom", "kv_pool", "graph_capture", "hicache", "nccl", "warmup", "port", "death", "startup"):
        assert any(e["family"] == fam for e in CATALOGUE["messages"]), fam


def _tool() -> Any:
    """tools/message_catalogue.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location("message_catalogue", ROOT / "tools" / "message_catalogue.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def coverage_families() -> list[tuple[str, str]]:
    return list(_tool().FAMILIES)


def _id(e: dict[str, Any]) -> str:
    return f"{e['engine']}-{e['family']}-{e['origins'][e['last']].rsplit('/', 1)[-1]}"


@pytest.mark.parametrize("entry", FAILURES, ids=[_id(e) for e in FAILURES])
def test_rendered_message_is_read_as_its_failure(entry: dict[str, Any]) -> None:
    ok, why = coverage.check(entry, entry["last"])
    key = f"{entry['engine']}|{entry['kind']}|{entry['text']}"
    if key in KNOWN:
        assert not ok, f"now classified: remove it from tests/data/catalogue/known_misses.json: {key}"
    else:
        assert ok, f"{entry['origins'][entry['last']]} {entry['text'][:120]!r}: {why}"


def test_the_named_misses_are_catalogued_messages() -> None:
    keys = {f"{e['engine']}|{e['kind']}|{e['text']}" for e in FAILURES}
    assert set(KNOWN) <= keys


def test_the_memory_nccl_and_startup_lines_the_v0_v1_logs_print_are_all_read() -> None:
    """The decisive memory messages every vLLM release prints (the KV budget at start-up) and
    SGLang's (the KV pool, the init budget) are never among the misses."""
    for e in FAILURES:
        if any(w in e["text"] for w in ("No available memory for the cache blocks", "Not enough memory. Please try to increase",
                                        "Loaded weights leave no GPU memory", "Prefill out of memory", "Not enough host memory")):
            assert f"{e['engine']}|{e['kind']}|{e['text']}" not in KNOWN, e["text"]


def test_the_tool_reads_a_release_wheel(tmp_path: Path) -> None:
    """tools/message_catalogue.py on a wheel it builds here: logger format strings (%-style and
    f-strings) and raised messages, their family, their releases and file:line."""
    tool = _tool()
    src_a = ('import logging\nlogger = logging.getLogger(__name__)\n'
             'def f(x):\n    logger.info("Load weight end. mem usage=%.2f GB", x)\n'
             '    raise RuntimeError(f"Not enough memory. Please try to increase --mem-fraction-static. {x}")\n')
    src_b = src_a.replace("def f(x):\n", "def f(x):\n    pass\n") + 'logger.error("Rank %d scheduler is dead.", 1)\n'
    wheels = []
    for version, src in (("0.4.0", src_a), ("0.4.1", src_b)):
        d = tmp_path / f"sglang-{version}"
        d.mkdir()
        with zipfile.ZipFile(d / f"sglang-{version}-py3-none-any.whl", "w") as z:
            z.writestr("sglang/srt/model_runner.py", src)
            z.writestr("sglang/test/test_x.py", 'import logging\nlogging.getLogger().error("test OOM out of memory")\n')
        wheels.append((tool.version_of(next(d.glob("*.whl"))), tool.files_of_release(d, "sglang")))
    entries = {e["text"]: e for e in tool.build("sglang", wheels)}
    load = entries["Load weight end. mem usage=%.2f GB"]
    assert (load["family"], load["kind"], load["first"], load["last"]) == ("startup", "log.info", "0.4.0", "0.4.1")
    assert load["origins"] == {"0.4.0": "sglang/srt/model_runner.py:4", "0.4.1": "sglang/srt/model_runner.py:5"}
    nem = entries["Not enough memory. Please try to increase --mem-fraction-static. {}"]
    assert (nem["family"], nem["kind"]) == ("kv_pool", "raise RuntimeError")
    assert entries["Rank %d scheduler is dead."]["versions"] == ["0.4.1"]
    assert not any("test OOM" in t for t in entries)  # tests are not the server


def test_the_tool_reads_unpacked_release_sources(tmp_path: Path) -> None:
    """A release kept as its package's .py files only (the wheel deleted, as for vLLM's 130–330 MB
    wheels), named ENGINE-VERSION, four-part and post-release versions included, reads as its wheel
    would: the same messages, ranges and origins; tests left out."""
    tool = _tool()
    src = ('import logging\nlogger = logging.getLogger(__name__)\n'
           'def f(x):\n    logger.info("# GPU blocks: %d, # CPU blocks: %d", x, x)\n'
           '    raise ValueError(f"No available memory for the cache blocks. {x}")\n')
    releases = []
    for version in ("0.10.1.1", "0.8.5.post1", "0.10.1"):
        d = tmp_path / f"vllm-{version}"
        (d / "vllm" / "worker").mkdir(parents=True)
        (d / "vllm" / "tests").mkdir()
        (d / "vllm" / "worker" / "worker.py").write_text(src if version != "0.10.1.1" else "\n" + src)
        (d / "vllm" / "tests" / "test_oom.py").write_text('import logging\nlogging.getLogger().error("out of memory")\n')
        assert tool.version_of(d) == version
        releases.append((tool.version_of(d), tool.files_of_tree(d, "vllm")))
    entries = {e["text"]: e for e in tool.build("vllm", releases)}
    assert set(entries) == {"# GPU blocks: %d, # CPU blocks: %d", "No available memory for the cache blocks. {}"}
    blocks = entries["# GPU blocks: %d, # CPU blocks: %d"]
    assert blocks["versions"] == ["0.8.5.post1", "0.10.1", "0.10.1.1"]
    assert blocks["origins"] == {"0.8.5.post1": "vllm/worker/worker.py:4", "0.10.1.1": "vllm/worker/worker.py:5"}
    assert (entries["No available memory for the cache blocks. {}"]["family"], blocks["family"]) == ("kv_pool", "kv_pool")
