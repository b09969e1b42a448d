"""No import cycles among Cockpit's modules, type-only ones included (issue 37, "one owner per flow").

import-linter's layer contracts (pyproject.toml) leave out the imports under `if TYPE_CHECKING:`
and say nothing about two modules of one package importing each other. A cycle of either kind
still means that neither module can be read, tested or moved without the other: the flow has two
owners. So this test reads every `import` and `from … import` in every module of the package —
at the top, inside functions, under `if TYPE_CHECKING:` — builds the graph of which module imports
which, and fails naming each strongly connected component of more than one module.

Reading the source with `ast` (not importing it) sees the lazy imports inside functions, which
are exactly the ones a cycle hides in. An import of a package counts as importing its
`__init__.py`, and `from pkg import name` imports `pkg.name` when that is a module, else `pkg`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "cockpit"


def _module_names() -> dict[str, Path]:
    """Every module of the package: dotted name -> file (`pkg/__init__.py` is `pkg`)."""
    out: dict[str, Path] = {}
    for py in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(py.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = py
    return out


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """A relative `from` import's base, as a dotted name."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its source)."""
    modules = _module_names()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append(sub if sub in modules else base)
            for target in found:
                # `import a.b.c` runs a, a.b and a.b.c; the edge that matters is to the module named
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # a package's `__init__` naming its own names (`from . import x`, x defined there) is no edge
                if target.startswith(PACKAGE) and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative: the
    graph's depth would pass Python's recursion limit on a long chain), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    out.append(sorted(component))
    return sorted(out)


def _edges_within(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    members = set(component)
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]


def test_the_graph_sees_lazy_and_type_only_imports() -> None:
    """The reader itself: the imports a cycle hides in are in the graph."""
    graph = import_graph()
    # under `if TYPE_CHECKING:` (cockpit/serving/workload.py names the transport for annotations)
    assert "cockpit.transport.base" in graph["cockpit.serving.workload"]
    # inside a function (the vLLM backend loads its parser on first use)
    assert "cockpit.backends.vllm.logparse" in graph["cockpit.backends.vllm"]


def test_tarjan_finds_a_cycle_and_leaves_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    told = "\n\n".join(f"{len(c)} modules: " + ", ".join(c) + "\n  " + "\n  ".join(_edges_within(c, graph))
                       for c in found)
    assert not found, f"{len(found)} import cycle(s) (type-only and in-function imports count):\n\n{told}"
