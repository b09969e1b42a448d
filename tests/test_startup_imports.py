"""The start-up budget, checked by what is imported, not by the clock (timings are bench/startup.py's).

`cockpit --help` must stay the cost of argparse: no cockpit module but the CLI and the backends'
registry (the engine choices: names only, no engine's package), nothing outside
the standard library, and a small count (21 modules over a bare interpreter in December 2026; every
module is ~0.1–3 ms). `cockpit diagnose` imports one engine's grammar: an SGLang log never loads
vLLM's log grammar.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
HELP_MODULE_BUDGET = 30

_PROBE = """
import contextlib, io, json, sys
before = set(sys.modules)
from cockpit.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported(*args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_help_imports_only_argparse_and_the_cli() -> None:
    mods = _imported("--help")
    assert "argparse" in mods and "cockpit.cli" in mods  # the probe saw the run
    ours = [m for m in mods if m.split(".")[0] == "cockpit"]
    # the CLI and the backends' registry of names (its engine choices), nothing of an engine
    assert ours == ["cockpit", "cockpit.backends", "cockpit.cli", "cockpit.core", "cockpit.core.engines"]
    foreign = [m for m in mods if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "cockpit"]
    assert foreign == []  # no textual, pydantic, yaml, asyncssh, httpx
    for heavy in ("typing", "shutil", "dataclasses", "inspect", "pathlib", "json", "asyncio"):
        assert heavy not in mods, heavy
    assert len(mods) <= HELP_MODULE_BUDGET, mods


def test_diagnose_of_an_sglang_log_never_loads_the_vllm_grammar() -> None:
    mods = _imported("diagnose", "--json", str(DATA / "sglang-0.5.9-kimi-0.88-healthy.log"))
    assert "cockpit.backends.sglang.scanner" in mods
    assert "cockpit.backends.vllm.logparse" not in mods
    for heavy in ("textual", "pydantic", "yaml", "asyncssh", "httpx"):
        assert heavy not in {m.split(".")[0] for m in mods}, heavy
    # pathlib brings urllib.parse and ipaddress (~3 ms); the read needs only os.PathLike
    assert "pathlib" not in mods


DIAGNOSE_MODULE_BUDGET = 95  # 90 over a bare interpreter for an SGLang log in December 2026 (was 95)


def test_diagnose_of_an_sglang_log_imports_only_its_path() -> None:
    """What `diagnose` of an SGLang log pays at start-up (issue 28): one engine's grammar and
    diagnosis, the other engine's sniff only — not its flag tables (the backends declare their
    secret flags), not `decimal` (a flag parser's), not `threading` (the parallel read asks
    sys.modules)."""
    mods = _imported("diagnose", "--json", str(DATA / "sglang-0.5.9-kimi-0.88-healthy.log"))
    assert "cockpit.backends.sglang.diagnosis" in mods  # the probe saw the whole run
    for skipped in ("cockpit.backends.vllm.flags", "cockpit.backends.vllm.logparse", "decimal", "threading"):
        assert skipped not in mods, skipped
    assert len(mods) <= DIAGNOSE_MODULE_BUDGET, len(mods)


def test_a_named_command_parses_as_the_whole_cli_does() -> None:
    """`main` builds only the named command's parser: COMMANDS must name every subcommand, and the
    parse must be the whole parser's."""
    from cockpit.cli import COMMANDS, build_parser

    whole = build_parser()
    sub = next(a for a in whole._actions if a.__class__.__name__ == "_SubParsersAction")
    assert tuple(sub.choices) == COMMANDS  # type: ignore[attr-defined]
    argv = ["diagnose", "--json", "--target-headroom-gb", "4", "a.log", "b.log"]
    assert vars(build_parser("diagnose").parse_args(argv)) == vars(whole.parse_args(argv))
    argv = ["runs", "--json", "show", "r1"]
    assert vars(build_parser("runs").parse_args(argv)) == vars(whole.parse_args(argv))
