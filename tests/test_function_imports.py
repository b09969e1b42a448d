"""Where an import of the package may sit inside a function (issue 37: 43 % of them once did, and a
reader or an editor follows none of them from the module's head).

Only where start-up time is measured: `cockpit --help` (the CLI imports a command when it runs, and
a failed command's error types once it has failed), `cockpit diagnose --json` (its text report's
renderer), and asyncssh behind a remote host; each is named here with the measurement and carries
a comment naming it. The rest of the package is counted per module: those counts only fall (the
faces, the supervisor, the preflight and the backends are moved module by module).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import cockpit

ROOT = Path(cockpit.__file__).resolve().parent
STARTUP_TEST = "test_startup_imports.py"

# the modules held to the rule: every function-level import of the package in them is listed below
RULED = ("cli.py", "face.py", "face_light.py", "face_journal.py", "commands/", "journal/", "telemetry/", "transport/", "remote/",
         "slurm/", "model/", "serving/")
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
# the rest of the package: function-level imports of the package per module, at most (December 2026)
ELSEWHERE_AT_MOST = {
    "backends/__init__.py": 6, "backends/foreign.py": 1, "backends/sglang/__init__.py": 6,
    "backends/sglang/logparse.py": 2, "backends/sglang/plan.py": 1, "backends/sglang/terms.py": 1,
    "backends/vllm/__init__.py": 7, "backends/vllm/logparse.py": 1, "backends/vllm/placement.py": 1,
    "backends/vllm/plan.py": 1,
    "core/findings.py": 2, "core/profile.py": 1, "core/report.py": 1,
    "preflight/gate.py": 9, "preflight/launchcheck.py": 6, "preflight/planning.py": 15,
    "sim/main.py": 2, "sim/sglang/config.py": 1, "sim/sglang/logfmt.py": 1, "sim/sglang/rank.py": 1,
    "sim/vllm/config.py": 1, "sim/vllm/main.py": 1, "sim/vllm/server.py": 2,
    "supervisor/nodes.py": 2, "supervisor/servingwatch.py": 2, "supervisor/stacks.py": 2,
    "supervisor/supervisor.py": 5, "supervisor/targets/__init__.py": 2, "supervisor/watch.py": 1,
    "ui/app.py": 8, "ui/format.py": 3, "ui/runcontrol.py": 5, "ui/screens/auto.py": 1, "ui/screens/crash.py": 1,
    "ui/screens/dashboard.py": 4, "ui/screens/export.py": 1, "ui/screens/groups.py": 1,
    "ui/screens/history.py": 2, "ui/screens/picker.py": 6, "ui/screens/tune.py": 2, "ui/themes.py": 1,
    "ui/unattended.py": 1,
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
    src = {rel: (ROOT / rel).read_text(encoding="utf-8").splitlines() for rel in everywhere if rel.startswith(RULED)}
    found = [(rel, line, mod) for rel in src for line, mod in everywhere[rel]]
    pairs = {(rel, mod) for rel, _, mod in found}
    assert sorted(pairs - set(MEASURED)) == [], "function-level imports with no start-up measured: move them up"
    assert sorted(set(MEASURED) - pairs) == [], "listed as measured but no longer inside a function"
    for rel, line, mod in found:
        near = " ".join(src[rel][max(0, line - 4):line])  # the line and the three above it (a block's comment)
        # the start-up test, or (the registry's one case) the test that holds the other reason
        assert STARTUP_TEST in near or "start-up" in near or "tests/" in near, \
            f"{rel}:{line}: {mod} names no measurement"


def test_the_rest_of_the_package_holds_no_more_function_level_imports_than_it_had() -> None:
    counts = {rel: len(imports) for rel, imports in _all().items() if not rel.startswith(RULED)}
    assert len(counts) >= 30  # the walk read the package
    grown = {rel: (n, ELSEWHERE_AT_MOST.get(rel, 0)) for rel, n in counts.items() if n > ELSEWHERE_AT_MOST.get(rel, 0)}
    assert grown == {}, f"function-level imports of the package grew (now, at most): {grown}"
    assert sum(counts.values()) <= sum(ELSEWHERE_AT_MOST.values())
