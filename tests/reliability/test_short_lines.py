"""Issue 40 item 8: hostile short lines read fast, and read the same as line by line.

A megabyte of empty or one-byte lines cost the whole classifier per line (seconds: see
bench/hostile_lines.py and docs/PERFORMANCE.md); a log with one spoilt byte on every access line
sent each of them through the classifier. Now blank lines are passed over as the classifier passes
them, a repeated short line the classifier has read as nothing is counted while nothing else has
been read, and a run of spoilt lines is re-proved line by line by its clean text. None of that may
change what a log says: each case below is parsed by the fast paths and by the slow one (every
line classified, nothing remembered), and both must give the same events, counts and state. The
hostile lines sit inside real logs: between records, right after a traceback frame (where a short
line is source text), before the crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.backends.sglang import scanner
from cockpit.backends.vllm import bulk, logparse, shortlines
from cockpit.core import events as ev
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.state import RunState
from tests.backends.test_fast_path_equivalence import _parse  # the SGLang parser fed as diagnose feeds it

DATA = Path(__file__).resolve().parents[1] / "data"
SHAPES = [b"", b"\r", b"\x00", b"\x1b", b"a", b" ", b"[", b"\xff", b"0", b"\t", b"}", b")", b"^"]
SGLANG_LOGS = ["sglang-0.5.9-llama70b-tp8-healthy.log", "sglang-0.5.9-kimi-0.93-prefill-oom.log",
               "sglang-0.5.23-llama70b-graph-capture-oom.log"]
VLLM_LOGS = ["vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log", "vllm-0.16.0-llama70b-tp4-nccl-timeout.log",
             "real-engine/vllm-0.32.0-cpu-spec-ngram.log"]
ROUTINE = (ev.DecodeBatch, ev.PrefillBatch, ev.HttpAccess)


def _hostile(log: bytes, shape: bytes, n: int = 3000) -> bytes:
    """The log with runs of `shape` lines at its start, in its middle, and after each of its first
    traceback frames (`File "…"` lines)."""
    run = (shape + b"\n") * n
    lines = log.splitlines(keepends=True)
    out = [run]
    frames = 0
    for i, line in enumerate(lines):
        out.append(line)
        if i == len(lines) // 2:
            out.append(run)
        if b'File "' in line and frames < 3:
            frames += 1
            out.append((shape + b"\n") * 5)
    return b"".join(out)


def _state(backend: str, events: list[ev.Event]) -> RunState:
    st = get_backend(backend).logs.new_state()
    for e in events:
        apply(st, e)
    end_of_input(st)
    return st


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
@pytest.mark.parametrize("name", SGLANG_LOGS)
def test_sglang_reads_hostile_short_lines_as_line_by_line(name: str, shape: bytes, monkeypatch) -> None:
    data = _hostile((DATA / name).read_bytes(), shape)
    fast, fp = _parse(data)
    if shape.translate(None, scanner._BLANK):
        assert shape in fp._nothing  # the fast path was taken: the line was remembered as nothing
    monkeypatch.setattr(scanner, "FULL_FEED_LINES", 1 << 40)  # every line classified
    full, sp = _parse(data)
    monkeypatch.undo()
    assert fp.lines_seen == sp.lines_seen == data.count(b"\n")
    assert (fp.generic, fp.foreign) == (sp.generic, sp.foreign)
    assert fp.lines_recognised == sp.lines_recognised
    assert [e for e in fast if not isinstance(e, ROUTINE)] == [e for e in full if not isinstance(e, ROUTINE)]
    a, b = _state("sglang", fast), _state("sglang", full)
    assert (a.crash, a.phase, a.min_headroom_gb, a.ranks) == (b.crash, b.phase, b.min_headroom_gb, b.ranks)


def _vllm(data: bytes, chunk: int) -> tuple[list[ev.Event], logparse.VLLMLogParser]:
    p = ByteReader(logparse.VLLMLogParser(reference_time=0.0))
    out: list[ev.Event] = []
    for k in range(0, len(data), chunk):
        out += p.feed(data[k:k + chunk])
    return out + p.finish(), p


def _vllm_both(data: bytes, monkeypatch) -> set[bytes]:  # type: ignore[no-untyped-def]
    fast, fp = _vllm(data, logparse.READ_CHUNK)
    remembered = set(fp._nothing)
    monkeypatch.setattr(shortlines, "SHORT_LINE", -1)  # nothing remembered
    slow, sp = _vllm(data, 4096)  # feeds under BULK_BYTES: every line classified
    monkeypatch.undo()
    assert fp.lines_seen == sp.lines_seen == data.count(b"\n")
    assert fp.recognised == sp.recognised
    assert fast == slow
    a, b = _state("vllm", fast), _state("vllm", slow)
    assert (a.crash, a.phase, a.ranks) == (b.crash, b.phase, b.ranks)
    return remembered


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
@pytest.mark.parametrize("name", VLLM_LOGS)
def test_vllm_reads_hostile_short_lines_as_line_by_line(name: str, shape: bytes, monkeypatch) -> None:
    assert shape in _vllm_both(_hostile((DATA / name).read_bytes(), shape), monkeypatch)  # the fast path was taken


ACCESS = b'(APIServer pid=29374) INFO:     127.0.0.1:%d - "POST /v1/completions HTTP/1.1" 200 OK\n'


@pytest.mark.parametrize("spoil", [b"\xff", b"\x00", b"\x1b", b"[", "é".encode(), b"\xc2\x9d"], ids=repr)
def test_vllm_reads_a_spoilt_byte_on_every_line_as_line_by_line(spoil: bytes, monkeypatch) -> None:
    """A ready server's access lines, each with one spoilt byte (then a crash): the run is re-proved
    line by line by its clean text (bulk.SPOILT_RUN), and says what classifying each line says."""
    log = (DATA / "real-engine" / "vllm-0.32.0-cpu-spec-ngram.log").read_bytes()
    body = b"".join((ACCESS % (40000 + i)).replace(b"POST", b"PO" + spoil + b"ST", 1) if i % 50 else ACCESS % i
                    for i in range(20000))
    crash = (DATA / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log").read_bytes()[-3000:]
    data = log + body + crash[crash.find(b"\n") + 1:]
    assert bulk.SPOILT_RUN < 49
    _vllm_both(data, monkeypatch)
