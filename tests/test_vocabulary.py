"""Engine words stay in the engine's folder (issue 26, "words by engine").

Walks every module of `cockpit/` outside `backends/` and `sim/` with `ast` and counts the
identifiers and string literals that name an engine or one of its own flags. The word list is
derived, not hand-picked:

- every registered backend's name and display name (`sglang`, `SGLang`, `vllm`, `vLLM`);
- every flag (dest and option spelling) that only one backend's table has and that is at least two
  words long (`mem_fraction_static`, `gpu_memory_utilization`, `cuda_graph_max_bs`: one-word flags
  such as `--port` or `--tp` read as ordinary words, and a flag both engines have is no engine's);
- every flag family: a leading word of three or more flags of one engine that no flag of the other
  engine uses (`hicache`, `disaggregation`), and two-word stems shared by three or more flags of
  one engine and none of the other (`cuda_graph`, `max_bs`). `cuda` alone is the hardware's word.

An identifier (or one whitespace-separated token of a string) is split at `_`, `-`,
non-alphanumerics and camel-case humps ("HiCacheAllocating" → hi, cache, allocating); it names a
word when consecutive pieces spell the word without its underscores. Pieces never join across
whitespace: "--context-length" names SGLang's flag, the prose "context length" does not. Docstrings are prose and not counted; other string literals (messages, keys, f-string
parts) are. Each identifier or literal counts once however many words it holds.

The count per file is printed (`pytest -s tests/test_vocabulary.py`); the test fails above the
ceiling. docs/DECISIONS.md ("Words by engine") records the count before the renovation.

Metric names (issue 37) are counted the same way, and must be none: every name of every engine's
metrics table (`Backend.metrics.serving()`, cockpit/backends/<engine>/metricnames.py), found inside
an identifier or a string's token (`delta_generation_tokens_total`, `sglang:num_queue_reqs`). A
name that is also the core's own word (a RunState field, a serving figure: `max_total_num_tokens`,
`token_usage`) is the core's, not the engine's, and not counted.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import cockpit
from cockpit.backends import backend_names, engine_name, get_backend
from cockpit.core.serving import COUNTERS, GAUGES, HISTOGRAMS
from cockpit.core.state import RunState

ROOT = Path(cockpit.__file__).resolve().parent
EXEMPT = ("backends", "sim")  # the engines' own folders (the simulators speak their engine's words)
CEILING = 25  # issue 26's "done when": engine words outside backends/ and sim/ <= 25
# Where the count stands on this branch: the renovation moves it down to CEILING; a change that
# adds engine words outside the engines' folders fails here (lower this as words move out).
RATCHET = 17  # 5 of them in preflight/ (a local model_path, the finding id model_path_missing)
HARDWARE_WORDS = {"cuda"}  # a flag family's leading word that names the hardware, not an engine


def _flag_names(name: str) -> set[str]:
    import importlib

    flags = importlib.import_module(f"cockpit.backends.{name}.flags")
    out: set[str] = set()
    for version in (None, *getattr(flags, "VERSIONS", ())):
        for dest, spec in flags.flag_table(version).items():
            out.add(dest.lower())
            out.update(o.lstrip("-").replace("-", "_").lower() for o in spec.option_strings)
    return out


def _grams(flag: str) -> set[str]:
    parts = flag.split("_")
    return {"_".join(parts[i:i + n]) for n in (1, 2) for i in range(len(parts) - n + 1)}


@functools.cache
def engine_words() -> frozenset[str]:
    """Every engine word, squashed (underscores removed, lower case)."""
    engines = [n for n in backend_names() if _has_flags(n)]
    tables = {n: _flag_names(n) for n in engines}
    words: set[str] = set()
    for name in engines:
        words.update({name, engine_name(name)})
        mine = tables[name]
        others = set().union(*(tables[o] for o in engines if o != name))
        other_grams = set().union(*(_grams(f) for f in others)) if others else set()
        only = mine - others
        words.update(f for f in only if "_" in f)
        leading = collections.Counter(f.split("_")[0] for f in only if "_" in f)
        words.update(w for w, n in leading.items() if n >= 3 and w not in other_grams and w not in HARDWARE_WORDS)
        stems = collections.Counter(g for f in only for g in _grams(f) if "_" in g)
        words.update(g for g, n in stems.items() if n >= 3 and g not in other_grams)
    return frozenset(w.replace("_", "").lower() for w in words)


def _has_flags(name: str) -> bool:
    """The engine lives in cockpit/backends/ and has a flag table (a test's engine elsewhere has neither)."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"cockpit.backends.{name}.flags") is not None
    except ModuleNotFoundError:
        return False


_PIECES = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def names_engine_word(text: str) -> bool:
    """True when consecutive pieces of one whitespace-separated token of `text` spell an engine
    word: `--context-length` and `ContextLength` name the flag, the prose "context length" does not."""
    return any(_token_names_word(token) for token in text.split())


def _token_names_word(token: str) -> bool:
    words = engine_words()
    longest = max(len(w) for w in words)
    pieces = [p.lower() for p in _PIECES.findall(token)]
    for i in range(len(pieces)):
        joined = ""
        for piece in pieces[i:]:
            joined += piece
            if len(joined) > longest:
                break
            if joined in words:
                return True
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield line, node.name
        elif isinstance(node, ast.arg):  # noqa: SIM114 (two branches: a keyword's arg may be None)
            yield line, node.arg
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield line, node.arg
        elif isinstance(node, ast.alias):
            yield line, node.asname or node.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield line, node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield line, node.value


def count_file(path: Path, names: Callable[[str], bool] = names_engine_word) -> list[tuple[int, str]]:
    """(line, text) of every identifier or string literal in `path` that `names` (an engine word)."""
    tree = ast.parse(path.read_text(), str(path))
    return [(line, text) for line, text in _texts(tree) if names(text)]


def count_tree(root: Path = ROOT, names: Callable[[str], bool] = names_engine_word) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in EXEMPT:
            continue
        hits = count_file(path, names)
        if hits:
            out[str(rel)] = hits
    return out


@functools.cache
def core_words() -> frozenset[str]:
    """The core's own names a metric may share: RunState's fields, the serving figures."""
    return frozenset({f.name for f in dataclasses.fields(RunState)} | {*COUNTERS, *GAUGES, *HISTOGRAMS})


@functools.cache
def metric_names() -> frozenset[str]:
    """Every engine's metric names (its table's, without the prefix), less the core's words."""
    names: set[str] = set()
    for name in backend_names():
        metrics = get_backend(name).metrics
        if metrics is None or not _has_flags(name):  # a test's engine elsewhere has no folder here
            continue
        for table_names in metrics.serving().values():
            names.update(n.lower() for n in table_names)
    return frozenset(names - core_words())


_IDENT = re.compile(r"[A-Za-z0-9_]+")


def names_metric(text: str) -> bool:
    """True when an identifier inside `text` holds a metric name as whole `_`-separated pieces."""
    for ident in _IDENT.findall(text):
        low = ident.lower()
        if low in core_words():
            continue
        padded = f"_{low}_"
        if any(f"_{m}_" in padded for m in metric_names()):
            return True
    return False


def _report(what: str, found: dict[str, list[tuple[int, str]]], note: str = "") -> int:
    """Print the count per file (`pytest -s`) and return the total."""
    total = sum(len(v) for v in found.values())
    print(f"\n{what} outside backends/ and sim/: {total} in {len(found)} files{note}")
    for rel, hits in sorted(found.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(hits):5d}  {rel}  " + ", ".join(f"{line}:{text[:40]!r}" for line, text in hits[:6]))
    return total


def test_word_list_is_derived_from_the_flag_tables() -> None:
    words = engine_words()
    for w in ("sglang", "vllm", "memfractionstatic", "gpumemoryutilization", "hicache", "cudagraph"):
        assert w in words, w
    # a flag both engines have, and a one-word flag, are no engine's words
    for w in ("port", "host", "tp", "cuda", "trustremotecode"):
        assert w not in words, w


def test_matching_reads_identifiers_strings_and_camel_case() -> None:
    assert names_engine_word("HiCacheAllocating")
    assert names_engine_word("mem-fraction-static")
    assert names_engine_word("the vLLM server")
    assert names_engine_word("SGLangBackend")
    assert not names_engine_word("memory_setting")
    assert not names_engine_word("host_cache_gb_per_rank")
    assert not names_engine_word("CUDA out of memory")
    assert not names_engine_word("requests of N tokens (default the context length)")
    assert names_engine_word("fewer than --context-length 4096")


def test_engine_words_outside_the_engines_folders_stay_under_the_ceiling() -> None:
    total = _report("engine words", count_tree(), f" (ceiling {CEILING})")
    assert RATCHET <= CEILING
    assert total <= RATCHET, (
        f"{total} engine words outside backends/ and sim/ (at most {RATCHET}): name the concept in "
        "the core's own words and let the backend say its engine's")


def test_metric_names_are_derived_from_the_engines_tables() -> None:
    names = metric_names()
    for n in ("num_running_reqs", "num_queue_reqs", "generation_tokens_total", "num_requests_waiting",
              "kv_cache_usage_perc", "time_to_first_token_seconds", "request_time_per_output_token_seconds"):
        assert n in names, n
    for n in ("max_total_num_tokens", "token_usage", "spec_accept_length"):  # the core's words too
        assert n not in names, n
    assert names_metric("delta_generation_tokens_total") and names_metric("sglang:num_queue_reqs{tp_rank=0}")
    assert names_metric("inter_token_latency_seconds_bucket")
    assert not names_metric("generation_tokens") and not names_metric("prefix_cache_hit_rate")
    assert not names_metric("peak_running") and not names_metric("max_total_num_tokens")


def test_no_metric_name_outside_the_engines_folders() -> None:
    total = _report("engine metric names", count_tree(names=names_metric))
    assert total == 0, (f"{total} engine metric names outside backends/ and sim/: read the figure through "
                        "`Backend.metrics.serving()` (the engine's table) and name it in the core's words")
