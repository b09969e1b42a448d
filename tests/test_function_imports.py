"""Where an import of the package may sit inside a function (issue 37: 43 % of them once did, and a
reader or an editor follows none of them from the module's head).

Only where start-up time is measured: `cockpit --help` (the CLI imports a command when it runs, and
a failed command's error types once it has failed), `cockpit diagnose --json` (its text report's
renderer; an engine's parts load on first use, so an SGLang log never loads vLLM's grammar), and
asyncssh behind a remote host. Each (module, import) is named here with the measurement; a line
carries a comment naming it, or its module is one whose every part loads on first use (the registry
and the two engine packages), named here with the start-up test that holds it. Every other module
of the package imports at its head.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import cockpit

ROOT = Path(cockpit.__file__).resolve().parent
STARTUP_TEST = "test_startup_imports.py"

# (module, what it imports inside a function) → the start-up measurement that keeps it there
MEASURED = {
    ("cli.py", "cockpit.backends"): "not start-up: the registry reads COCKPIT_EXTRA_BACKENDS when imported, and a "
                                    "malformed entry must reach the CLI's handler as exit 2 (tests/third_engine)",
    ("cli.py", "cockpit.errors"): "`--help`: did-you-mean and a bad registry name only (tests/test_startup_imports.py)",
    ("cli.py", "cockpit.sim.main"): "`--help`: the simulator only for `cockpit sim`",
    ("cli.py", "cockpit.core.safe_output"): "`--help`: the terminal guard only once a command runs",
    ("cli.py", "cockpit.backends.base"): "`--help`: a failed command's error types once it has failed",
    ("cli.py", "cockpit.core.profile"): "`--help`: the same (pydantic, ~0.2 s)",
    ("cli.py", "cockpit.transport.base"): "`--help`: the same",
    ("commands/diagnose.py", "cockpit.commands._render"): "`diagnose --json`'s module budget: no text renderer",
    ("transport/__init__.py", "cockpit.transport.ssh"): "asyncssh (~0.3 s) only for a remote host: the face loads none",
}
# modules whose parts load on first use, every function-level import in them, and the start-up
# test that measures why (a test function of tests/test_startup_imports.py: it must exist)
LOAD_ON_FIRST_USE = {
    "backends/__init__.py": "test_help_imports_only_argparse_and_the_cli",  # `--help` imports the registry
    "backends/sglang/__init__.py": "test_diagnose_of_an_sglang_log_imports_only_its_path",
    "backends/vllm/__init__.py": "test_diagnose_of_an_sglang_log_never_loads_the_vllm_grammar",
}


def function_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of the package inside a function (at any depth)."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.ImportFrom) and child.level == 0 and child.module \
                    and child.module.split(".")[0] == "cockpit":
                out.append((child.lineno, child.module))
            elif in_function and isinstance(child, ast.Import):
                out.extend((child.lineno, a.name) for a in child.names if a.name.split(".")[0] == "cockpit")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), False)
    return out


@functools.cache
def _all() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for py in sorted(ROOT.rglob("*.py")):
        rel = py.relative_to(ROOT).as_posix()
        if imports := function_imports(py.read_text(encoding="utf-8")):
            found[rel] = imports
    return found


def test_the_finder_sees_function_level_imports_only() -> None:
    src = ("from cockpit.errors import BadInput\nif X:\n    import cockpit.core\n"
           "def f():\n    from cockpit.face import Profile\n    class C:\n        import cockpit.aio\n"
           "async def g():\n    def h():\n        from os import path\n        from .x import y\n")
    assert function_imports(src) == [(5, "cockpit.face"), (7, "cockpit.aio")]


def test_ruled_modules_import_inside_a_function_only_where_start_up_is_measured() -> None:
    everywhere = _all()
    assert len(list(ROOT.rglob("*.py"))) >= 200  # the walk read the package
    src = {rel: (ROOT / rel).read_text(encoding="utf-8").splitlines() for rel in everywhere}
    found = [(rel, line, mod) for rel in src for line, mod in everywhere[rel] if rel not in LOAD_ON_FIRST_USE]
    pairs = {(rel, mod) for rel, _, mod in found}
    assert sorted(pairs - set(MEASURED)) == [], "function-level imports with no start-up measured: move them up"
    assert sorted(set(MEASURED) - pairs) == [], "listed as measured but no longer inside a function"
    for rel, line, mod in found:
        near = " ".join(src[rel][max(0, line - 4):line])  # the line and the three above it (a block's comment)
        # the start-up test, or (the registry's one case) the test that holds the other reason
        assert STARTUP_TEST in near or "start-up" in near or "tests/" in near, \
            f"{rel}:{line}: {mod} names no measurement"


def test_the_modules_that_load_on_first_use_name_a_start_up_test_that_exists() -> None:
    startup = (Path(__file__).parent / STARTUP_TEST).read_text(encoding="utf-8")
    for rel, test in LOAD_ON_FIRST_USE.items():
        assert f"def {test}(" in startup, (rel, test)
        assert rel in _all(), f"{rel} imports nothing inside a function any more: take it off the list"
