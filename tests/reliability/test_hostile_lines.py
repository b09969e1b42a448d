"""Issue 27, item 4: no log line, however hostile, makes a pattern backtrack for seconds.

Before: a 10 KB line cost `diagnose` ~9 s, 20 KB more than 20 s (SGLang's OOM-capacity pattern, the
learned wrapper templates, the exception-header, argparse and capture-failed patterns, vLLM's
process-group prefix). Now every pattern is linear-time on any line (bounded repeats, possessive
repeats, a look-behind that starts a number only where a number starts) and the grammars read at
most `CLASSIFY_CAP` (16 KiB) of a line, the cut counted and said by `diagnose`.

The patterns are not listed by hand: every compiled pattern (and lazily compiled one) at module
level in the modules that read log text is found by walking the modules, so a pattern added later is
tested too; the wrapper templates are learned from real and hostile prefixes. Each gets hostile
lines made from its own parse tree (`_hostile_lines.py`): the slowest few at 2 KiB are then run at
64 KiB, under a CPU-time ceiling far above what a linear pattern needs (~1-5 ms there) and far
below what a quadratic one takes (seconds). Then 64 KiB hostile lines go through both parsers
whole, and through `cockpit diagnose`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.backends.sglang import wrappers
from cockpit.backends.sglang.scanner import CLASSIFY_CAP, SGLangLogParser
from cockpit.backends.sglang.textutil import lazy
from cockpit.backends.vllm.logparse import VLLMLogParser
from cockpit.core.linesplit import ByteReader
from tests.reliability._hostile_lines import build, recipes

# Every module whose patterns meet text from a log (lines, or messages taken from lines).
MODULES = (
    "cockpit.backends.sglang.grammar", "cockpit.backends.sglang.failures", "cockpit.backends.sglang.wrappers",
    "cockpit.backends.sglang.records", "cockpit.backends.sglang.diagnosis", "cockpit.backends.sglang.crashrules",
    "cockpit.backends.sglang.scanner", "cockpit.backends.sglang.logparse", "cockpit.backends.vllm.logparse",
    "cockpit.backends.vllm.records", "cockpit.backends.vllm.sniff",
    "cockpit.backends.vllm.diagnosis", "cockpit.backends.foreign", "cockpit.core.sanitize", "cockpit.core.ranks",
    "cockpit.core.crashstory",
)
# Wrapper prefixes a learned template is made from: the products' (wrappers.py docstring) and hostile ones.
PREFIXES = (
    "sglang-1  | ", "[pod/sglang-7f9c4d-x2k/server] ", "2026-02-24T11:55:44.123456789Z stderr F ", "0: ",
    "Dec 01 10:00:00 gpu-box python3[1234]: ", "(SGLangEngine pid=6680) ", "2026-02-24 11:55:44,123 - __main__ - INFO - ",
    "2026-02-24T11:55:44.123Z  INFO sglang_router: ", "> ", "a1b2c3d4e5 ", "x1 y2 z3 | ", "ABC 123 abc1 ",
)
SCREEN = 2048  # every candidate is tried at this size first
SIZE = 64 * 1024  # the slowest few are then tried at this one
KEEP = 3
CEILING_S = 0.5  # CPU seconds one pattern may spend on one 64 KiB line (linear: ~1-5 ms)


def _searched(mod: object, name: str) -> bool:
    """How the module applies a pattern: `match` / `fullmatch` only (anchored at the start) or also
    a search."""
    try:
        src = inspect.getsource(mod)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return True
    uses = re.findall(re.escape(name) + r"\.(\w+)\(", src)
    return not uses or any(u not in ("match", "fullmatch") for u in uses)


def _patterns() -> Iterator[tuple[str, re.Pattern[str] | re.Pattern[bytes], bool]]:
    seen: set[int] = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        for name, obj in vars(mod).items():
            items = obj if isinstance(obj, (tuple, list)) else (obj,)
            # one level further: tables of (label, keys, pattern, …)
            items = tuple(x for item in items for x in (item if isinstance(item, tuple) else (item,)))
            for i, o in enumerate(items):
                rx = o._get() if isinstance(o, lazy) else o
                if not isinstance(rx, re.Pattern) or id(rx) in seen:
                    continue
                seen.add(id(rx))
                label = f"{modname.removeprefix('cockpit.')}.{name}" + (f"[{i}]" if o is not obj else "")
                yield label, rx, _searched(mod, name)
    for prefix in PREFIXES:
        u = wrappers.Unwrapper()
        u.unwrap(prefix + "[2026-02-24 11:55:44 TP0] Load weight begin. avail mem=75.00 GB")
        for src in u.templates:
            yield f"wrapper template of {prefix!r}", re.compile(src), False  # applied with match


PATTERNS = list(_patterns())


def _cpu(rx: re.Pattern, text: str | bytes, searched: bool) -> float:  # type: ignore[type-arg]
    t = time.process_time()
    (rx.search if searched else rx.match)(text)  # type: ignore[arg-type]
    return time.process_time() - t


def test_the_walk_finds_the_patterns_named_in_the_issue() -> None:
    labels = {p[0] for p in PATTERNS}
    for name in ("backends.sglang.failures._RX_OOM_TOTAL_OLD", "backends.sglang.failures._RX_EXC_HEADER",
                 "backends.sglang.failures._RX_ARGPARSE", "backends.sglang.failures._RX_CAPTURE_FAILED",
                 "backends.vllm.logparse._RX_RECORD"):
        assert name in labels
    assert sum(label.startswith("wrapper template") for label in labels) >= len(PREFIXES) - 2
    assert len(PATTERNS) > 100


@pytest.mark.parametrize(("label", "rx", "searched"), PATTERNS, ids=[p[0] for p in PATTERNS])
def test_no_pattern_is_slow_on_a_hostile_line(label: str, rx: re.Pattern, searched: bool, ledger) -> None:  # type: ignore[type-arg]
    def enc(s: str) -> str | bytes:
        return s.encode("latin-1", "replace") if isinstance(rx.pattern, bytes) else s

    todo = recipes(rx.pattern, rx.flags)
    timed = sorted(((_cpu(rx, enc(build(r, SCREEN)), searched), i) for i, r in enumerate(todo)), reverse=True)
    ledger.tried("logs", len(timed) + KEEP)
    for _, i in timed[:KEEP]:
        for size in (SIZE // 8, SIZE):  # an eighth first: a quadratic pattern fails there in well under a second
            line = build(todo[i], size)
            spent = _cpu(rx, enc(line), searched)
            limit = CEILING_S * size / SIZE
            assert spent < limit, f"{label} spent {spent:.2f} s CPU on a {len(line):,}-character line: {line[:80]!r}"


# The lines of the issue's reproduction, and the shapes above at 64 KiB, through the whole parsers.
HOSTILE = [
    "CUDA out of memory. " + "1" * SIZE,
    "CUDA out of memory. " + "1 GiB total capacity; " * (SIZE // 22),
    "Exception in thread " + " " * SIZE + "x",
    "sglang" * (SIZE // 6),
    "Capture " * (SIZE // 8) + "graph failed",
    "(EngineCore pid=1) " * (SIZE // 19),
    "INFO 01-01 00:00:00 " * (SIZE // 20),
    "1" * SIZE,
    "a1" * (SIZE // 2),
    " " * SIZE,
    "Free memory on device (1/1 GiB) on startup. Desired GPU memory utilization is (0.9, 1 GiB). Actual usage is "
    * (SIZE // 100),
]


def _log(lines: list[str]) -> bytes:
    head = "[2026-02-24 11:55:44 TP0] Load weight begin. avail mem=75.00 GB\n"
    return (head + "".join(f"{ln}\n{head}" for ln in lines)).encode()


@pytest.mark.parametrize("parser", [SGLangLogParser, VLLMLogParser])
def test_both_parsers_read_hostile_lines_in_linear_time(parser: type, ledger) -> None:
    for line in HOSTILE:
        p = ByteReader(parser())
        t = time.process_time()
        p.feed(_log([line, "x" + line]))  # whole, and shifted by one
        p.finish()
        spent = time.process_time() - t
        ledger.tried("logs", 2)
        assert spent < 2.0, f"{parser.__name__}: {spent:.2f} s CPU on {line[:60]!r}"
        assert p.lines_cut == 2  # both lines longer than the cap, counted


def test_diagnose_says_which_lines_it_cut(tmp_path: Path, ledger) -> None:
    log = tmp_path / "hostile.log"
    real = (Path(__file__).resolve().parent.parent / "data" / "sglang-0.5.9-llama70b-tp8-healthy.log").read_bytes()
    log.write_bytes(real + _log(HOSTILE[:6]))
    ledger.tried("logs", 6)
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "cockpit", "diagnose", "--json", str(log)], capture_output=True,
                       text=True, timeout=120, check=False)
    assert time.monotonic() - t < 60
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert out["lines"]["cut"] == 6
    human = subprocess.run([sys.executable, "-m", "cockpit", "diagnose", str(log)], capture_output=True, text=True,
                           timeout=120, check=False)
    assert f"6 lines longer than {CLASSIFY_CAP // 1024} KiB: only their first {CLASSIFY_CAP // 1024} KiB were read" \
        in human.stdout
