"""No code path launches a server without the gate's verdict (issue 37, item 1; issue 40, finding 1).

The rule is a type: a target launches only a `GatedLaunch`, which only the gate mints
(`GateResult.launch`, cockpit/preflight/launchplan.py). This file holds the code to it:

- statically, an AST scan of cockpit/: every call of `.start(…)` that launches (every one with an
  argument that is not a regex group's) passes, as its first argument, a name the same function
  bound from the gate (`….launch(…)` of a GateResult, `….gated(…)`) or received as a parameter
  typed `GatedLaunch`; every target's `start` takes a `GatedLaunch` and checks it first; nothing
  but launchplan.py constructs one or names its key;
- at run time, the value is checked where it is used: a forged one, a list of argvs, one minted
  for another profile or launched once already never reach a host.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from cockpit.core.overrides import Overrides

ROOT = Path(__file__).resolve().parents[2] / "cockpit"
GATE_CALLS = {"launch", "gated"}  # GateResult.launch(force=…), Supervisor.gated(overrides, …)


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"), str(p))) for p in sorted(ROOT.rglob("*.py"))]


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _own_calls(fn: ast.AST) -> list[ast.Call]:
    """The calls in `fn`'s body, not in the functions nested inside it (they are checked as theirs)."""
    out: list[ast.Call] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _launching_start(call: ast.Call) -> bool:
    """`x.start(…)` that launches: an argument, and not a regex match's `m.start("group")` / `m.start(1)`."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "start"):
        return False
    if not call.args and not call.keywords:
        return False  # threads, tracemalloc, a regex match's whole span
    return not (call.args and isinstance(call.args[0], ast.Constant))


def _from_the_gate(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """`name` in `fn` is a parameter typed GatedLaunch, or bound from a call of the gate."""
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    for a in params:
        if a.arg == name:
            return a.annotation is not None and "GatedLaunch" in ast.unparse(a.annotation)
    bound = False
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not any(isinstance(t, ast.Name) and t.id == name for t in targets) or node.value is None:
                continue
            calls = [c for c in ast.walk(node.value) if isinstance(c, ast.Call)]
            if not any(isinstance(c.func, ast.Attribute) and c.func.attr in GATE_CALLS for c in calls):
                return False  # bound from anything else, even once: not the gate's
            bound = True
    return bound


def test_every_call_of_start_passes_the_gates_verdict() -> None:
    sites: list[str] = []
    bad: list[str] = []
    for path, tree in _modules():
        rel = path.relative_to(ROOT.parent).as_posix()
        for fn in _functions(tree):
            for call in _own_calls(fn):
                if not _launching_start(call):
                    continue
                where = f"{rel}:{call.lineno} in {fn.name}: {ast.unparse(call)}"
                sites.append(where)
                first = call.args[0] if call.args else None
                if not isinstance(first, ast.Name) or not _from_the_gate(fn, first.id):
                    bad.append(where)
    assert not bad, "a launch that does not pass the gate's GatedLaunch:\n" + "\n".join(bad)
    # the scan sees the launches there are: up, the dashboard's launch, tune's step, the
    # Supervisor's start/launch/restart handing on to its target
    seen = {s.split(":")[0] + ":" + s.split(" in ")[1].split(":")[0] for s in sites}
    assert {"cockpit/commands/up.py:_up", "cockpit/ui/runcontrol.py:launch", "cockpit/commands/tune.py:launch",
            "cockpit/supervisor/supervisor.py:start", "cockpit/supervisor/supervisor.py:launch",
            "cockpit/supervisor/supervisor.py:restart"} <= seen, sorted(seen)


def test_every_target_start_takes_and_checks_a_gated_launch() -> None:
    targets = sorted((ROOT / "supervisor" / "targets").glob("*.py"))
    found = []
    for path in targets:
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            if fn.name != "start":
                continue
            found.append(path.name)
            first = fn.args.args[1]  # after self
            assert first.annotation is not None and ast.unparse(first.annotation) == "GatedLaunch", (path, first.arg)
            assert "argvs" not in [a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]], path
            if path.name == "base.py":
                continue  # the protocol: no body
            calls = [c for c in _own_calls(fn) if isinstance(c.func, ast.Name) and c.func.id == "check_gated"]
            assert calls, f"{path.name}: start launches without check_gated"
            checked_at = min(c.lineno for c in calls)
            awaited = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Await)]
            assert not awaited or checked_at < min(awaited), f"{path.name}: I/O before the gate's value is checked"
            # and no target builds an argv of its own any more
            assert not [c for c in _own_calls(fn) if isinstance(c.func, ast.Attribute) and c.func.attr == "node_argvs"]
    assert sorted(found) == ["base.py", "hosts.py", "slurm.py"], found


def test_the_host_programs_launch_is_called_only_from_a_gated_start() -> None:
    """Below the targets, a server starts by the host program's `launch` (hosts) or the login
    node's `submit` (Slurm): each is called only inside a target's `start`, after its check."""
    callers = []
    for path, tree in _modules():
        for fn in _functions(tree):
            for call in _own_calls(fn):
                f = call.func
                if isinstance(f, ast.Attribute) and (
                        (f.attr == "launch" and "ops" in ast.unparse(f.value)) or
                        (f.attr == "submit" and "login" in ast.unparse(f.value))):
                    callers.append((path.relative_to(ROOT.parent).as_posix(), fn.name))
    assert sorted(set(callers)) == [("cockpit/supervisor/targets/hosts.py", "start"),
                                    ("cockpit/supervisor/targets/slurm.py", "start")], callers


def test_only_the_gate_mints_a_gated_launch() -> None:
    for path, tree in _modules():
        if path.name == "launchplan.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                assert name != "GatedLaunch", f"{path}:{node.lineno} constructs a GatedLaunch"
                assert not (name == "mint" and path.name != "gate.py"), f"{path}:{node.lineno} mints outside the gate"
            if isinstance(node, (ast.Name, ast.Attribute)):
                ident = node.id if isinstance(node, ast.Name) else node.attr
                assert ident != "_MINT", f"{path}:{node.lineno} names the gate's key"


def _sim_profile(tmp_path: Path, name: str = "gatedtest") -> object:
    from cockpit.face import load_profile

    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\nhosts:\n  - ssh: local\nprogram: [python3, -c, 'pass']\nworkdir: {tmp_path}\n"
                 "server:\n  model-path: org/model\n  tp: 1\n")
    return load_profile(p)


def test_a_launch_without_the_gates_value_never_reaches_a_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At run time: a forged value, a bare list of argvs, another profile's verdict and a verdict
    launched once already are refused before the target does any I/O (its host program is never
    asked)."""
    from cockpit.face import GatedLaunch, GateResult, Supervisor

    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    profile = _sim_profile(tmp_path)
    sup = Supervisor(profile)  # type: ignore[arg-type]
    asked: list[str] = []

    async def no_io(*_a: object, **_k: object) -> None:
        asked.append("host program")
        raise AssertionError("the target reached its host")

    monkeypatch.setattr(type(sup.nodes[0].ops), "find", no_io)
    with pytest.raises(TypeError, match="only by the gate"):
        GatedLaunch(object(), profile_name="gatedtest", overrides=Overrides(), flags={}, argvs=[["python3"]], verdict="go")
    with pytest.raises(TypeError, match="gate"):
        asyncio.run(sup.start([["python3", "-c", "pass"]]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gate"):
        asyncio.run(sup.start({"tp": 1}))  # type: ignore[arg-type]

    # a verdict the gate gave (no I/O needed: the result as the gate returns it, all clear)
    ok = GateResult(profile, {}, [["python3", "-c", "pass"]])  # type: ignore[arg-type]
    other = GateResult(_sim_profile(tmp_path, "another"), {}, [["python3"]])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="another"):
        asyncio.run(sup.start(other.launch()))
    go = ok.launch()
    assert go.argvs == [["python3", "-c", "pass"]] and go.verdict == "go"
    with pytest.raises(AssertionError, match="reached its host"):
        asyncio.run(sup.start(go))  # the value passes: the target goes on (here, to its stubbed-out host)
    with pytest.raises(TypeError, match="launched already"):
        asyncio.run(sup.start(go))
    assert asked == ["host program"]


def test_a_refusing_verdict_mints_nothing(tmp_path: Path) -> None:
    from cockpit.face import Finding, GateRefused, GateResult

    profile = _sim_profile(tmp_path)
    refused = GateResult(profile, {"hicache-size": 100}, [["python3"]],  # type: ignore[arg-type]
                         findings=[Finding("hicache_host_memory", "critical", "local: 1 rank × 100 GB > 23.5 GB")])
    with pytest.raises(GateRefused) as caught:
        refused.launch()
    assert caught.value.findings[0].id == "hicache_host_memory"
    assert "1 rank × 100 GB" in str(caught.value)
    plan_only = GateResult(profile, {}, [["python3"]],  # type: ignore[arg-type]
                           plan=Finding("memory_plan", "critical", "headroom 0.2 GiB after capture"))
    with pytest.raises(GateRefused):
        plan_only.launch()
    forced = plan_only.launch(force=True)
    assert forced.verdict == "force" and forced.plan_note == "headroom 0.2 GiB after capture"
