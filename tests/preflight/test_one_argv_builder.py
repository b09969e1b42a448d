"""One argv builder, one rendezvous pick, flag names normalised once (issue 37, item 2).

- The server's argv is built in one place, `gate.build_argvs` (cockpit/preflight/gate.py): it is
  the only caller of the backend's `launch.node_argvs` / `launch.argv` outside the backends; the
  gate builds every node's argv once and the targets launch those (the Slurm script renders them,
  the hosts target passes them on), never building one again.
- The rendezvous address a multi-node argv carries is picked once, by the gate.
- Flag names are normalised once, where overrides come in (`Overrides`): nothing in the gate, the
  Supervisor or its targets normalises a flag name again.
"""

from __future__ import annotations

import ast
from pathlib import Path

from cockpit.core.overrides import Overrides
from cockpit.core.profile import load_profile
from cockpit.preflight.gate import HEAD_PLACEHOLDER, build_argvs, gate

ROOT = Path(__file__).resolve().parents[2] / "cockpit"
BUILDER = ROOT / "preflight" / "gate.py"


def _calls(attr: str, *, skip: tuple[str, ...] = ("backends",)) -> list[str]:
    """`….attr(…)` calls in cockpit/ outside the folders in `skip`, as path:line."""
    out: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr:
                out.append(f"{rel}:{node.lineno}")
    return out


def _launch_calls(attr: str) -> list[str]:
    """`X.launch.attr(…)`: the backend's launch group asked for an argv."""
    out: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "backends":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == attr and isinstance(f.value, ast.Attribute) \
                    and f.value.attr == "launch":
                out.append(str(rel))
    return out


def test_only_the_gate_builds_an_argv() -> None:
    assert _launch_calls("node_argvs") == ["preflight/gate.py"]
    assert _launch_calls("argv") == []
    # nothing outside the backends reaches the engines' command builders either
    assert _calls("build_argv") == [] and _calls("build_node_argv") == []
    builders = [c for c in _calls("build_argvs") if not c.startswith("preflight/gate.py")]
    # `report` and the TUI's copied command show one; no target and no command launches one
    assert all(c.startswith(("commands/report.py", "ui/screens/export.py")) for c in builders), builders


def test_the_targets_launch_the_gates_argvs_without_building_one() -> None:
    targets = ROOT / "supervisor" / "targets"
    for path in [*targets.glob("*.py"), ROOT / "slurm" / "script.py"]:
        text = path.read_text(encoding="utf-8")
        for word in ("node_argvs(", "build_argvs(", "build_argv(", "merged_flags(", "rendezvous_addr(", "free_port("):
            assert word not in text, f"{path.name} builds what the gate built: {word}"
    for name in ("hosts.py", "slurm.py"):
        text = (targets / name).read_text(encoding="utf-8")
        assert "gated.argvs" in text and "gated.flags" in text


def test_the_rendezvous_is_picked_once() -> None:
    assert {c.split(":")[0] for c in _calls("rendezvous_addr")} == {"preflight/gate.py"}
    assert {c.split(":")[0] for c in _calls("free_port")} <= {"preflight/gate.py"}  # head_rendezvous


def test_nothing_past_the_edge_normalises_a_flag_name() -> None:
    """The gate, the Supervisor and its targets take Overrides as they come: no name is respelled."""
    bad: list[str] = []
    for folder in ("preflight", "supervisor"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if name == "normalise_flag_name" or (name == "lstrip" and args == ["-"]) or \
                        (name == "replace" and args in (["_", "-"], ["-", "_"])):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


def _two_node_profile(tmp_path: Path) -> Path:
    p = tmp_path / "two.yaml"
    p.write_text(f"name: two\nversion: 0.5.9\nworkdir: {tmp_path}\nhosts: [{{ssh: gpu-a}}, {{ssh: gpu-b}}]\n"
                 "server:\n  model-path: /models/m\n  tp: 8\n  mem_fraction_static: 0.8\n")
    return p


async def test_the_gate_builds_each_nodes_argv_once_with_its_rendezvous(tmp_path: Path) -> None:
    profile = load_profile(_two_node_profile(tmp_path))
    res = await gate(profile, {"--mem-fraction-static": 0.7}, measure=False, plan=False, dist_addr="10.0.0.1:5000")
    assert res.argvs is not None and len(res.argvs) == 2 and res.dist_addr == "10.0.0.1:5000"
    assert res.argvs == build_argvs(profile, Overrides({"mem-fraction-static": 0.7}), "10.0.0.1:5000")
    for k, argv in enumerate(res.argvs):
        assert argv[argv.index("--node-rank") + 1] == str(k) and argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:5000"
        assert argv.count("--mem-fraction-static") == 1 and argv[argv.index("--mem-fraction-static") + 1] == "0.7"
    go = res.launch()
    assert go.argvs == res.argvs and go.overrides == {"mem-fraction-static": 0.7}
    assert go.flags["mem-fraction-static"] == 0.7 and "mem_fraction_static" not in go.flags
    shown = await gate(profile, measure=False, plan=False, dist_addr="show")
    assert shown.argvs is not None and all(HEAD_PLACEHOLDER in a for a in shown.argvs)
