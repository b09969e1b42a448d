"""Cockpit's SGLang flag table against `server_args.py` of the SGLang wheel of each modelled release.

scripts/sglang-server-args.sh downloads the wheel (`pip download sglang==V --no-deps`, cached) and
takes the argument sources out; they are read here as text, through Python's `ast` (never
imported or run: SGLang needs torch and CUDA). In 0.5.9 every `parser.add_argument(...)` gives
the spellings, the type, the action and, where they are literal (or a module constant), the
choices. 0.5.23 declares most flags as annotated fields (`name: A[T, Arg(...)] = default` in
`arg_groups/fields/*.py`, registered by its `add_cli_args_from_dataclass`): the same facts are
read from the annotation as that function derives them (bool → store_true, List[X] → nargs "+",
Literal[...] → choices, `cli_name`, `aliases`, `type_parser`, `no_cli`). Every row of
cockpit/backends/sglang/flags.py for that version must match; a failure names the flag.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cockpit.backends.sglang.flags import VERSIONS, FlagSpec, flag_table

REPO = Path(__file__).resolve().parents[2]
# 0.5.23's deprecated switches (`--enable-dp-attention`) are a store_true that also warns
SWITCH_ACTIONS = ("store_true", "store_false", "BooleanOptionalAction", "DeprecatedStoreTrueAction")
# Cockpit's value types -> how server_args.py writes the type (`type=int`, `type=json.loads`, …).
# parse_cuda_graph_backend_arg returns the text (it refuses the retired `tc_piecewise`);
# parse_cuda_graph_config_arg is json.loads plus a check of the phases' keys.
TYPES: dict[str, set[str]] = {
    "int": {"int"}, "float": {"float"}, "str": {"str", "parse_cuda_graph_backend_arg"}, "int_list": {"int"},
    "json": {"json.loads", "str", "parse_cuda_graph_config_arg"}, "human_int": {"human_readable_int"},
}


@dataclass(frozen=True)
class Argument:
    options: tuple[str, ...]
    type: str | None  # `int`, `json.loads`, a helper's name; None: argparse's str
    action: str | None  # `store_true`, `BooleanOptionalAction`, a class name
    choices: tuple[str, ...] | None  # None: not given, or not a literal this reading can resolve
    nargs: str | None
    line: int


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literal(node: ast.expr, constants: dict[str, ast.expr]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name) and node.id in constants:
        node = constants[node.id]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return tuple(str(v) for v in values) if len(values) == len(node.elts) else None
    return None


def read_arguments(source: str) -> dict[str, Argument]:
    """Every option spelling -> the add_argument call that declares it."""
    tree = ast.parse(source)
    constants = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
    out: dict[str, Argument] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        options = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                        and a.value.startswith("-"))
        if not options:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        arg = Argument(
            options=options,
            type=_name(kw["type"]) if "type" in kw else None,
            action=_name(kw["action"]) if "action" in kw else None,
            choices=_literal(kw["choices"], constants) if "choices" in kw else None,
            nargs=_name(kw["nargs"]) if "nargs" in kw else None,
            line=node.lineno,
        )
        for o in options:
            out.setdefault(o, arg)
    return out


def _field_argument(name: str, ann: ast.Subscript, line: int) -> Argument | None:
    """One `name: A[T, "help" | Arg(...)]` field as add_cli_args_from_dataclass registers it."""
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    if len(parts) < 2:
        return None
    kind, meta = parts[0], parts[1]
    kw: dict[str, ast.expr] = {}
    if isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
    elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)) and not isinstance(meta, ast.JoinedStr):
        return None  # not a CLI field
    if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
        return None
    cli = kw["cli_name"].value if isinstance(kw.get("cli_name"), ast.Constant) else "--" + name.replace("_", "-")
    aliases = _literal(kw["aliases"], {}) if "aliases" in kw else ()
    while isinstance(kind, ast.Subscript) and _name(kind.value) in ("Optional", "typing.Optional"):
        kind = kind.slice
    if isinstance(kind, ast.BinOp):  # `int | None`
        kind = kind.left if not (isinstance(kind.left, ast.Constant) and kind.left.value is None) else kind.right
    choices = _literal(kw["choices"], {}) if "choices" in kw else None
    action = _name(kw["action"]) if "action" in kw else None
    parser_name = _name(kw["type_parser"]) if "type_parser" in kw else None
    nargs = kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None
    outer = _name(kind.value) if isinstance(kind, ast.Subscript) else None
    if action is not None:
        type_name = None
    elif outer in ("Literal", "typing.Literal"):
        values = kind.slice.elts if isinstance(kind.slice, ast.Tuple) else [kind.slice]  # type: ignore[union-attr]
        literal = tuple(str(v.value) for v in values if isinstance(v, ast.Constant))
        choices = choices or literal
        first = values[0].value if values and isinstance(values[0], ast.Constant) else ""
        type_name = parser_name or type(first).__name__
    elif outer in ("List", "list") and parser_name is None:
        type_name, nargs = _name(kind.slice), nargs or "+"  # type: ignore[union-attr]
    elif _name(kind) == "bool":
        type_name, action = None, "store_true"
    else:
        type_name = parser_name or _name(kind)
    return Argument((cli, *(aliases or ())), type_name, action, choices, nargs, line)


def read_fields(source: str) -> dict[str, Argument]:
    """Every option spelling -> the annotated field that declares it (0.5.2x `arg_groups/fields`)."""
    out: dict[str, Argument] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and isinstance(item.annotation, ast.Subscript) and _name(item.annotation.value) == "A"):
                arg = _field_argument(item.target.id, item.annotation, item.lineno)
                for o in arg.options if arg else ():
                    out.setdefault(o, arg)  # type: ignore[arg-type]
    return out


def disagreement(spec: FlagSpec, args: dict[str, Argument], version: str, source: str | None = None) -> str | None:
    """What the table says about one flag that SGLang's server_args.py does not; None: they agree.
    `source`: where `args` came from when not the wheel's text (the installed parser, issue 34)."""
    arg = args.get(spec.name)
    if arg is None:
        return f"{spec.name}: not in SGLang {version}'s {source or 'server_args.py'}"
    where = f"SGLang {version}'s {source}" if source else f"SGLang {version} server_args.py:{arg.line}"
    missing = [o for o in spec.aliases if o not in arg.options]
    if missing:
        return f"{spec.name}: {where} has no spelling {', '.join(missing)} (it has {', '.join(arg.options)})"
    switch = (arg.action or "").rsplit(".", 1)[-1] in SWITCH_ACTIONS
    if spec.type == "bool":
        return None if switch else f"{spec.name}: the table says a switch, {where} takes a value (type {arg.type})"
    if switch:
        return f"{spec.name}: the table says type {spec.type}, {where} has a switch ({arg.action})"
    kind = arg.type or "str"
    if kind not in TYPES[spec.type]:
        return f"{spec.name}: the table says type {spec.type}, {where} parses it with {kind}"
    if (spec.type == "int_list") != (arg.nargs in ("+", "*")):
        return f"{spec.name}: the table says type {spec.type}, {where} has nargs={arg.nargs!r}"
    if arg.choices is not None and spec.choices is not None and sorted(map(str, spec.choices)) != sorted(arg.choices):
        return (f"{spec.name}: choices differ from {where}: table {sorted(map(str, spec.choices))}, "
                f"SGLang {sorted(arg.choices)}")
    if arg.choices is not None and spec.choices is None and spec.type != "str":
        return f"{spec.name}: {where} fixes its choices {list(arg.choices)}, the table has none"
    return None


