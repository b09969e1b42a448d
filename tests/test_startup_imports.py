"""The start-up budget, checked by what is imported, not by the clock (timings are bench/startup.py's
and bench/check.py's).

`cockpit --help` must stay the cost of argparse: no cockpit module but the CLI and the backends'
registry (the engine choices: names only, no engine's package), nothing outside the standard
library, and the modules counted over a bare interpreter (`python -c pass`, site included) held to
HELP_MODULES: argparse and what it needs (`re` and its helpers, gettext, locale, textwrap, warnings)
and five of ours. A module more fails with the list of what is new (every module is ~0.1–3 ms of a
~30 ms `--help`). `cockpit diagnose` imports one engine's grammar: an SGLang log never loads vLLM's
log grammar.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parent / "data"

# what `cockpit --help` imports over a bare Python 3.11 interpreter (December 2026, issue 28: 34 before
# the names-only parser and the registry's lazy importlib)
HELP_MODULES = frozenset({
    # argparse, and `re` under it (the console script imports `re` too)
    "argparse", "re", "re._casefix", "re._compiler", "re._constants", "re._parser", "_sre", "enum", "copyreg",
    "functools", "_functools", "collections", "_collections", "itertools", "keyword", "operator", "_operator",
    "reprlib", "types", "warnings",
    # argparse's gettext (every message it builds looks for a catalogue: locale, errno) and its wrapping
    "gettext", "locale", "_locale", "errno", "textwrap",
    # ours: the CLI and the registry's names
    "__future__", "cockpit", "cockpit.cli", "cockpit.backends", "cockpit.core", "cockpit.core.engines",
})
HELP_MODULE_BUDGET = len(HELP_MODULES)  # 31

# Counted from a bare interpreter: nothing imported before `before` but what `python -c pass` has;
# the output is caught with io (built in) and the list printed with repr (no json: it imports `re`).
_PROBE = """
import sys
before = set(sys.modules)
import io
sys.stdout = sys.stderr = io.StringIO()
from cockpit.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
print(repr(sorted(set(sys.modules) - before)))
"""


def _imported(*args: str, columns: str = "80") -> list[str]:
    env = {**os.environ, "COLUMNS": columns}
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60, check=True,
                       env=env)
    return list(ast.literal_eval(r.stdout.strip().splitlines()[-1]))


def test_help_imports_only_argparse_and_the_cli() -> None:
    mods = _imported("--help")
    assert "argparse" in mods and "cockpit.cli" in mods  # the probe saw the run
    ours = [m for m in mods if m.split(".")[0] == "cockpit"]
    # the CLI and the backends' registry of names (its engine choices), nothing of an engine
    assert ours == ["cockpit", "cockpit.backends", "cockpit.cli", "cockpit.core", "cockpit.core.engines"]
    foreign = [m for m in mods if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "cockpit"]
    assert foreign == []  # no textual, pydantic, yaml, asyncssh, httpx
    for heavy in ("typing", "shutil", "dataclasses", "inspect", "pathlib", "json", "asyncio", "importlib"):
        assert heavy not in mods, heavy
    new = sorted(set(mods) - HELP_MODULES)
    assert len(mods) <= HELP_MODULE_BUDGET and not new, (
        f"`cockpit --help` imports {len(mods)} modules (budget {HELP_MODULE_BUDGET}); new: {new}; "
        f"no longer: {sorted(HELP_MODULES - set(mods))}")


def test_diagnose_of_an_sglang_log_never_loads_the_vllm_grammar() -> None:
    mods = _imported("diagnose", "--json", str(DATA / "sglang-0.5.9-kimi-0.88-healthy.log"))
    assert "cockpit.backends.sglang.scanner" in mods
    assert "cockpit.backends.vllm.logparse" not in mods
    for heavy in ("textual", "pydantic", "yaml", "asyncssh", "httpx"):
        assert heavy not in {m.split(".")[0] for m in mods}, heavy
    # pathlib brings urllib.parse and ipaddress (~3 ms); the read needs only os.PathLike
    assert "pathlib" not in mods


# what `cockpit diagnose --json` of an SGLang log imports over a bare interpreter (December 2026: 90;
# the budget was 95 when the probe counted after json and `re`, and it imported 66 beyond those)
DIAGNOSE_MODULES = (HELP_MODULES - {"textwrap"}) | frozenset({
    # the stdlib: dataclasses (and the inspect, ast, dis, tokenize it imports), typing, json, math, gc
    "dataclasses", "inspect", "ast", "_ast", "contextlib", "dis", "opcode", "_opcode", "tokenize", "token",
    "linecache", "collections.abc", "importlib", "importlib._bootstrap", "importlib._bootstrap_external",
    "importlib.machinery", "copy", "weakref", "_weakrefset", "typing", "_typing", "typing.io", "typing.re",
    "json", "json.decoder", "json.encoder", "json.scanner", "_json", "math", "gc",
    # the command, the face's light half, the core's state and findings
    "cockpit.commands", "cockpit.commands.diagnose", "cockpit.commands._reading", "cockpit.face_light", "cockpit.errors", "cockpit.core.numbers",
    "cockpit.core.findings", "cockpit.core.state", "cockpit.core.ranks", "cockpit.core.secrets",
    "cockpit.core.bytecount", "cockpit.core.events", "cockpit.core.reducer", "cockpit.core.crashstory", "cockpit.core.safe_output",
    "cockpit.core.sanitize", "cockpit.core.linesplit",
    # the backends' base, the refusal of other programs' logs, vLLM's byte sniff (its grammar is not read)
    "cockpit.backends.base", "cockpit.backends.engine", "cockpit.backends.flagtable", "cockpit.backends.foreign",
    "cockpit.backends.vllm", "cockpit.backends.vllm.sniff",
    # SGLang's grammar and diagnosis
    "cockpit.backends.sglang", "cockpit.backends.sglang.logparse", "cockpit.backends.sglang.grammar",
    "cockpit.backends.sglang.scanner", "cockpit.backends.sglang.failures", "cockpit.backends.sglang.textutil",
    "cockpit.backends.sglang.wrappers", "cockpit.backends.sglang.diagnosis", "cockpit.backends.sglang.memory",
    "cockpit.backends.sglang.flags",
    # the diagnosis in three (issue 37): a crash's rules and the facts every rule reads
    "cockpit.backends.sglang.crashrules", "cockpit.backends.sglang.rulecontext",
    # reading any wrapper and any generation (issue 35): the frame→phase map, peer deaths, logging
    # formats peeled, re-wrapped lines joined, bare lines; HiCache's sizing (issue 40)
    "cockpit.backends.framephase", "cockpit.backends.peers", "cockpit.backends.pylogging",
    "cockpit.backends.rejoin", "cockpit.backends.sglang.barelines", "cockpit.backends.sglang.hicache",
    # the profile's flags by dest, one helper for both engines' rules, and the one flag spelling
    # (issue 37: normalised once; pydantic stays out, the profile's module is not loaded)
    "cockpit.backends.common", "cockpit.core.overrides",
})
DIAGNOSE_MODULE_BUDGET = len(DIAGNOSE_MODULES)  # 103: the log reading report shares is its own module, the
# flags-by-dest helper, the flag spelling and the splitter theirs (issue 37)


def test_diagnose_of_an_sglang_log_imports_only_its_path() -> None:
    """What `diagnose` of an SGLang log pays at start-up (issue 28): one engine's grammar and
    diagnosis, the other engine's sniff only — not its flag tables (the backends declare their
    secret flags), not `decimal` (a flag parser's), not `threading` (the parallel read asks
    sys.modules)."""
    mods = _imported("diagnose", "--json", str(DATA / "sglang-0.5.9-kimi-0.88-healthy.log"))
    assert "cockpit.backends.sglang.diagnosis" in mods  # the probe saw the whole run
    for skipped in ("cockpit.backends.vllm.flags", "cockpit.backends.vllm.logparse", "decimal", "threading"):
        assert skipped not in mods, skipped
    new = sorted(set(mods) - DIAGNOSE_MODULES)
    assert len(mods) <= DIAGNOSE_MODULE_BUDGET and not new, (
        f"`cockpit diagnose` of an SGLang log imports {len(mods)} modules (budget {DIAGNOSE_MODULE_BUDGET}); "
        f"new: {new}; no longer: {sorted(DIAGNOSE_MODULES - set(mods))}")


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


# command lines that name no subcommand: `main` parses them with the names-only parser
NO_COMMAND: tuple[list[str], ...] = (
    [], ["--help"], ["-h"], ["--he"], ["--version"], ["--version=1"], ["-hx"], ["badcmd"], ["diagnos"], ["Diagnose"],
    ["--bogus"], ["--bogus", "--help"], ["--json"], ["--theme", "dark"], ["-x", "--help"], ["--", "x"],
)


def _outcome(parser: object, argv: list[str]) -> tuple[object, object, str, str]:
    """What a parse does: the namespace or the exit code, and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ns, extras = parser.parse_known_args(argv)  # type: ignore[attr-defined]
            result: object = (vars(ns), extras)
            code = None
        except SystemExit as e:
            result, code = None, e.code
    return result, code, out.getvalue(), err.getvalue()


