"""The frame -> phase map from the engines' own source (issue 35, item 2).

cockpit/backends/data/frame_phases.json is built by tools/frame_phases.py from release wheels
(7 SGLang releases 0.1.14–0.5.23, 6 vLLM releases 0.2.7–0.32.0): package file -> function -> phase.
These tests hold the committed map to its script (every entry is the script's rule applied to a name
the engines define: no hand edits), run the script on a package of its own, and check that frames as
tracebacks print them resolve to the phase diagnosis reports.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.framephase import frame_phase, map_phase

ROOT = Path(__file__).resolve().parents[2]
MAP = json.loads((ROOT / "cockpit" / "backends" / "data" / "frame_phases.json").read_text())


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("frame_phases", ROOT / "tools" / "frame_phases.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_map_spans_releases_of_both_engines() -> None:
    assert MAP["releases"]["sglang"][0] == "0.1.14" and MAP["releases"]["sglang"][-1] == "0.5.23"
    assert len(MAP["releases"]["sglang"]) >= 7 and len(MAP["releases"]["vllm"]) >= 6
    assert MAP["releases"]["vllm"][0] == "0.2.7"
    for engine in ("sglang", "vllm"):
        phases = {ph for funcs in MAP["phases"][engine].values() for ph in funcs.values()}
        assert {"startup", "load", "kv_profile", "capture", "warmup", "batch_loop", "prefill", "decode", "shutdown"} <= phases
        assert all(f.startswith(engine + "/") and f.endswith(".py") for f in MAP["phases"][engine])


def test_every_entry_is_the_scripts_rule_applied_to_an_engine_name() -> None:
    tool = _tool()
    for engine in ("sglang", "vllm"):
        for path, funcs in MAP["phases"][engine].items():
            for func, phase in funcs.items():
                assert tool.phase_of(func, path) == phase, (engine, path, func)


def test_the_script_builds_the_map_from_a_package(tmp_path: Path) -> None:
    src = tmp_path / "sglang-9.9.9" / "src"
    (src / "sglang" / "srt" / "managers").mkdir(parents=True)
    (src / "sglang" / "srt" / "managers" / "scheduler.py").write_text(
        "class Scheduler:\n    def __init__(self): pass\n    def event_loop_normal(self): pass\n"
        "    def helper(self): pass\n    def process_batch_result_decode(self): pass\n")
    out = tmp_path / "map.json"
    assert _tool().main(["--engine", "sglang", str(src), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["releases"]["sglang"] == ["9.9.9"]
    assert doc["phases"]["sglang"] == {"sglang/srt/managers/scheduler.py": {
        "__init__": "startup", "event_loop_normal": "batch_loop", "process_batch_result_decode": "decode"}}


@pytest.mark.parametrize(("engine", "file", "func", "phase"), [
    ("sglang", "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", "event_loop_normal", "serving"),
    ("sglang", "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py",
     "forward_thread_func", "serving"),
    ("sglang", "/usr/lib/python3/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", "capture", "graph_capture"),
    ("sglang", "sglang/srt/managers/router/model_rpc.py", "forward_fill_batch", "prefill"),
    ("sglang", "/x/sglang/srt/disaggregation/decode.py", "event_loop_overlap_disagg_decode", "decode"),
    ("vllm", "/workspace/vllm/engine/async_llm_engine.py", "engine_step", "serving"),
    ("vllm", "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", "run_busy_loop", "serving"),
    ("vllm", "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", "determine_available_memory", "startup"),
    ("vllm", None, "determine_num_available_blocks", "startup"),  # V0's `… while processing method X`
    ("vllm", None, "execute_dummy_batch", "serving"),  # `collective_rpc("execute_dummy_batch")`
])
def test_a_frame_as_tracebacks_print_it_resolves_to_its_phase(engine: str, file: str | None, func: str, phase: str) -> None:
    assert frame_phase(engine, file, func) == phase


def test_names_the_map_does_not_know_prove_nothing() -> None:
    assert frame_phase("sglang", "/x/sglang/srt/utils.py", "no_such_function") is None
    assert frame_phase("vllm", "/usr/lib/python3.10/asyncio/tasks.py", "wait_for") is None
    assert map_phase("sglang", "/x/sglang/srt/managers/scheduler.py", "__init__") == "startup"
    assert frame_phase("vllm", None, "__init__") is None  # a common name without its file
