"""The vLLM parser's bulk path (backends/vllm/bulk.py: a ready server's access lines counted by
pieces, not read one by one) gives what the line-by-line path gives: the same events with the same
line numbers, the same line count, the same "recognised" and cut counts — on every vLLM log of the
corpora set after a ready server's traffic, and on random mixes of the lines that could fool it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.vllm import bulk
from cockpit.backends.vllm import logparse as vlp
from cockpit.backends.vllm.logparse import VLLMLogParser
from cockpit.core import events as ev
from cockpit.core.linesplit import ByteReader

pytestmark = pytest.mark.usefixtures("both_counts")

DATA = Path(__file__).resolve().parents[1] / "data"
HEALTHY = DATA / "vllm-0.33.0-qwen32b-tp2-0.92-healthy.log"
LOGS = sorted(DATA.glob("vllm-*.log")) + sorted((DATA / "real" / "vllm").glob("*.log"))
STATS = ("(APIServer pid=41877) INFO 11-29 08:{m:02d}:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: "
         "1843.2 tokens/s, Avg generation throughput: 912.6 tokens/s, Running: 24 reqs, Waiting: 0 reqs, "
         "GPU KV cache usage: 17.4%, Prefix cache hit rate: 41.3%")


# uvicorn's access lines as vLLM < 0.11 prints them, as vLLM >= 0.11 does (its API server's process in
# front), and as several API servers do (`--api-server-count`: pids interleaved)
PREFIXES = {"bare": ("",), "apiserver": ("(APIServer pid=41877) ",),
            "two-servers": ("(APIServer pid=41877) ", "(APIServer pid=41878) ")}


def _access(rnd: random.Random, prefix: str) -> str:
    path = rnd.choice(["/v1/completions", "/v1/chat/completions", "/health", "/metrics"])
    verb = "GET" if path in ("/health", "/metrics") else "POST"
    return (f'{prefix}INFO:     10.0.{rnd.randrange(4)}.{rnd.randrange(2, 250)}:{rnd.randrange(30000, 61000)} - '
            f'"{verb} {path} HTTP/1.1" 200 OK')


def _traffic(rnd: random.Random, n: int, kind: str = "bare") -> bytes:
    out = []
    prefixes = PREFIXES[kind]
    for i in range(n):
        if i % 300 == 299:
            out.append(STATS.format(m=i // 60 % 60, s=i % 60))
        else:
            # two servers: runs of one pid, then the other (each answers a burst)
            out.append(_access(rnd, prefixes[i // 97 % len(prefixes)]))
    return ("\n".join(out) + "\n").encode()


def _parse(data: bytes, chunk: int = vlp.READ_CHUNK) -> tuple[list[ev.Event], VLLMLogParser]:
    p = ByteReader(VLLMLogParser(reference_time=1_764_400_000.0))
    out: list[ev.Event] = []
    for k in range(0, len(data), chunk):
        out += p.feed(data[k:k + chunk])
    return out + p.finish(), p


def _both(data: bytes, monkeypatch: pytest.MonkeyPatch, chunk: int = vlp.READ_CHUNK) -> None:
    calls: list[int] = []
    real = bulk.scan

    def counted(*a: object, **k: object) -> None:
        calls.append(1)
        real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(bulk, "scan", counted)
    fast, fp = _parse(data, chunk)
    monkeypatch.setattr(vlp, "BULK_BYTES", 1 << 60)
    slow, sp = _parse(data, chunk)
    monkeypatch.undo()
    assert calls, "the bulk path was not taken"
    assert fast == slow
    assert (fp.lines_seen, fp.recognised, fp.lines_cut) == (sp.lines_seen, sp.recognised, sp.lines_cut)


def test_the_corpora_are_there() -> None:
    assert HEALTHY.exists() and len(LOGS) >= 50


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_bulk_path_reads_what_the_line_by_line_path_reads(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(log.name)
    kind = rnd.choice(sorted(PREFIXES))
    body = log.read_bytes()
    if body and not body.endswith(b"\n"):
        body += b"\n"
    # a ready server (the healthy log), its traffic, the log under test, more traffic
    data = HEALTHY.read_bytes() + _traffic(rnd, 3000, kind) + body + _traffic(rnd, 3000, kind)
    _both(data, monkeypatch, chunk=100_003)  # several feeds: the ones after the ready line go in bulk


@pytest.mark.parametrize("kind", sorted(PREFIXES))
def test_a_busy_ready_log_is_counted_not_classified(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = HEALTHY.read_bytes() + _traffic(random.Random(1), 20_000, kind)
    seen: list[int] = []
    real = VLLMLogParser._classify

    def spy(self: VLLMLogParser, line: int, text: str, out: list[ev.Event]) -> None:
        seen.append(line)
        real(self, line, text, out)

    monkeypatch.setattr(VLLMLogParser, "_classify", spy)
    _, p = _parse(data, 100_003)
    assert p.lines_seen == data.count(b"\n")
    assert len(seen) < p.lines_seen / 4  # most access lines were counted in pieces


# lines that look like access lines and are not, or are and must not be taken on their count
_TRICKY = [
    'INFO:     Shutting down',
    'INFO:     Started server process [41877]',
    'INFO:     10.0.0.1:5 - "GET /x[1] HTTP/1.1" 200 OK',  # a `[`: the pasted-colour rule looks
    '(APIServer pid=7) INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',  # vLLM's prefix
    'x' * 80 + 'INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',  # INFO past column 80
    'INFO:     10.0.0.1:5 - "GET /é HTTP/1.1" 200 OK',  # not ASCII
    'INFO:     10.0.0.1:5 - "GET /\x1b[31mred HTTP/1.1" 200 OK',  # an escape
    'INFO:     10.0.0.1:5 - "GET /a HTTP/1.1" 200 OK\r',  # CRLF
    '{"message": "INFO:     10.0.0.1:5 - \\"GET / HTTP/1.1\\" 200 OK"}',
    'web-1  | INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',  # docker compose: a wrapper to learn
    'web-1  | (APIServer pid=41877) INFO 11-29 08:14:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s',
    '(APIServer pid=41877) ERROR 11-29 08:14:01 [core.py:1] EngineCore encountered a fatal error.',
    'Traceback (most recent call last):',
    '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 700, in run_engine_core',
    'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.',
    'INFO:     10.0.0.1:5 - "POST /v1/completions HTTP/1.1" ' + 'y' * 17_000,  # over the classify cap
    '(APIServer pid=41877) INFO:     Shutting down',
    '(APIServer pid=41877) ' + 'z' * 70 + ') INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',
    '(APIServer pid=4x) INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',
    '(APIServer pid=41877) INFO 11-29 08:14:02 [launcher.py:46] Route: /health, Methods: GET',
    '',
]


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, len(_TRICKY) - 1), st.integers(1, 400)), min_size=1, max_size=12),
       chunk=st.sampled_from([70_001, 200_000]), seed=st.integers(0, 1000), kind=st.sampled_from(sorted(PREFIXES)))
def test_tricky_lines_amid_traffic_read_the_same(picks: list[tuple[int, int]], chunk: int, seed: int,
                                                 kind: str) -> None:
    rnd = random.Random(seed)
    parts = [HEALTHY.read_bytes(), _traffic(rnd, 2500, kind)]  # ready, and past the first feed
    for which, gap in picks:
        parts.append(_traffic(rnd, gap, kind))
        parts.append(_TRICKY[which].encode() + b"\n")
    parts.append(_traffic(rnd, 2000, kind))
    with pytest.MonkeyPatch.context() as mp:
        _both(b"".join(parts), mp, chunk)
