"""Build the catalogue of the engines' decisive log messages from their released source (issue 23).

For each release given, read every Python file of the engine's package — from a release wheel
(`pip download --no-deps sglang==X`) or from a git directory at a tag (`git show TAG:path`) — and
collect, with Python's own parser, the format strings of logger calls (`logger.info("…%s…")`,
f-strings with `{}` for each field) and the messages of raised exceptions, on the paths that matter
to a diagnosis: device OOM, KV pool / init budget, CUDA-graph capture, HiCache / host memory,
NCCL / gloo / watchdog, warmup, port, start-up validation, engine / worker / scheduler death, and the
per-rank memory and KV lines printed at start-up. Each message keeps the releases it was found in
(its range) and its file:line of origin in the first and the last of them.

Only the messages are kept (data: strings, ranges, origins), never code. The committed catalogue
(tests/data/catalogue/messages.json) is what tests and bench/catalogue_coverage.py read; this
script needs the network only to fetch the releases, never at test time.

    pip download --no-deps sglang==0.4.6 -d /tmp/w/sglang-0.4.6      # one directory per release
    # or, for releases too large to keep many wheels at once (vLLM: 130-480 MB each), one directory
    # per release holding only the package's .py files unpacked (DIR/vllm-0.6.3/vllm/...), each wheel
    # deleted right after: see tests/data/catalogue/README.md
    python tools/message_catalogue.py --engine sglang /tmp/w/sglang-* -o tests/data/catalogue/messages.json
    python tools/message_catalogue.py --engine vllm --git-dir /path/vllm.git --tags v0.5.0 v0.6.3 …
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"}
# family -> a pattern (case-insensitive) that puts a message on a path a diagnosis reads; the first
# family that matches names it
FAMILIES: tuple[tuple[str, str], ...] = (
    ("device_oom", r"out of memory|outofmemory|\boom\b"),
    ("hicache", r"hicache|host memory|host_mem|pinned memory"),
    ("kv_pool", r"kv ?cache|kv_cache|token pool|token_to_kv|max_total_num_tokens|#tokens|kv pool|not enough memory"
                r"|mem_fraction|memory pool|gpu blocks|cache blocks|available_gpu_mem|gpu_memory_utilization"
                r"|memory profiling|kv size|# \{?\w*\}? ?blocks"),
    ("graph_capture", r"cuda ?graph|capture|graph capturing"),
    ("nccl", r"nccl|gloo|watchdog|collective|process group|init torch distributed|all_?reduce"),
    ("warmup", r"warm ?up|warming up"),
    ("port", r"address already in use|\bport\b"),
    ("death", r"\bdied\b|exit code|crashed|\bkilled\b|terminated|is dead|exited"),
    ("startup", r"load weight|loading model|model weights|weights took|weight loading|server args|initializing an"
                r"|server is fired up|ready to roll|uvicorn running|mem usage|avail mem|model loading took"),
)
_RX_FAMILIES = tuple((name, re.compile(rx, re.IGNORECASE)) for name, rx in FAMILIES)


def family_of(text: str) -> str | None:
    for name, rx in _RX_FAMILIES:
        if rx.search(text):
            return name
    return None


def _fmt(node: ast.AST) -> str | None:
    """A format string as the program holds it: `%s` kept, f-string fields as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            else:
                parts.append("{}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        left, right = _fmt(node.left), _fmt(node.right)
        if isinstance(node.op, ast.Mod):
            return left
        if left is not None or right is not None:
            return (left or "{}") + (right or "{}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _fmt(node.func.value)
    return None


def messages_of(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, kind, text) for each logger call and raised exception message of one file."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_METHODS \
                and node.args:
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if "log" in name.lower():
                text = _fmt(node.args[0])
                if text:
                    yield node.lineno, f"log.{node.func.attr}", text
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            text = _fmt(node.exc.args[0])
            exc = node.exc.func
            exc_name = exc.id if isinstance(exc, ast.Name) else exc.attr if isinstance(exc, ast.Attribute) else "?"
            if text:
                yield node.lineno, f"raise {exc_name}", text


# Files that are not the server: benchmarks, tests, the frontend language, evaluation helpers, and
# SGLang's separate diffusion runtime (multimodal_gen)
_NOT_SERVER = re.compile(r"(?:^|/)(?:test|tests|testing|bench\w*|benchmarks?|eval\w*|multimodal_gen|lang|examples?)(?:/|\.py$)"
                         r"|(?:^|/)(?:bench_\w+|test_\w+|\w+_test)\.py$")


def server_file(name: str) -> bool:
    return _NOT_SERVER.search(name) is None


def files_of_release(path: Path, package: str) -> Iterator[tuple[str, str]]:
    """(file path, text) of every Python file of `package` in a wheel, or a directory holding one."""
    wheels = [path] if path.suffix == ".whl" else sorted(path.glob("*.whl"))
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                if name.startswith(f"{package}/") and name.endswith(".py") and server_file(name):
                    yield name, z.read(name).decode("utf-8", "replace")


def files_of_tree(path: Path, package: str) -> Iterator[tuple[str, str]]:
    """(file path, text) of every Python file of `package` under a directory that holds the package's
    sources as a release ships them (`DIR/vllm/…`): a wheel's .py files unpacked, the wheel deleted."""
    for p in sorted((path / package).rglob("*.py")):
        name = p.relative_to(path).as_posix()
        if server_file(name):
            yield name, p.read_bytes().decode("utf-8", "replace")


def files_at_tag(git_dir: str, tag: str, package: str) -> Iterator[tuple[str, str]]:
    names = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", tag, "--", package],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".py") and server_file(name):
            out = subprocess.run(["git", "--git-dir", git_dir, "show", f"{tag}:{name}"], capture_output=True, check=True)
            yield name, out.stdout.decode("utf-8", "replace")


def version_of(path: Path) -> str:
    m = re.search(r"-(\d+(?:\.\d+)+(?:\.post\d+)?)", path.name)  # 0.10.1.1 and 0.8.5.post1 too
    return m.group(1) if m else path.name


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def build(engine: str, releases: list[tuple[str, Iterator[tuple[str, str]]]]) -> list[dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    # a file unchanged from one release to the next is parsed once (vLLM: ~80 releases of ~2,500 files)
    parsed: dict[bytes, list[tuple[int, str, str]]] = {}
    for version, files in sorted(releases, key=lambda r: vkey(r[0])):
        for name, text in files:
            digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
            if digest not in parsed:
                parsed[digest] = list(messages_of(text))
            for lineno, kind, msg in parsed[digest]:
                fam = family_of(msg)
                if fam is None or len(msg.strip()) < 8:
                    continue
                entry = found.setdefault((kind.split(".")[0] + ":" + msg, engine), {
                    "engine": engine, "family": fam, "kind": kind, "text": msg, "versions": [], "origins": {}})
                if version not in entry["versions"]:
                    entry["versions"].append(version)
                entry["origins"][version] = f"{name}:{lineno}"
    out = []
    for entry in found.values():
        vs = sorted(entry["versions"], key=vkey)
        entry["versions"] = vs
        entry["first"], entry["last"] = vs[0], vs[-1]
        entry["origins"] = {vs[0]: entry["origins"][vs[0]], vs[-1]: entry["origins"][vs[-1]]}
        out.append(entry)
    out.sort(key=lambda e: (e["engine"], e["family"], e["text"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("sglang", "vllm"), required=True)
    ap.add_argument("releases", nargs="*", type=Path, help="wheels, or directories each holding one release's wheel")
    ap.add_argument("--git-dir", help="a git directory of the engine (instead of wheels)")
    ap.add_argument("--tags", nargs="*", default=[], help="the release tags to read from --git-dir")
    ap.add_argument("-o", "--output", type=Path, help="the catalogue to write (merged with its other engine's entries)")
    args = ap.parse_args()
    releases: list[tuple[str, Iterator[tuple[str, str]]]] = []
    for r in args.releases:
        if r.is_dir() and (r / args.engine).is_dir():  # unpacked sources, named ENGINE-VERSION
            releases.append((version_of(r), files_of_tree(r, args.engine)))
        else:
            releases.append((version_of(r if r.suffix == ".whl" else next(r.glob("*.whl"), r)), files_of_release(r, args.engine)))
    for tag in args.tags:
        releases.append((tag.lstrip("v"), files_at_tag(args.git_dir, tag, args.engine)))
    if not releases:
        ap.error("no release given")
    entries = build(args.engine, releases)
    if args.output is None:
        json.dump(entries, sys.stdout, indent=1)
        return 0
    keep: list[dict[str, Any]] = []
    sampled: dict[str, list[str]] = {}
    if args.output.exists():
        old = json.loads(args.output.read_text())
        keep = [e for e in old["messages"] if e["engine"] != args.engine]
        sampled = {k: v for k, v in old.get("sampled", {}).items() if k != args.engine}
    sampled[args.engine] = sorted((v for v, _ in releases), key=vkey)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    doc = {"about": "Decisive log/exception messages of the engines' released source (tools/message_catalogue.py); "
                    "text as the source holds it (%s / {} for fields), first/last release sampled holding it, origins "
                    "file:line in those releases.",
           "sampled": dict(sorted(sampled.items())),
           "messages": keep + entries}
    args.output.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(entries)} {args.engine} messages from {len(releases)} releases -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