def test_the_names_only_parser_prints_and_parses_as_the_whole_cli(monkeypatch) -> None:
    """`cockpit --help` (and any command line that names no subcommand) builds every subcommand's
    name and help line but none of their parsers (~3 ms): the same help at every width, the same
    parse, the same errors."""
    from cockpit.cli import build_parser

    for columns in ("40", "80", "200"):
        monkeypatch.setenv("COLUMNS", columns)
        assert build_parser(names_only=True).format_help() == build_parser().format_help()
        for argv in NO_COMMAND:
            assert _outcome(build_parser(names_only=True), argv) == _outcome(build_parser(), argv), argv


def test_main_answers_help_with_the_whole_cli_s_help(monkeypatch, capsys) -> None:
    from cockpit.cli import build_parser, main

    monkeypatch.setenv("COLUMNS", "80")
    for argv in (["--help"], ["-h"], ["--bogus", "--help"]):
        try:
            main(argv)
        except SystemExit as e:
            assert e.code == 0
        assert capsys.readouterr().out == build_parser().format_help(), argv


def test_a_command_named_further_on_gets_the_whole_parser(capsys) -> None:
    """The names-only parser is for command lines that name no subcommand anywhere: `--bogus
    diagnose` enters diagnose's parser, as it always did (its LOG is missing: exit 2, one line)."""
    from cockpit.cli import main

    try:
        main(["--bogus", "diagnose"])
    except SystemExit as e:
        assert e.code == 2
    err = capsys.readouterr().err
    assert "cockpit diagnose: error: the following arguments are required: LOG" in err, err
    assert "Traceback" not in err


