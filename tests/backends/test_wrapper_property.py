"""Any wrapper around the engine's lines reads as the bare log (issue 35, item 1).

Every decisive message of the catalogue (tests/data/catalogue/messages.json: the engines' own
failure messages, release by release) that diagnose classifies is rendered as its newest release
prints it (bench/catalogue_coverage.py's short log: the release's record head and rank prefix, a
raised message as the traceback ending with it), then every line of that log is put inside a
wrapper — one of 14 outer formats an operator's tooling adds, or two of them nested — with generated
stamps, names and pids. The crash's kind, phase and rank must be the bare log's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("catalogue_coverage", ROOT / "bench" / "catalogue_coverage.py")
assert _spec is not None and _spec.loader is not None
coverage = sys.modules.get("catalogue_coverage") or importlib.util.module_from_spec(_spec)
if "catalogue_coverage" not in sys.modules:
    sys.modules["catalogue_coverage"] = coverage
    _spec.loader.exec_module(coverage)

CATALOGUE = json.loads((ROOT / "tests" / "data" / "catalogue" / "messages.json").read_text())
KNOWN = set(json.loads((ROOT / "tests" / "data" / "catalogue" / "known_misses.json").read_text())["misses"])
DECISIVE = [e for e in coverage.failures(CATALOGUE["messages"]) if f"{e['engine']}|{e['kind']}|{e['text']}" not in KNOWN]

# (engine logger names a Python logging wrapper names, by engine)
_LOGGERS = {"sglang": ("sglang.srt.managers.scheduler", "sglang.srt.entrypoints.http_server", "__main__"),
            "vllm": ("vllm.v1.engine.core_client", "vllm.engine.llm_engine", "__main__")}

Wrap = Callable[[str, int], str]  # (line, its number) -> the wrapped line


def _wrappers(draw: Any, engine: str) -> list[tuple[str, Wrap]]:
    """The outer formats, each with drawn stamps and names: (name, function)."""
    day = draw(st.integers(1, 28))
    hh, mm, ss = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    ms = draw(st.integers(0, 999))
    pid = draw(st.integers(2, 4_000_000))
    svc = draw(st.sampled_from(("llm", "server", "inference", "backend")))
    pod = draw(st.from_regex(r"[a-z]{3,8}-[0-9a-f]{5,10}-[a-z0-9]{5}", fullmatch=True))
    logger = draw(st.sampled_from(_LOGGERS[engine]))
    level = draw(st.sampled_from(("INFO", "ERROR", "WARNING")))
    node = draw(st.integers(0, 15))
    ip = f"10.{draw(st.integers(0, 255))}.{draw(st.integers(0, 255))}.{draw(st.integers(1, 254))}"
    t = f"{hh:02d}:{mm:02d}:{ss:02d}"
    return [
        ("python logging (asctime - name - level)", lambda s, n: f"2025-11-{day:02d} {t},{ms:03d} - {logger} - {level} - {s}"),
        ("python logging ([level] name:)", lambda s, n: f"2025-11-{day:02d} {t} [{level}] {logger}: {s}"),
        ("journald", lambda s, n: f"Nov {day:02d} {t} gpu-node-{node} python3[{pid}]: {s}"),
        ("docker compose", lambda s, n: f"{svc}-1  | {s}"),
        ("kubectl --prefix", lambda s, n: f"[pod/{pod}/server] {s}"),
        ("srun -l", lambda s, n: f"{node}: {s}"),
        ("ray actor", lambda s, n: f"(pid={pid}, ip={ip}) {s}"),
        ("ray actor, coloured", lambda s, n: f"\x1b[36m(WorkerDict pid={pid}, ip={ip})\x1b[0m {s}"),
        ("RFC 3339 stamp", lambda s, n: f"2025-11-{day:02d}T{t}.{ms:03d}456Z {s}"),
        ("CRI", lambda s, n: f"2025-11-{day:02d}T{t}.{ms:03d}456789+08:00 stderr F {s}"),
        ("markdown quote", lambda s, n: f"> {s}"),
        ("pasted line numbers", lambda s, n: f"{n + 1:>4}  {s}"),
        ("pm2", lambda s, n: f"{node}|{svc}  | {s}"),
        ("ANSI colour", lambda s, n: f"\x1b[0;3{node % 8}m{s}\x1b[0m"),
    ]


def _read(log: str) -> tuple[str | None, str | None, str | None]:
    from cockpit.commands.diagnose import diagnose_logs
    from cockpit.errors import BadInput

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.log"
        path.write_text(log)
        try:
            state, _findings, _reads = diagnose_logs([str(path)])
        except BadInput as exc:
            return ("refused", str(exc)[-80:], None)
    crash = state.crash
    return (None, None, None) if crash is None else (crash.kind, crash.phase, crash.rank)


def _bare(entry: dict[str, Any]) -> str:
    version = entry["last"]
    variants = (coverage.sglang_variants if entry["engine"] == "sglang" else coverage.vllm_variants)(entry, version)
    return str(variants[0].log)


@st.composite
def _case(draw: Any) -> tuple[dict[str, Any], list[tuple[str, Wrap]]]:
    entry = draw(st.sampled_from(DECISIVE))
    wraps = _wrappers(draw, entry["engine"])
    first = draw(st.sampled_from(wraps))
    if draw(st.booleans()):
        return entry, [first]
    second = draw(st.sampled_from([w for w in wraps if w[0] != first[0]]))
    return entry, [first, second]  # nested: `second` outermost


@settings(max_examples=1)
@given(st.data())
def test_there_are_at_least_twelve_wrappers(data: st.DataObject) -> None:
    assert len({n for n, _ in _wrappers(data.draw, "vllm")}) >= 12


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_a_wrapped_message_reads_as_the_bare_one(case: tuple[dict[str, Any], list[tuple[str, Wrap]]]) -> None:
    entry, wraps = case
    bare = _bare(entry)
    lines = bare.splitlines()
    wrapped = lines
    for _name, w in wraps:
        wrapped = [w(s, i) for i, s in enumerate(wrapped)]
    want, got = _read(bare), _read("\n".join(wrapped) + "\n")
    assert want[0] not in (None, "refused"), (entry["text"], want)
    assert got == want, (" inside ".join(n for n, _ in wraps), entry["engine"], entry["text"][:90], "\n".join(wrapped[:4]))


# The engine's own record head replaced by a Python logging format its operator configured (vLLM's
# VLLM_LOGGING_CONFIG_PATH, an embedding program's basicConfig): the logger name is what remains of
# the engine. The format drops the rank prefix, so the kind and phase must be the bare log's. (A
# format without a date reads the message bare: what only the engine's record says is then missed.)
_HEAD = {"sglang": __import__("re").compile(r"^\[[^\]]*\] "),
         "vllm": __import__("re").compile(r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[?[\w.]+:\d+\] ")}
_FORMATS = (
    lambda logger, lvl, msg: f"2025-11-02 13:17:04,315 - {logger} - {lvl} - {msg}",
    lambda logger, lvl, msg: f"2025-11-02 13:17:04 [{lvl}] {logger}: {msg}",
    lambda logger, lvl, msg: f"2025-11-02T13:17:04.315Z {lvl:<8} {logger} | {msg}",
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DECISIVE), st.sampled_from(range(len(_FORMATS))), st.data())
def test_the_engines_message_under_its_loggers_own_format(entry: dict[str, Any], fmt: int, data: st.DataObject) -> None:
    bare = _bare(entry)
    logger = data.draw(st.sampled_from(_LOGGERS[entry["engine"]][:2]))
    head = _HEAD[entry["engine"]]
    lines = []
    for s in bare.splitlines():
        m = head.match(s)
        lvl = "ERROR" if " ERROR " in s[:60] or "exception" in s else "INFO"
        lines.append(_FORMATS[fmt](logger, lvl, s[m.end():]) if m else s)
    want, got = _read(bare), _read("\n".join(lines) + "\n")
    assert got[:2] == want[:2], (entry["engine"], entry["text"][:90], "\n".join(lines[:4]))
