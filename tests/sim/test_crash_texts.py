"""The SGLang simulator's crash texts, byte for byte: every crash kind on every version rendered
with fixed inputs and compared with tests/data/sim-crashes/, captured from main before the
module became a table (tests/data/README.md). Every row of the table has its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.sim.sglang.config import SIM_VERSIONS
from cockpit.sim.sglang.crashes import CRASHES, crash_text, cuda_oom_text, not_enough_memory_fields

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sim-crashes"

# the Kimi story's prefill OOM on TP3 (with CUDA graphs), and a weights OOM before any graph
OOM = cuda_oom_text(alloc_bytes=224 * 2**20, gpu_index=3, total_gib=95.59, free_bytes=68.2 * 2**20, process_gib=95.53,
                    allocated_gib=91.15, graph_gib=3.75, reserved_unallocated_gib=0.18)
OOM_NO_GRAPHS = cuda_oom_text(alloc_bytes=1.5 * 2**30, gpu_index=0, total_gib=79.25, free_bytes=512 * 2**20,
                              process_gib=78.7, allocated_gib=70.1, graph_gib=0.0, reserved_unallocated_gib=0.02)
KV_MESSAGE = "Decode out of memory. Try to lower your batch size.\nTry to allocate 64 tokens.\nAvailable tokens: 0"

# golden file stem -> crash kind and the values the dying rank passes
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "prefill-oom": ("prefill-oom", {"arch_file": "deepseek_v2.py", "oom": OOM}),
    "graph-capture-oom": ("graph-capture-oom", {"oom": OOM}),
    "prefill-graph-capture-oom": ("prefill-graph-capture-oom", {"oom": OOM}),
    "weights-oom": ("weights-oom", {"oom": OOM_NO_GRAPHS}),
    "workspace-oom": ("workspace-oom", {"oom": OOM_NO_GRAPHS}),
    "not-enough-memory": ("not-enough-memory", {"mfs": 0.5, **not_enough_memory_fields(11.77, 71.66)}),
    "not-enough-memory-no-pre": ("not-enough-memory", {"mfs": 0.2, **not_enough_memory_fields(3.5, 0.0)}),
    "hicache-host-memory": ("hicache-host-memory", {"requested_gb": 200.0, "free_gb": 133.7}),
    "hicache-smaller-than-device": ("hicache-smaller-than-device", {}),
    "kv-pool-exhausted": ("kv-pool-exhausted", {"message": KV_MESSAGE}),
}


@pytest.mark.parametrize("version", SIM_VERSIONS)
@pytest.mark.parametrize("stem", sorted(CASES))
def test_crash_text_is_byte_identical_to_main(stem: str, version: str) -> None:
    kind, fields = CASES[stem]
    golden = (GOLDEN / f"{stem}-{version}.log").read_bytes()
    assert crash_text(kind, version, **fields).encode() == golden


def test_main_process_eof_and_the_oom_message_are_byte_identical_to_main() -> None:
    """The main process's EOFError is the same on both versions (one file); PyTorch's OOM message
    with and without memory in CUDA graphs' private pools."""
    for version in SIM_VERSIONS:
        assert crash_text("main-eof", version).encode() == (GOLDEN / "main-eof.log").read_bytes()
    assert OOM.encode() == (GOLDEN / "cuda-oom-text.log").read_bytes()
    assert OOM_NO_GRAPHS.encode() == (GOLDEN / "cuda-oom-text-no-graphs.log").read_bytes()
    assert "private pools" in OOM and "private pools" not in OOM_NO_GRAPHS


def test_every_row_of_the_table_has_a_golden_and_every_golden_a_row() -> None:
    rendered = {f"{stem}-{v}.log" for stem in CASES for v in SIM_VERSIONS} | {
        "main-eof.log", "cuda-oom-text.log", "cuda-oom-text-no-graphs.log"}
    assert {p.name for p in GOLDEN.iterdir()} == rendered
    assert {kind for kind, _ in CASES.values()} | {"main-eof"} == set(CRASHES)
    assert all(set(rows) == set(SIM_VERSIONS) for rows in CRASHES.values())