def test_help_on_a_wide_terminal_wraps_nothing_and_skips_textwrap() -> None:
    """At 120 columns every help line fits: the CLI's formatter returns it whole instead of
    importing textwrap (~1 ms) to find that out."""
    mods = _imported("--help", columns="120")
    assert "argparse" in mods and "textwrap" not in mods
    assert len(mods) <= HELP_MODULE_BUDGET - 1, sorted(set(mods) - HELP_MODULES)


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab-–—.,;: \t\n\r\x0b\x0c\xa0\u2003(){}'\"ſKİı1")), max_size=160),
       width=st.integers(min_value=1, max_value=130))
def test_the_cli_s_line_splitter_is_argparse_s(text: str, width: int) -> None:
    """The shortcut past textwrap splits every help text as argparse's own formatter does."""
    from cockpit.cli import _Formatter

    ours = _Formatter("cockpit", width=80)._split_lines(text, width)
    assert ours == argparse.HelpFormatter("cockpit", width=80)._split_lines(text, width)


def test_the_face_loads_no_ssh_library() -> None:
    """Every command but diagnose, and the TUI, import `cockpit.face`: a local profile or the demo
    never pays for asyncssh (~0.3 s CPU here): `cockpit.transport` imports it when a remote host is
    used, the one function-level import the transport keeps for that."""
    code = "import sys, cockpit.face; print(repr(sorted(m for m in sys.modules if m.split('.')[0] == 'asyncssh')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert ast.literal_eval(r.stdout.strip()) == []


def test_runs_reads_the_journal_without_the_live_stack(tmp_path: Path) -> None:
    """`cockpit runs` imports the journal's half of the face: no pydantic, yaml, asyncssh or httpx
    (~0.1 s of start-up, against ~0.7 s through the whole `cockpit.face`: docs/PERFORMANCE.md)."""
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", _PROBE, "runs", "--json"], capture_output=True, text=True, timeout=60,
                       check=True, env=env)
    mods = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    assert "cockpit.commands.runs" in mods and "cockpit.journal" in mods  # the probe saw the run
    assert "cockpit.face" not in mods
    for heavy in ("pydantic", "yaml", "asyncssh", "httpx", "textual"):
        assert heavy not in {m.split(".")[0] for m in mods}, heavy
