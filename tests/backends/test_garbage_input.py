"""Nothing a log file can hold makes the parser raise or buffer without bound."""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.sglang.logparse import LINE_CAP, SGLangLogParser, classify, read_log, split_record
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply
from cockpit.core.state import RunState

DATA = Path(__file__).resolve().parents[1] / "data"


def run(chunks: list[bytes]) -> tuple[SGLangLogParser, RunState]:
    p = ByteReader(SGLangLogParser())
    s = RunState()
    for c in chunks:
        for e in p.feed(c):
            apply(s, e)
    for e in p.finish():
        apply(s, e)
    return p, s


def test_empty_input() -> None:
    p, s = run([])
    assert p.lines_seen == 0 and s.phase == "unknown" and s.crash is None
    p, s = run([b"", b""])
    assert p.lines_seen == 0
    p, s = run([b"\n\n\n"])
    assert p.lines_seen == 3


def test_binary_and_invalid_utf8() -> None:
    rnd = random.Random(3)
    blob = bytes(rnd.randrange(256) for _ in range(300_000))
    p, s = run([blob])
    assert p.lines_seen == blob.count(b"\n") + (0 if blob.endswith(b"\n") else 1)
    # invalid UTF-8 inside a real line still parses (replacement characters)
    p, s = run([b"[2026-02-24 11:55:13 TP0] Load weight begin. avail mem=78.21 GB \xff\xfe\n"])
    assert s.ranks["TP0"].pre_load_avail_gb == 78.21


def test_ten_megabyte_line_is_capped_and_skipped_without_buffering() -> None:
    big = b"x" * (10 * 1024 * 1024)
    after = b"[2026-02-24 11:55:13 TP0] Load weight begin. avail mem=78.21 GB\n"
    # in one piece
    p, s = run([b"[2026-02-24 11:55:12 TP0] " + big + b"\n" + after])
    assert p.lines_seen == 2 and s.ranks["TP0"].pre_load_avail_gb == 78.21
    # streamed in 64 KiB pieces with no newline for a long time: the splitter's held line stays capped
    p = ByteReader(SGLangLogParser())
    stream = b"[2026-02-24 11:55:12 TP0] " + big + b"\n" + after
    longest_pending = 0
    for i in range(0, len(stream), 65536):
        p.feed(stream[i:i + 65536])
        longest_pending = max(longest_pending, len(p.split._held), len(p.split._head), len(p.split._cur))
    assert longest_pending <= LINE_CAP + 65536
    p.finish()
    assert p.lines_seen == 2
    # an over-long line that never ends
    p = ByteReader(SGLangLogParser())
    for _ in range(200):
        p.feed(b"y" * 65536)
    assert max(len(p.split._held), len(p.split._head), len(p.split._cur)) <= LINE_CAP
    p.finish()
    assert p.lines_seen == 1


def test_truncated_records_and_half_lines() -> None:
    text = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes()
    for cut in (1, 17, 100, 1000, len(text) // 2, len(text) - 3):
        p, _ = run([text[:cut]])
        assert p.lines_seen == text[:cut].count(b"\n") + (0 if text[:cut].endswith(b"\n") else 1)


def test_odd_prefixes_never_raise() -> None:
    for line in ["[", "[]", "[2026-02-24 11:55:13", "[2026-02-24 11:55:13 TP0", "[2026-02-24 11:55:13.] x",
                 "[2026-02-24 11:55:13 TP0]", "[2026-02-24 11:55:13 TP0]Load weight begin. avail mem=x GB",
                 "[9999-99-99 99:99:99] Load weight begin. avail mem=1e999 GB", "\x00\x00\x00",
                 "[2026-02-24 11:55:13 TP0] Capture cuda graph end. mem usage=. avail mem=.",
                 "[2026-02-24 11:55:13 TP0] max_total_num_tokens=abc, context_len=",
                 "[2026-02-24 11:55:13 TP0] server_args=ServerArgs(((((",
                 "[2026-02-24 11:55:13 TP0] server_args={'a': ",
                 "[2026-02-24 11:55:13 TP0] KV Cache is allocated. #tokens: 99999999999999999999, KV size: 1.0 GB",
                 "[2026-02-24 11:55:13 TP0] Decode batch, #running-req: x, token usage: y, gen throughput (token/s): z",
                 "Rank x scheduler is dead", "Exit code: abc", 'File "', "  File \"a\", line x, in"]:
        split_record(line)
        classify(1, line)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4000), st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=8))
def test_random_bytes_any_chunking(blob: bytes, sizes: list[int]) -> None:
    p = ByteReader(SGLangLogParser())
    s = RunState()
    pos = 0
    i = 0
    while pos < len(blob):
        n = sizes[i % len(sizes)]
        for e in p.feed(blob[pos:pos + n]):
            apply(s, e)
        pos += n
        i += 1
    for e in p.finish():
        apply(s, e)
    assert p.lines_seen == blob.count(b"\n") + (0 if not blob or blob.endswith(b"\n") else 1)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_random_text_lines(text: str) -> None:
    for prefix in ("", "[2026-02-24 11:55:13 TP0] ", "[2026-02-24 11:55:13] "):
        classify(1, prefix + text)


def test_mangled_golden_logs(tmp_path: Path) -> None:
    rnd = random.Random(11)
    for path in sorted(DATA.glob("*.log")):
        data = bytearray(path.read_bytes())
        for _ in range(50):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        out = tmp_path / path.name
        out.write_bytes(bytes(data))
        read_log(out)


def test_device_files_and_empty_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert read_log(empty).lines_seen == 0
    if os.path.exists("/dev/null"):
        assert read_log("/dev/null").phase == "unknown"


def test_tqdm_bar_redrawn_past_the_cap_keeps_its_last_segment() -> None:
    bar = b"".join(b"Loading safetensors checkpoint shards:  %3d%% Completed | %d/64\r" % (i % 100, i % 64) for i in range(5000))
    record = b"[2026-02-24 11:55:55 TP3] Load weight end. elapsed=68.10 s, type=X, dtype=torch.bfloat16, avail mem=15.20 GB, mem usage=79.40 GB."
    stream = bar + record + b"\r\n" + b"[2026-02-24 11:55:56 TP3] Memory pool end. avail mem=4.57 GB\n"
    assert len(bar) > 4 * LINE_CAP
    for step in (len(stream), 65536, 4099, 777):
        p, s = run([stream[i:i + step] for i in range(0, len(stream), step)])
        assert p.lines_seen == 2, step
        assert s.ranks["TP3"].weights_gb == 79.40 and s.ranks["TP3"].avail_before_capture_gb == 4.57
