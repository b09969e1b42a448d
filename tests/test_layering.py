"""The layers stay apart: the core and the backends run headless (no textual, asyncssh, httpx)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import cockpit
from tests.test_import_cycles import cycles  # one cycle finder: Tarjan, self-imports too

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


FACES = ("cockpit.face", "cockpit.face_light", "cockpit.face_journal")  # the whole surface, and its light halves


def test_ui_and_commands_reach_the_rest_only_through_the_face() -> None:
    """ui/ and commands/ import each other and the face (or a light half of it), nothing else of the
    package (a package added later is covered too: the rule names what is allowed, not what is banned)."""
    allowed = (*FACES, "cockpit.ui", "cockpit.commands")
    offenders = []
    for face_dir in ("ui", "commands"):
        for py in (ROOT / face_dir).rglob("*.py"):
            for lineno, mod in _cockpit_imports(py):
                if not any(mod == a or mod.startswith(a + ".") for a in allowed):
                    offenders.append(f"{py.relative_to(ROOT).as_posix()}:{lineno}: {mod}")
    assert offenders == [], offenders


def _offered(module: str) -> dict[str, tuple[str, str]]:
    """A face's names → (defining module, name there), from its source: every statement after the
    docstring is a plain module-level `from cockpit.X import name [as other]` (no `__getattr__`, no
    `TYPE_CHECKING` block: an editor follows each name to its definition)."""
    tree = ast.parse((ROOT / f"{module.split('.')[-1]}.py").read_text(encoding="utf-8"))
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body[1:]:
        assert isinstance(node, ast.ImportFrom) and node.module and node.level == 0, (module, node.lineno)
        if node.module == "__future__":
            continue
        for a in node.names:
            out[a.asname or a.name] = (node.module, a.name)
    return out


def _used_by_the_faces() -> set[str]:
    used: set[str] = set()
    for face_dir in ("ui", "commands"):
        for py in (ROOT / face_dir).rglob("*.py"):
            for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module in FACES:
                    used.update(a.name for a in node.names)
    return used


def test_the_face_is_plain_imports_of_the_domain_the_faces_use() -> None:
    """The face offers what ui/ and commands/ use and nothing more (a name no face imports is
    dropped), each from the module that defines it and none from a face itself; each light half
    offers a subset, the same objects; each face is plain imports, so importing it runs them."""
    import importlib

    whole = _offered("cockpit.face")
    halves = {m: _offered(m) for m in FACES[1:]}
    assert len(whole) >= 100 and len(halves["cockpit.face_light"]) >= 30
    for half, offered in halves.items():
        assert offered.items() <= whole.items(), (half, sorted(set(offered.items()) - set(whole.items())))
    assert sorted(set(whole) - _used_by_the_faces()) == [], "names no face uses"
    for name, (module, attr) in whole.items():
        assert not module.startswith((*FACES, "cockpit.ui", "cockpit.commands", "cockpit.cli")), name
        defined = getattr(importlib.import_module(module), attr)
        assert getattr(importlib.import_module("cockpit.face"), name) is defined, name
        for half, offered in halves.items():
            if name in offered:
                assert getattr(importlib.import_module(half), name) is defined, (half, name)


def test_ruff_bans_in_the_editor_what_import_linter_forbids_the_faces() -> None:
    """The two tools hold one list: ruff's banned API (TID251, on in cockpit/ui and cockpit/commands
    by their ruff.toml) is import-linter's forbidden_modules for the faces, and the rule is on there."""
    import tomllib

    conf = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in conf["tool"]["importlinter"]["contracts"]
                    if c["type"] == "forbidden" and c["source_modules"] == ["cockpit.ui", "cockpit.commands"])
    banned = conf["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"]
    assert sorted(banned) == sorted(contract["forbidden_modules"])
    for face_dir in ("ui", "commands"):
        local = tomllib.loads((ROOT / face_dir / "ruff.toml").read_text(encoding="utf-8"))
        assert local["extend"] == "../../pyproject.toml" and "TID251" in local["lint"]["extend-select"], face_dir


# ---------------------------------------------------------------- the import graph, measured
def _graph():  # type: ignore[no-untyped-def]
    import grimp

    # as lint-imports builds it: an annotation-only import (under TYPE_CHECKING) runs nothing
    return grimp.build_graph("cockpit", exclude_type_checking_imports=True, cache_dir=None)


