"""No stub in any engine (issue 37, "a port of capabilities").

Every call a registered engine answers (the shipped ones and the tests' third engine, as the registry
hands them out) is read as source and judged:

- a body that only raises NotImplementedError, or is `pass` / `...`, is a stub (an abstract
  declaration is not an answer: ABC refuses to make an object that leaves one unwritten);
- a body that only returns "nothing" (None, False, 0, "", an empty container, a tuple of those)
  whatever it is asked is a placeholder, unless the port's one description of that call
  (cockpit/backends/base.py) names that very answer and what it means ("None: the supervisor picks
  a free port"): then it is the engine's true answer, not a stand-in;
- a capability group all of whose calls answer "nothing" is a placeholder group: an engine without
  the capability holds None there instead (base.OPTIONAL).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from cockpit.backends import backend_names, get_backend, register_backend, unregister_backend
from cockpit.backends.base import GROUPS, OPTIONAL, REQUIRED, Backend
from tests.third_engine.conftest import ENTRY

ENGINES = (*backend_names(), "echo")


@pytest.fixture(autouse=True)
def echo_registered() -> Iterator[None]:
    register_backend("echo", *ENTRY.split("=", 1)[1].split(":"))
    yield
    unregister_backend("echo")


def _port_calls(protocol: type) -> list[str]:
    return sorted(n for n, m in vars(protocol).items() if inspect.isfunction(m) and not n.startswith("_"))


def _nothing(node: ast.expr) -> str | None:
    """The source of `node` when it is a "nothing" answer (None, False, 0, "", an empty container,
    set(), a tuple of such); None when it says something."""
    if isinstance(node, ast.Constant) and not node.value and node.value is not ...:
        return ast.unparse(node)
    if isinstance(node, (ast.List, ast.Set, ast.Tuple)) and not node.elts:
        return ast.unparse(node)
    if isinstance(node, ast.Dict) and not node.keys:
        return ast.unparse(node)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "dict", "list", "tuple")
            and not node.args and not node.keywords):
        return ast.unparse(node)
    if isinstance(node, ast.Tuple) and all(_nothing(e) is not None for e in node.elts):
        return ast.unparse(node)
    return None


def judge(func: Any) -> tuple[str, str | None] | None:
    """("stub", None) or ("nothing", the answer's source) for a stub or placeholder body; None otherwise."""
    if getattr(func, "__isabstractmethod__", False):
        return None
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    fn = tree.body[0]
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    if not body or all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                  and s.value.value is ...) for s in body):
        return "stub", None
    if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None:
        exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
        if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
            return "stub", None
    if len(body) == 1 and isinstance(body[0], ast.Return):
        value = body[0].value
        answer = "None" if value is None else _nothing(value)
        if answer is not None:
            return "nothing", answer
    return None


def _doors(name: str) -> Iterator[tuple[str, Any, type]]:
    backend = get_backend(name)
    yield "", backend, Backend
    for group, protocol in GROUPS.items():
        obj = getattr(backend, group)
        if obj is not None:
            yield group + ".", obj, protocol


def test_the_judge_tells_a_stub_a_placeholder_and_an_answer() -> None:
    class Sample:
        def stub(self) -> None:
            raise NotImplementedError("later")

        def empty(self) -> None:
            """Only words."""

        def ellipsis(self) -> None: ...

        def none(self, x: int) -> None:
            return None

        def pair(self) -> tuple[dict[str, str], dict[str, str]]:
            return {}, {}

        def answer(self, x: int) -> int:
            return x + 1

        def word(self) -> str:
            return "/alive"

    assert judge(Sample.stub) == ("stub", None)
    assert judge(Sample.empty) == ("stub", None)
    assert judge(Sample.ellipsis) == ("stub", None)
    assert judge(Sample.none) == ("nothing", "None")
    assert judge(Sample.pair) == ("nothing", "({}, {})")
    assert judge(Sample.answer) is None and judge(Sample.word) is None


@pytest.mark.parametrize("name", ENGINES)
def test_no_engine_answers_a_call_with_a_stub_or_a_placeholder(name: str) -> None:
    found = []
    for where, obj, protocol in _doors(name):
        for call in _port_calls(protocol):
            impl = getattr(type(obj), call)
            verdict = judge(impl)
            if verdict is None:
                continue
            kind, answer = verdict
            described = inspect.getdoc(getattr(protocol, call)) or ""
            if kind == "nothing" and answer is not None and answer in described:
                continue  # the port says what this answer means: the engine's true answer
            found.append(f"{name}: {where}{call} ({impl.__qualname__}) {'is a stub' if kind == 'stub' else 'answers ' + str(answer)}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", ENGINES)
def test_no_engine_holds_a_placeholder_group(name: str) -> None:
    backend = get_backend(name)
    for group in (*REQUIRED, *OPTIONAL):
        obj = getattr(backend, group)
        if obj is None:
            assert group in OPTIONAL, f"{name} lacks the required group {group}"
            continue
        verdicts = [judge(getattr(type(obj), call)) for call in _port_calls(GROUPS[group])]
        assert not all(v is not None for v in verdicts), f"{name}.{group} only answers nothing: hold None instead"


def test_the_third_engine_has_only_the_required_groups() -> None:
    echo = get_backend("echo")
    assert [g for g in GROUPS if getattr(echo, g) is not None] == list(REQUIRED)
    for name in [n for n in backend_names() if n != "echo"]:  # the shipped engines have every capability
        assert all(getattr(get_backend(name), g) is not None for g in GROUPS), name
