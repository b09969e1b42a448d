"""Cockpit's vLLM flag table against the installed engine's own `vllm serve` parser.

The engine's python dumps its parser (tests/real_engine/vllm_serve_args.py, run in the engine's
venv as a subprocess); every row of cockpit/backends/vllm/flags.py for that version must be a flag
vLLM has, under every spelling the table gives, with a compatible type, the same negation and
the same choices where vLLM's parser fixes them. A failure names the flag and what differs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.vllm.flags import FlagSpec, flag_table, parse_serve_args

HERE = Path(__file__).parent

# Cockpit's value types -> the names of vLLM's type functions that parse the same values
# (`optional X` is vLLM's optional_type(X) wrapper: it also takes "None").
TYPES: dict[str, set[str]] = {
    "int": {"int"},
    "float": {"float"},
    "str": {"str"},
    "bytes": {"human_readable_int"},
    "len": {"human_readable_int_or_auto"},
    "int_list": {"int"},
    "str_list": {"str"},
    "count": {"human_readable_int"},
    "json": {"parse_dataclass", "loads", "parse_type"},
}
# Spellings vLLM's FlexibleArgumentParser rewrites before argparse sees them (vllm/utils/
# argparse_utils.py: `-O3`, `-O 3` -> `--optimization-level 3`): not in the parser's own list.
REWRITTEN = {"-O": "--optimization-level"}
# Options whose parser keeps the text and vLLM's config types it: --optimization-level is an
# IntEnum O0-O3 in vllm/config/vllm.py, an int in the table.
TYPED_LATER = {"optimization_level": "int"}
BOOL_ACTIONS = {"_StoreTrueAction", "BooleanOptionalAction"}


@pytest.fixture(scope="module")
def vllm_options(real_vllm: Any) -> dict[str, dict[str, Any]]:
    """dest -> the engine's own option (its spellings, type, choices, nargs, action)."""
    out = subprocess.run([str(real_vllm.python), str(HERE / "vllm_serve_args.py")], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **real_vllm.env()}, check=False)
    assert out.returncode == 0, f"the engine's parser could not be dumped:\n{out.stderr[-3000:]}"
    return {o["dest"]: o for o in json.loads(out.stdout)}


def disagreement(spec: FlagSpec, engine: dict[str, Any] | None, version: str) -> str | None:
    """What the table says about one flag that vLLM's parser does not, in words; None: they agree."""
    if engine is None:
        return f"{spec.name}: not a flag of vLLM {version}'s `vllm serve` (dest {spec.dest})"
    missing = [o for o in spec.option_strings if o not in engine["options"] and REWRITTEN.get(o) not in engine["options"]]
    if missing:
        return f"{spec.name}: vLLM {version} has no spelling {', '.join(missing)} (it has {', '.join(engine['options'])})"
    kind = (engine["type"] or "").removeprefix("optional ")
    if spec.type == "bool":
        if engine["action"] not in BOOL_ACTIONS:
            return f"{spec.name}: the table says a switch, vLLM {version} takes a value ({engine['action']}, type {engine['type']})"
        if spec.negatable != (engine["action"] == "BooleanOptionalAction"):
            has = "has" if engine["action"] == "BooleanOptionalAction" else "has no"
            return f"{spec.name}: vLLM {version} {has} --no-{spec.name[2:]} (table: negatable={spec.negatable})"
        return None
    if engine["action"] in BOOL_ACTIONS:
        return f"{spec.name}: the table says type {spec.type}, vLLM {version} has a switch ({engine['action']})"
    if kind not in TYPES[spec.type] and TYPED_LATER.get(spec.dest) != spec.type:
        return f"{spec.name}: the table says type {spec.type}, vLLM {version} parses it with {engine['type']}"
    if (spec.type in ("int_list", "str_list")) != (engine["nargs"] in ("+", "*")):
        return f"{spec.name}: the table says type {spec.type}, vLLM {version} takes nargs={engine['nargs']!r}"
    if engine["choices"] is not None and sorted(map(str, spec.choices or ())) != sorted(engine["choices"]):
        return (f"{spec.name}: choices differ from vLLM {version}'s: table {sorted(map(str, spec.choices or ()))}, "
                f"vLLM {sorted(engine['choices'])}")
    return None


def test_every_flag_of_the_table_is_the_engines(real_vllm: Any, vllm_options: dict[str, dict[str, Any]]) -> None:
    version = real_vllm.version
    problems = [p for spec in flag_table(version).values()
                if (p := disagreement(spec, vllm_options.get(spec.dest), version)) is not None]
    assert problems == [], "Cockpit's vLLM flag table disagrees with the engine:\n" + "\n".join(problems)


def test_the_check_names_a_wrong_row(real_vllm: Any, vllm_options: dict[str, dict[str, Any]]) -> None:
    """The comparison itself: a row with the wrong type, a spelling vLLM lacks, or other choices
    is named (the check would pass anything if it compared nothing)."""
    version = real_vllm.version
    port = flag_table(version)["port"]
    wrong = [
        FlagSpec("--port", "port", "float", 8000),
        FlagSpec("--port", "port", "int", 8000, aliases=("-P",)),
        FlagSpec("--kv-cache-dtype", "kv_cache_dtype", "str", "auto", choices=("auto", "fp9")),
        FlagSpec("--no-such-flag", "no_such_flag", "int", None),
        FlagSpec("--enforce-eager", "enforce_eager", "bool", False,
                 negatable=vllm_options["enforce_eager"]["action"] != "BooleanOptionalAction"),
    ]
    said = [disagreement(s, vllm_options.get(s.dest), version) for s in wrong]
    assert all(said), said
    assert "--no-such-flag" in str(said[3]) and "-P" in str(said[1]) and "fp9" in str(said[2])
    assert disagreement(port, vllm_options["port"], version) is None


def test_the_tables_parser_reads_values_as_the_engine_does(real_vllm: Any) -> None:
    """The same command line through vLLM's own parser and Cockpit's: the same values (byte and
    token suffixes, negation, lists, the positional model)."""
    argv = [str(real_vllm.tiny), "--dtype", "bfloat16", "--max-model-len", "1k", "--kv-cache-memory-bytes", "1G",
            "-tp", "1", "--no-enable-prefix-caching", "--max-num-batched-tokens", "8k",
            "--served-model-name", "tiny", "other", "--cudagraph-capture-sizes", "1", "2", "4"]
    out = subprocess.run([str(real_vllm.python), str(HERE / "vllm_serve_args.py"), "parse", *argv],
                         capture_output=True, text=True, timeout=600, env={**os.environ, **real_vllm.env()}, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    engine = json.loads(out.stdout)
    ours = parse_serve_args(argv, real_vllm.version)
    assert engine.pop("model_tag") == ours.pop("model")
    assert ours == engine
