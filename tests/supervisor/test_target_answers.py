"""Targets answer, the Supervisor owns (issue 37, item 4).

A target (cockpit/supervisor/targets/) launches, finds, follows and stops a run, and says what it
found in its return values (RunFound, StopResult, refresh_once's end); the run's state, flags,
lifecycle and journal are the Supervisor's, which applies them. This file holds the targets' code
to it by an AST scan: no target assigns an attribute of the run (`run.x = …`, `self.run.x = …`,
`run.x += …`), and a target uses only the members of the small `Run` protocol (targets/base.py),
which is itself held to that list here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from cockpit.core.profile import load_profile
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.targets import base

TARGETS = Path(__file__).resolve().parents[2] / "cockpit" / "supervisor" / "targets"
# what a target may read of the run, the watchers it drives, and the few callbacks it calls
RUN_MEMBERS = {
    "profile", "backend", "follow", "readiness", "serving", "info", "flags", "overrides", "stopping", "lifecycle",
    "set_lifecycle", "say", "changed", "server_exited", "ended_with", "readiness_path", "api_base_url", "run_gpus",
}


def _run_expr(node: ast.AST) -> bool:
    """`run` or `self.run`: the Supervisor as the target holds it."""
    if isinstance(node, ast.Name):
        return node.id == "run"
    return isinstance(node, ast.Attribute) and node.attr == "run" and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def _modules() -> list[tuple[str, ast.Module]]:
    paths = sorted(TARGETS.glob("*.py"))
    assert {p.name for p in paths} >= {"base.py", "hosts.py", "slurm.py"}
    return [(p.name, ast.parse(p.read_text(encoding="utf-8"))) for p in paths]


def test_no_target_writes_a_field_of_the_supervisor() -> None:
    writes: list[str] = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = list(node.targets)
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, (ast.Attribute, ast.Subscript)) and _run_expr(sub.value):
                        writes.append(f"{name}:{node.lineno}: {ast.unparse(t)}")
    assert writes == [], "a target writes the Supervisor's state (answer it instead):\n" + "\n".join(writes)


def test_targets_use_only_the_small_back_channel() -> None:
    used: dict[str, set[str]] = {}
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _run_expr(node.value):
                used.setdefault(node.attr, set()).add(f"{name}:{node.lineno}")
    outside = {m: sorted(at) for m, at in used.items() if m not in RUN_MEMBERS}
    assert outside == {}, f"a target reaches past the Run protocol: {outside}"
    assert used, "the scan found no use of the run at all: it no longer looks at the targets"


def test_the_run_protocol_is_that_small_list_and_the_supervisor_is_one(tmp_path: Path) -> None:
    declared = {n for n in vars(base.Run) if not n.startswith("_")}
    assert declared == RUN_MEMBERS
    p = tmp_path / "one.yaml"
    p.write_text(f"name: one\nversion: 0.5.9\nworkdir: {tmp_path}\nserver:\n  model-path: /models/m\n")
    sup = Supervisor(load_profile(p))  # the target is handed the Supervisor: it offers every member
    assert [m for m in sorted(RUN_MEMBERS) if not hasattr(sup, m)] == []


def test_start_attach_and_stop_answer() -> None:
    """Each target's start and attach return RunFound (stop its StopResult, refresh_once whether the
    run ended): what they found, not a RunInfo they made the Supervisor's by writing it."""
    for name, tree in _modules():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Target")):
            fns = {f.name: f for f in cls.body if isinstance(f, ast.AsyncFunctionDef)}
            want = {"start": "RunFound", "attach": "RunFound | None", "stop": "StopResult", "refresh_once": "bool"}
            for fn, ret in want.items():
                assert fn in fns, f"{name}: {cls.name} has no async {fn}"
                returns = fns[fn].returns
                assert returns is not None and ast.unparse(returns) == ret, (name, cls.name, fn)
