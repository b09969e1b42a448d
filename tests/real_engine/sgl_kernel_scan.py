"""What SGLang's own source imports from `sgl_kernel` on a CPU without AMX, read from its files.

SGLang imports kernel names at module load inside guards such as `if _is_cpu:` or
`elif not _is_xpu:`. The stand-in package (tests/real_engine/sgl_kernel_cpu/sgl_kernel) must answer
every such import on this machine's path, or a module fails to load at start-up. This scanner walks
every module's top level (not function bodies: those import lazily, on paths a plain Llama never
takes), follows each `if`/`else` around an `import`, and keeps the imports whose guards all hold on
SGLang's CPU engine without AMX: `_is_cpu`/`is_cpu()` true, every other platform test (`_is_cuda`,
`is_hip()`, `_is_xpu`, `_is_npu`, `_is_musa`, `_is_cpu_amx_available`, arm64 …) false.

An import with no guard at all sits in a module of another backend (flash-attention, XPU, MiniCPM
sparse attention …) that the CPU engine never loads, so it is not counted.
"""

from __future__ import annotations

import ast
import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

# `torch.ops.sgl_kernel.<op>` probes and calls in SGLang's source
OPS_PREFIX = ("torch", "ops", "sgl_kernel")


@dataclass(frozen=True)
class KernelImport:
    where: str        # path:line inside the sglang package
    module: str       # "sgl_kernel" or a submodule such as "sgl_kernel.mamba"
    name: str         # the imported name ("" for a bare `import sgl_kernel.x`)

    def __str__(self) -> str:
        what = f"from {self.module} import {self.name}" if self.name else f"import {self.module}"
        return f"{what}  ({self.where})"


class _CpuPlatform(dict[str, object]):
    """Names a guard reads: is_cpu true, every other platform and AMX false."""

    def __missing__(self, key: str) -> object:
        if key in ("_is_cpu", "is_cpu_"):
            return True
        if key == "is_cpu":
            return lambda: True
        if key.startswith("is_"):
            return lambda *a, **k: False
        return False


def _holds(guard: ast.expr) -> bool:
    try:
        return bool(eval(compile(ast.Expression(guard), "<guard>", "eval"), {"__builtins__": {}}, _CpuPlatform()))
    except Exception:
        return False  # a guard reading something else (an env var, a version): not the CPU engine's path


def _walk(body: list[ast.stmt], guards: list[tuple[ast.expr, bool]], out: list[tuple[ast.stmt, list]]) -> None:
    for node in body:
        if isinstance(node, ast.If):
            _walk(node.body, [*guards, (node.test, True)], out)
            _walk(node.orelse, [*guards, (node.test, False)], out)
        elif isinstance(node, ast.Try):
            _walk(node.body, guards, out)
            for handler in node.handlers:
                _walk(handler.body, guards, out)
            _walk(node.orelse, guards, out)
            _walk(node.finalbody, guards, out)
        elif isinstance(node, ast.With):
            _walk(node.body, guards, out)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append((node, guards))


@functools.lru_cache(maxsize=2)
def _modules(sglang_dir: Path) -> tuple[tuple[str, ast.Module], ...]:
    """(path inside the package, parsed module) of every file that names `sgl_kernel` at all (the
    text is read first: parsing all ~3,000 files would cost a minute on a loaded machine)."""
    out: list[tuple[str, ast.Module]] = []
    for path in sorted(sglang_dir.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "sgl_kernel" not in text:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SGLang's own invalid escapes (SyntaxWarning)
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
        out.append((path.relative_to(sglang_dir.parent).as_posix(), tree))
    return tuple(out)


def cpu_imports(sglang_dir: Path) -> list[KernelImport]:
    """Every `sgl_kernel` import SGLang's modules make at load time on the CPU engine without AMX."""
    found: list[KernelImport] = []
    for rel, tree in _modules(sglang_dir):
        if rel.startswith(("sglang/test/", "sglang/multimodal_gen/")):
            continue  # SGLang's own tests; the diffusion runtime (another server)
        stmts: list[tuple[ast.stmt, list]] = []
        _walk(tree.body, [], stmts)
        for node, guards in stmts:
            if not guards:
                continue
            if not all(_holds(test) == want for test, want in guards):
                continue
            where = f"{rel}:{node.lineno}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sgl_kernel":
                found.extend(KernelImport(where, node.module, a.name) for a in node.names)
            elif isinstance(node, ast.Import):
                found.extend(KernelImport(where, a.name, "") for a in node.names
                             if a.name.split(".")[0] == "sgl_kernel")
    return found


def ops_referenced(sglang_dir: Path) -> dict[str, list[str]]:
    """`torch.ops.sgl_kernel.<op>` names and `hasattr(torch.ops.sgl_kernel, "<op>")` probes → where."""
    seen: dict[str, list[str]] = {}
    for rel, tree in _modules(sglang_dir):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _dotted(node.value) == OPS_PREFIX:
                seen.setdefault(node.attr, []).append(f"{rel}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
                  and len(node.args) == 2 and _dotted(node.args[0]) == OPS_PREFIX
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                seen.setdefault(node.args[1].value, []).append(f"{rel}:{node.lineno}")
    return seen


def _dotted(node: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))
