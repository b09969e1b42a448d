"""No command imports another (issue 37): what two commands share lives in a helper module of
cockpit/commands (a name with a leading `_`), so a command is read, changed and imported alone."""

from __future__ import annotations

import ast
from pathlib import Path

import cockpit.commands
from cockpit.cli import COMMANDS

HERE = Path(cockpit.commands.__file__).resolve().parent


def _commands_imported(py: Path) -> list[tuple[int, str]]:
    """(line, module) of every `cockpit.commands.X` a file imports, at any depth, annotation-only too."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:  # `from . import x`, `from .x import y`: spelled out
            names = [node.module] if node.module else [a.name for a in node.names]
            out.extend((node.lineno, f"cockpit.commands.{n}") for n in names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cockpit.commands":
                out.extend((node.lineno, f"cockpit.commands.{a.name}") for a in node.names)
            elif node.module.startswith("cockpit.commands."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names if a.name.startswith("cockpit.commands."))
    return sorted(out)


def test_every_module_is_a_command_or_a_helper() -> None:
    """A command is named in the CLI's COMMANDS (`sim` is the simulator's, outside); a helper's
    name starts with `_`; nothing else sits in cockpit/commands."""
    modules = {p.stem for p in HERE.glob("*.py")} - {"__init__"}
    commands = {m for m in modules if not m.startswith("_")}
    assert commands == set(COMMANDS) - {"sim"}
    assert {"_support", "_launching"} <= modules - commands


def test_no_command_imports_another_and_no_helper_imports_a_command() -> None:
    reaches = []
    for py in sorted(HERE.glob("*.py")):
        for line, module in _commands_imported(py):
            name = module.split(".")[2]
            if not name.startswith("_"):
                reaches.append(f"{py.name}:{line}: {module}")
    assert reaches == [], f"imports of a command module (move what is shared into a helper): {reaches}"


def test_the_finder_sees_each_spelling(tmp_path: Path) -> None:
    py = tmp_path / "x.py"
    py.write_text("from cockpit.commands.plan import a\nfrom cockpit.commands import logs\n"
                  "def f():\n    import cockpit.commands.up\n    from . import bench\n    from ._support import b\n",
                  encoding="utf-8")
    assert _commands_imported(py) == [(1, "cockpit.commands.plan"), (2, "cockpit.commands.logs"),
                                      (4, "cockpit.commands.up"), (5, "cockpit.commands.bench"),
                                      (6, "cockpit.commands._support")]