def wheel_arguments(version: str) -> dict[str, Argument]:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "sglang-server-args.sh"), version],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}, check=False)
    assert proc.returncode == 0, f"scripts/sglang-server-args.sh {version} failed:\n{proc.stderr[-3000:]}"
    root = Path(proc.stdout.strip().splitlines()[-1]) / "sglang" / "srt"
    args = read_arguments((root / "server_args.py").read_text())
    for path in sorted((root / "arg_groups" / "fields").glob("*.py")):
        for option, arg in read_fields(path.read_text()).items():
            args.setdefault(option, dataclasses.replace(arg, line=arg.line))
    return args


@pytest.fixture(scope="module", params=VERSIONS)
def wheel(request: pytest.FixtureRequest) -> tuple[str, dict[str, Argument]]:
    return request.param, wheel_arguments(request.param)


def test_every_flag_of_the_table_is_sglangs(wheel: tuple[str, dict[str, Argument]]) -> None:
    version, args = wheel
    problems = [p for spec in flag_table(version).values() if (p := disagreement(spec, args, version)) is not None]
    assert problems == [], f"Cockpit's SGLang {version} flag table disagrees with the wheel:\n" + "\n".join(problems)


def test_the_check_names_a_wrong_row(wheel: tuple[str, dict[str, Argument]]) -> None:
    """The comparison itself names a flag SGLang lacks, a wrong type, a missing alias, other choices."""
    version, args = wheel
    wrong = [
        FlagSpec("--no-such-flag", "no_such_flag", "int", None),
        FlagSpec("--port", "port", "float", 30000),
        FlagSpec("--port", "port", "int", 30000, aliases=("--http-port",)),
        FlagSpec("--tokenizer-mode", "tokenizer_mode", "str", "auto", choices=("auto", "fast")),
        FlagSpec("--trust-remote-code", "trust_remote_code", "int", None),
    ]
    said = [disagreement(s, args, version) for s in wrong]
    assert all(said), said
    assert "--no-such-flag" in str(said[0]) and "--http-port" in str(said[2]) and "fast" in str(said[3])
    assert disagreement(flag_table(version)["port"], args, version) is None


def test_reading_resolves_module_constants() -> None:
    src = 'CHOICES = ["a", "b"]\ndef f(parser):\n    parser.add_argument("--x", "--y", type=int, choices=CHOICES, nargs="+")\n'
    arg = read_arguments(src)["--y"]
    assert arg.options == ("--x", "--y") and arg.type == "int" and arg.choices == ("a", "b") and arg.nargs == "+"
