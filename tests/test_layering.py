"""The layers stay apart: the core and the backends run headless (no textual, asyncssh, httpx)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import cockpit

HEADLESS = ["cockpit.core", "cockpit.backends", "cockpit.model"]
FORBIDDEN = ["textual", "asyncssh", "httpx"]
ROOT = Path(cockpit.__file__).resolve().parent


def _modules(package: str) -> list[str]:
    path = ROOT.joinpath(*package.split(".")[1:])
    names = [package]
    for info in pkgutil.walk_packages([str(path)], prefix=package + "."):
        names.append(info.name)
    return names


def test_core_and_backends_import_without_ui_or_io_libraries() -> None:
    mods = [m for pkg in HEADLESS for m in _modules(pkg)]
    code = (
        "import importlib, json, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(json.dumps([f for f in {FORBIDDEN!r} if f in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], f"headless layers pulled in {out.stdout}"
    assert len(mods) >= 4


def test_no_textual_import_outside_ui() -> None:
    offenders = []
    for py in ROOT.rglob("*.py"):
        rel = py.relative_to(ROOT).as_posix()
        if rel.startswith("ui/"):
            continue
        tree = ast.parse(py.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "textual" or n.startswith("textual.") for n in names):
                offenders.append(rel)
    assert offenders == [], f"textual imported outside cockpit/ui: {offenders}"


def test_widgets_do_no_io() -> None:
    """Widgets render state; sockets, subprocesses, SSH and HTTP belong to workers below them."""
    widgets = ROOT / "ui" / "widgets"
    if not widgets.is_dir():
        return
    banned = {"subprocess", "socket", "asyncssh", "httpx", "sqlite3"}
    for py in widgets.rglob("*.py"):
        tree = ast.parse(py.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & banned, py
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in banned, py


def test_core_imports_nothing_above_it() -> None:
    """Imports only go downwards: cockpit.core is the bottom layer (pure domain)."""
    offenders = []
    for py in (ROOT / "core").rglob("*.py"):
        tree = ast.parse(py.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mod = None
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
            elif isinstance(node, ast.Import):
                mod = next((a.name for a in node.names if a.name.startswith("cockpit")), None)
            if mod and mod.startswith("cockpit") and not mod.startswith("cockpit.core"):
                offenders.append(f"{py.name}: {mod}")
    assert offenders == [], offenders


def test_backends_import_no_io_layer() -> None:
    """Backends sit on the core only: no supervisor, transport, telemetry, journal or UI."""
    above = ("cockpit.supervisor", "cockpit.transport", "cockpit.telemetry", "cockpit.journal", "cockpit.ui",
             "cockpit.commands", "cockpit.cli", "cockpit.sim")
    offenders = []
    for py in (ROOT / "backends").rglob("*.py"):
        tree = ast.parse(py.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(above):
                offenders.append(f"{py.name}: {node.module}")
    assert offenders == [], offenders


def _cockpit_imports(py: Path) -> list[tuple[int, str]]:
    """Every `cockpit…` module a file imports, annotation-only imports included."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return [(n, m) for n, m in out if m == "cockpit" or m.startswith("cockpit.")]


def test_ui_and_commands_reach_the_rest_only_through_the_face() -> None:
    """ui/ and commands/ import each other and cockpit.face, nothing else of the package (a package
    added later is covered too: the rule names what is allowed, not what is banned)."""
    allowed = ("cockpit.face", "cockpit.ui", "cockpit.commands")
    offenders = []
    for face_dir in ("ui", "commands"):
        for py in (ROOT / face_dir).rglob("*.py"):
            for lineno, mod in _cockpit_imports(py):
                if not any(mod == a or mod.startswith(a + ".") for a in allowed):
                    offenders.append(f"{py.relative_to(ROOT).as_posix()}:{lineno}: {mod}")
    assert offenders == [], offenders


def test_the_face_offers_every_name_it_types_and_nothing_above_it() -> None:
    """cockpit.face's typed names (its TYPE_CHECKING block) are the names it loads, each loads from
    the module it names, and none comes from ui, commands or the CLI."""
    from cockpit import face

    typed: set[str] = set()
    tree = ast.parse((ROOT / "face.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for a in imp.names:
                    name = a.asname or a.name
                    typed.add(name)
                    assert face.SOURCES[name] == (imp.module, a.name), name
    assert typed == set(face.SOURCES)
    assert len(typed) >= 100
    for name, (module, _attr) in face.SOURCES.items():
        assert not module.startswith(("cockpit.ui", "cockpit.commands", "cockpit.cli")), name
        assert getattr(face, name) is not None
    try:
        face.NotAName  # noqa: B018
    except AttributeError as exc:
        assert "NotAName" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