def _edges(graph) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    mods = set(graph.modules)
    return {m: set(graph.find_modules_directly_imported_by(m)) & mods for m in sorted(mods)}


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _layers() -> list[list[tuple[str, bool]]]:
    """pyproject's layers contract: per layer (top first), its packages and whether they are
    independent siblings (`|`) or not (`:`)."""
    import tomllib

    conf = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in conf["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers" and "containers" not in c and "cockpit.cli" in c["layers"])
    out = []
    for layer in contract["layers"]:
        independent = "|" in layer
        out.append([(p.strip(), independent) for p in layer.replace("|", ":").split(":")])
    return out


def test_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circles_between_modules_or_packages() -> None:
    """0 import circles, from the code's own imports (function-level imports count)."""
    edges = _edges(_graph())
    assert len(edges) > 150  # the whole package was read
    assert cycles(edges) == [], "modules importing each other in a circle"
    packages: dict[str, set[str]] = {}
    for mod, targets in edges.items():
        packages.setdefault(_top(mod), set()).update(_top(t) for t in targets if _top(t) != _top(mod))
    assert cycles(packages) == [], "top-level packages importing each other in a circle"


def test_every_package_is_in_a_layer_and_no_import_runs_back_up() -> None:
    """Every top-level package sits in a layer of pyproject.toml, and no import runs from a lower
    layer to a higher one or between independent siblings (0 found, measured from the imports)."""
    layers = _layers()
    rank = {pkg: i for i, layer in enumerate(layers) for pkg, _ in layer}
    independent = {pkg for layer in layers for pkg, ind in layer if ind}
    edges = _edges(_graph())
    tops = {_top(m) for m in edges} - {"cockpit", "cockpit.__main__"}  # the root and `python -m cockpit`
    assert sorted(tops - set(rank)) == [], "top-level packages in no layer"
    upward = sorted(
        f"{m} -> {t}" for m, targets in edges.items() for t in targets
        if _top(m) in rank and _top(t) in rank and _top(m) != _top(t)
        and (rank[_top(t)] < rank[_top(m)] or (rank[_top(t)] == rank[_top(m)] and _top(m) in independent))
    )
    assert upward == [], "imports running back up a layer (or between independent siblings)"


def test_supervisor_holds_a_target_and_nothing_subclasses_it() -> None:
    """Targets are composed: no `Supervisor.__new__`, no subclass of Supervisor anywhere, and each
    target reaches nothing of the Supervisor but the `Run` protocol (no `cockpit.supervisor.supervisor`
    import, no other target)."""
    subclasses = []
    for py in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if "Supervisor" in bases:
                    subclasses.append(f"{py.relative_to(ROOT)}: {node.name}")
                if node.name == "Supervisor":
                    assert not any(isinstance(f, ast.FunctionDef) and f.name == "__new__" for f in node.body)
    assert subclasses == []
    graph = _graph()
    targets = sorted(m for m in graph.modules if m.startswith("cockpit.supervisor.targets."))
    assert {"cockpit.supervisor.targets.hosts", "cockpit.supervisor.targets.slurm"} <= set(targets)
    for t in targets:
        imported = graph.find_modules_directly_imported_by(t)
        assert "cockpit.supervisor.supervisor" not in imported, t
        others = {o for o in ("cockpit.supervisor.targets.hosts", "cockpit.supervisor.targets.slurm") if o != t}
        assert not imported & others, t


MODULE_LINES_MAX = 800


def test_every_module_is_small_enough_to_read() -> None:
    """Issue 37's bound: no module of the package over 800 lines (split along a seam a reader would
    name, as vllm/records.py from the parser's dispatch)."""
    long = {str(p.relative_to(ROOT.parent)): n for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_MAX}
    assert long == {}, f"modules over {MODULE_LINES_MAX} lines: {long}"


def test_ruff_flags_a_face_reaching_past_the_face_and_nothing_below_it() -> None:
    """What an editor shows: the same line is TID251 in cockpit/commands and cockpit/ui, and fine
    in the supervisor (ruff reads the source from stdin under the name it would have)."""
    reach = "from cockpit.supervisor.api import RunInfo\n\nprint(RunInfo)\n"

    def codes(name: str) -> str:
        r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                            "--stdin-filename", name, "-"], input=reach, capture_output=True, text=True,
                           cwd=ROOT.parent, timeout=60)
        return r.stdout

    assert "TID251" in codes("cockpit/commands/probe.py")
    assert "TID251" in codes("cockpit/ui/probe.py")
    assert "TID251" not in codes("cockpit/supervisor/probe.py")
