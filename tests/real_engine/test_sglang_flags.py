"""Cockpit's SGLang flag table against the INSTALLED SGLang's own argument parser (issue 34, item 3).

tests/backends/test_flags_sglang_wheel.py reads the wheel's source as text; this asks the engine itself:
SGLang's python (the real-engine venv) builds `ServerArgs.add_cli_args(argparse.ArgumentParser())`
and dumps every option (tests/real_engine/sglang_server_args.py). Every row of
cockpit/backends/sglang/flags.py for the installed version must be an option of that parser under
each spelling, with the same kind of value, the same choices, and the same default where the table
shows one; a row that exists only in other releases (its `since`/`until` range) must not be an
option of this one. A drift fails naming the flag.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.sglang.flags import VERSIONS, FlagSpec, flag_table
from tests.backends.test_flags_sglang_wheel import Argument, disagreement
from tests.real_engine.conftest import RealSglang

pytestmark = pytest.mark.timeout(900)  # SGLang's imports take ~30 s, minutes on a loaded machine
HERE = Path(__file__).parent
SOURCE = "installed ServerArgs parser"


@pytest.fixture(scope="module")
def parser_options(real_sglang: RealSglang) -> dict[str, dict[str, Any]]:
    """Every spelling -> the engine's own option (dest, spellings, type, choices, default, nargs, action)."""
    out = subprocess.run([str(real_sglang.python), str(HERE / "sglang_server_args.py")], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **real_sglang.env()}, check=False)
    assert out.returncode == 0, f"SGLang's parser could not be dumped:\n{out.stderr[-3000:]}"
    return {o: opt for opt in json.loads(out.stdout) for o in opt["options"]}


def _arguments(options: dict[str, dict[str, Any]]) -> dict[str, Argument]:
    return {o: Argument(tuple(opt["options"]), opt["type"], opt["action"],
                        tuple(opt["choices"]) if opt["choices"] is not None else None,
                        None if opt["nargs"] is None else str(opt["nargs"]), 0)
            for o, opt in options.items()}


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return ours is theirs or (isinstance(theirs, bool) and bool(ours) == theirs and ours in (0, 1))
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return abs(float(ours) - float(theirs)) < 1e-9
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs, strict=True))
    return str(ours) == str(theirs)


def default_disagreement(spec: FlagSpec, engine: dict[str, Any] | None, version: str) -> str | None:
    """The table's default against the parser's, where the table shows one (None: decided at run time)."""
    if engine is None or spec.default is None:
        return None
    theirs = engine["default"]
    if theirs is None:
        return (f"{spec.name}: the table shows default {spec.default!r}, SGLang {version}'s {SOURCE} has none "
                "(decided at run time): the table must say None")
    if not _same(spec.default, theirs):
        return f"{spec.name}: the table shows default {spec.default!r}, SGLang {version}'s {SOURCE} has {theirs!r}"
    return None


def problems_of(table: dict[str, FlagSpec], options: dict[str, dict[str, Any]], version: str) -> list[str]:
    args = _arguments(options)
    out = []
    for spec in table.values():
        said = disagreement(spec, args, version, SOURCE) or default_disagreement(spec, options.get(spec.name), version)
        if said:
            out.append(said)
    return out


def test_every_flag_of_the_table_is_the_installed_parsers(real_sglang: RealSglang,
                                                          parser_options: dict[str, dict[str, Any]]) -> None:
    version = real_sglang.version
    problems = problems_of(flag_table(version), parser_options, version)
    assert problems == [], f"Cockpit's SGLang {version} flag table disagrees with the installed parser:\n" + \
        "\n".join(problems)


def test_flags_of_other_releases_carry_a_range_that_leaves_this_one_out(
        real_sglang: RealSglang, parser_options: dict[str, dict[str, Any]]) -> None:
    """A flag the table gives only to other releases (`since`/`until`) is not an option here; were
    it one, its version range would be wrong."""
    version = real_sglang.version
    here = {o for spec in flag_table(version).values() for o in spec.option_strings}
    others = {o for v in VERSIONS if v != version for spec in flag_table(v).values() for o in spec.option_strings}
    wrong = sorted(o for o in others - here if o in parser_options)
    assert wrong == [], f"flags the table keeps from SGLang {version} that its parser has: {wrong}"


def test_the_check_names_a_drift(real_sglang: RealSglang, parser_options: dict[str, dict[str, Any]]) -> None:
    """The comparison itself: a flag SGLang lacks, a wrong type, a missing spelling, other choices,
    another default — each named (a check that compared nothing would pass anything)."""
    version = real_sglang.version
    port = flag_table(version)["port"]
    wrong = {
        "--no-such-flag": FlagSpec("--no-such-flag", "no_such_flag", "int", None),
        "--port": FlagSpec("--port", "port", "float", port.default),
        "--http-port": FlagSpec("--port", "port", "int", port.default, aliases=("--http-port",)),
        "fast": FlagSpec("--tokenizer-mode", "tokenizer_mode", "str", "auto", choices=("auto", "fast")),
        "31337": FlagSpec("--port", "port", "int", 31337),
    }
    for needle, spec in wrong.items():
        said = problems_of({"x": spec}, parser_options, version)
        assert len(said) == 1 and needle in said[0] and spec.name in said[0], (needle, said)
    assert problems_of({"port": port}, parser_options, version) == []
