"""The bulk scan (the fast path: routine lines counted in C, only the rest classified) finds the same
decisive lines as the full parser (every line classified), on every SGLang log of the corpora.

Each log (the golden logs and the real excerpts under tests/data/real/sglang) is set inside a busy
server's routine traffic — thousands of batch and access lines before and after it, so that it is
read through the 64 KiB windows and their re-checks, as a big log is — and parsed twice: by the
scanner as `cockpit diagnose` runs it (1 MiB reads) and with every line classified
(`FULL_FEED_LINES` raised past the file's size, the live tail's path for the whole file). Every
event that is not a routine batch or access line must be the same, in the same order, with the
same line numbers; the routine events the fast path samples must be the full parser's; and the
state both build must tell the same story (crash, phase, memory, findings).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.backends.sglang import scanner
from cockpit.backends.sglang.scanner import SGLangLogParser
from cockpit.core import events as ev
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.state import RunState

# the bulk scan with the SIMD count and with bytes.count: the same answers (core/bytecount.py)
pytestmark = pytest.mark.usefixtures("both_counts")

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(DATA.glob("sglang-*.log")) + sorted((DATA / "real" / "sglang").glob("*.log"))
ROUTINE = (ev.DecodeBatch, ev.PrefillBatch, ev.HttpAccess)


def _traffic(rnd: random.Random, n: int, minute: int) -> bytes:
    out = []
    for i in range(n):
        ts = f"2026-02-24 12:{minute:02d}:{i % 60:02d}"
        r = rnd.random()
        if r < 0.5:
            out.append(f'[{ts}] INFO:     10.0.{rnd.randrange(4)}.{rnd.randrange(2, 250)}:{rnd.randrange(30000, 61000)} - '
                       f'"POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        elif r < 0.82:
            out.append(f"[{ts} TP0] Decode batch, #running-req: {rnd.randrange(1, 300)}, #token: {rnd.randrange(1000, 126000)}, "
                       f"token usage: 0.{rnd.randrange(10, 99)}, cuda graph: True, gen throughput (token/s): "
                       f"{rnd.uniform(800, 3100):.2f}, #queue-req: {rnd.randrange(0, 30)}\n")
        else:
            out.append(f"[{ts} TP0] Prefill batch, #new-seq: 1, #new-token: {rnd.randrange(64, 8192)}, #cached-token: 0, "
                       f"token usage: 0.{rnd.randrange(10, 99)}, #running-req: {rnd.randrange(1, 300)}, #queue-req: 0, "
                       f"input throughput (token/s): {rnd.uniform(1000, 30000):.2f}, cuda graph: False\n")
    return "".join(out).encode()


def _busy(log: Path) -> bytes:
    rnd = random.Random(log.name)
    body = log.read_bytes()
    if body and not body.endswith(b"\n"):
        body += b"\n"
    return _traffic(rnd, 3000, 1) + body + _traffic(rnd, 3000, 2)


def _parse(data: bytes) -> tuple[list[ev.Event], SGLangLogParser]:
    p = ByteReader(SGLangLogParser())
    out: list[ev.Event] = []
    for k in range(0, len(data), scanner.READ_CHUNK):
        out += p.feed(data[k:k + scanner.READ_CHUNK])
    return out + p.finish(), p


def _state(events: list[ev.Event]) -> RunState:
    st = RunState(backend="sglang", memory_flag="mem_fraction_static")
    for e in events:
        apply(st, e)
    end_of_input(st)
    return st


def test_the_corpora_are_there() -> None:
    assert len(LOGS) >= 100


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_fast_path_finds_what_the_full_parser_finds(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _busy(log)
    fast, fp = _parse(data)
    assert fp._windows > 0  # it went through the windows, not the line-by-line path
    monkeypatch.setattr(scanner, "FULL_FEED_LINES", 1 << 40)
    full, full_p = _parse(data)
    monkeypatch.undo()

    assert fp.lines_seen == data.count(b"\n") + (not data.endswith(b"\n"))
    # and the report's "recognised N of M lines" agrees: routine access lines count too (the fast
    # path once counted only the batch lines: half a busy log read as "skipped"). The one difference
    # allowed: an access or batch line without SGLang's record head (`INFO:     127.0.0.1:… HTTP/1.1"
    # 200`, uvicorn's own format, in some excerpts) is routine to the fast path, unrecognised to the
    # full one
    bare = sum(1 for line in data.split(b"\n")
               if (b" HTTP/1." in line or b"#running-req: " in line) and not line.startswith(b"["))
    assert (fp.generic, fp.foreign) == (full_p.generic, full_p.foreign)
    assert 0 <= fp.lines_recognised - full_p.lines_recognised <= bare
    decisive = [e for e in full if not isinstance(e, ROUTINE)]
    assert [e for e in fast if not isinstance(e, ROUTINE)] == decisive
    sampled = [e for e in fast if isinstance(e, ROUTINE)]
    routine = [e for e in full if isinstance(e, ROUTINE)]
    assert set(sampled) <= set(routine)
    assert len(sampled) < len(routine) / 5  # the routine traffic was counted, not classified

    a, b = _state(fast), _state(full)
    assert a.crash == b.crash and a.phase == b.phase and a.retractions == b.retractions
    assert a.min_headroom_gb == b.min_headroom_gb and a.ranks == b.ranks and a.server_args == b.server_args
    backend = get_backend("sglang")
    assert backend.doctor.diagnose(a, hosts=()) == backend.doctor.diagnose(b, hosts=())
