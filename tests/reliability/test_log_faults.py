"""Hostile logs through the parser, the log follower and the supervisor: truncated, rotated,
10 MB lines, binary garbage, invalid UTF-8, a partial last line completed later, CRLF, tqdm
carriage returns. No crash, bounded memory, every line delivered once and counted once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import subprocess
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.sglang.logparse import SGLangLogParser
from cockpit.core.linesplit import ByteReader
from cockpit.core.profile import parse_profile
from cockpit.core.reducer import apply
from cockpit.core.sanitize import clean_text
from cockpit.core.state import RunState
from cockpit.remote.host import HostOps, LogChunk, LogFollower, LogReset
from cockpit.supervisor.api import LogBatch
from cockpit.supervisor.nodelog import DISPLAY_LINE_CAP
from cockpit.supervisor.supervisor import Supervisor
from cockpit.transport.local import LocalTransport
from tests.reliability.helpers import PY, make_env, split_lines, wait_for

HOSTILE = str(Path(__file__).with_name("_hostile_server.py"))
MB = 1 << 20


def _hostile_bytes() -> tuple[bytes, bytes]:
    """The hostile server's log, as (first part, completion), produced by the real script."""
    done = subprocess.run([PY, "-c", (
        "import sys, runpy; sys.argv = ['x', '/']; m = runpy.run_path(" + repr(HOSTILE) + ");"
        "m['part_one'](); sys.stdout.flush(); sys.stdout.buffer.write(b'\\0SPLIT\\0'); m['part_two']()")],
        capture_output=True, timeout=60, check=True)
    one, two = done.stdout.split(b"\0SPLIT\0")
    return one, two


def test_parser_survives_every_hostile_input_in_any_chunking_with_bounded_memory(ledger) -> None:
    one, two = _hostile_bytes()
    stream = one + two
    rnd = random.Random(5)
    for trial in range(4):
        tracemalloc.start()
        try:
            p = ByteReader(SGLangLogParser())
            st = RunState()
            pos = 0
            while pos < len(stream):
                n = rnd.choice([1, 7, 4096, 65536, MB, 3 * MB])
                for e in p.feed(stream[pos:pos + n]):
                    apply(st, e)
                pos += n
                ledger.tried("logs")
            for e in p.finish():
                apply(st, e)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # the largest piece fed is 3 MB: the parser holds no more than a few of those
        assert peak < 12 * MB, (trial, peak)
        assert p.lines_seen == stream.count(b"\n")
        # real lines around the garbage still count, in both ranks, CRLF included
        assert st.ranks["TP0"].pre_load_avail_gb == 78.21
        assert st.ranks["TP1"].pre_load_avail_gb == 77.50
        # the line completed later is parsed whole
        assert st.ranks["TP1"].weights_gb == 68.63, st.ranks["TP1"]
    ledger.fault("logs", 4)
    ledger.survive("logs", 4)


async def test_follower_truncation_rotation_partial_line_and_garbage(tmp_path: Path, ledger) -> None:
    ops = HostOps(LocalTransport(), runs_root=str(tmp_path / "runs"))
    log = tmp_path / "app.log"
    log.write_bytes(b"")
    fol = LogFollower(ops, str(log), poll_s=0.02)
    got = bytearray()  # what was delivered since the last reset, while it is small
    seen: dict[str, Any] = {"n": 0, "sha": hashlib.sha256()}  # all of it, hashed (no copies held)
    resets: list[str] = []
    box: dict[str, int] = {"peak": 0}

    def delivered() -> tuple[int, str]:
        return int(seen["n"]), seen["sha"].hexdigest()

    async def consume() -> None:
        async for item in fol.items():
            if isinstance(item, LogChunk):
                assert item.offset == seen["n"], (item.offset, seen["n"])
                seen["n"] += len(item.data)
                seen["sha"].update(item.data)
                if len(got) < 4096:
                    got.extend(item.data[:4096])
            elif isinstance(item, LogReset):
                resets.append(item.why)
                got.clear()
                seen["n"], seen["sha"] = 0, hashlib.sha256()

    async def settle(pred: Callable[[], bool], timeout: float = 20.0) -> None:
        for _ in range(int(timeout / 0.02)):
            if pred():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the follower did not deliver in time")

    one, two = _hostile_bytes()
    complete = one[: one.rfind(b"\n") + 1]
    want_first = (len(complete), hashlib.sha256(complete).hexdigest())
    want_all = (len(one) + len(two), hashlib.sha256(one + two).hexdigest())
    tracemalloc.start()  # from here on: what the follower holds (the test's own copies are made)
    task = asyncio.create_task(consume())
    try:
        with open(log, "ab") as f:
            f.write(one)
        await settle(lambda: delivered() == want_first)
        await asyncio.sleep(0.3)
        assert delivered() == want_first  # the partial last line is held back ...
        with open(log, "ab") as f:
            f.write(two)
        await settle(lambda: delivered() == want_all)  # ... and delivered whole once it completes
        _, box["peak"] = tracemalloc.get_traced_memory()
        ledger.fault("logs", 3)  # garbage, 10 MB line, partial line
        # truncation (copytruncate), then a partial line
        with open(log, "r+b") as ft:
            ft.truncate(0)
        await settle(lambda: resets == ["truncated"])
        with open(log, "ab") as f:
            f.write(b"after truncate\r\nhalf")
        await settle(lambda: bytes(got) == b"after truncate\r\n")
        ledger.fault("logs")
        # rotation: the half line is finished in the old file, the new file starts afresh
        with open(log, "ab") as f:
            f.write(b" done\n")
        os.rename(log, tmp_path / "app.log.1")
        log.write_bytes(b"new file\n")
        await settle(lambda: resets == ["truncated", "rotated"] and bytes(got) == b"new file\n")
        ledger.fault("logs")
        # deleted outright, then created again by the next writer
        log.unlink()
        await asyncio.sleep(0.3)
        log.write_bytes(b"recreated\n")
        await settle(lambda: resets[-1:] == ["rotated"] and len(resets) == 3 and bytes(got) == b"recreated\n")
        ledger.fault("logs")
    finally:
        tracemalloc.stop()
        await fol.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # a 10 MB line passes in pieces of max_chunk (4 MB): the cockpit side holds a few pieces
    # (transport reads, the frame decoder, the chunk handed on), never the line or the file
    assert box["peak"] < 8 * fol.max_chunk, box["peak"]
    ledger.note(f"follower peak memory with a 10 MB line: {box['peak'] / MB:.1f} MiB"), box["peak"]
    ledger.survive("logs", 6)


def _shown(raw: bytes) -> str:
    """What the supervisor shows for one line of the file (see NodeLog): a tqdm redraw's last
    segment, cleaned for the terminal (escape sequences and controls dropped), capped."""
    text = raw.decode("utf-8", "replace")
    if "\r" in text:
        text = text.rsplit("\r", 1)[-1] or text.strip("\r")
    return clean_text(text)[:DISPLAY_LINE_CAP]


async def test_supervisor_counts_and_shows_each_hostile_line_once(tmp_path: Path, ledger) -> None:
    go = tmp_path / "go"
    profile = parse_profile({"name": "hostile", "program": [PY, HOSTILE, str(go)],
                             "workdir": str(tmp_path / "work"), "log": "logs/h.log"}, "hostile.yaml")
    lines: list[tuple[int, str]] = []

    def on_logs(batch: LogBatch) -> None:
        assert batch.dropped == 0
        lines.extend((ln.number, ln.text) for ln in batch.lines)

    sup = Supervisor(profile, runs_root=str(tmp_path / "runs"), on_logs=on_logs)
    info = await sup.launch(attach=False)
    runner = asyncio.create_task(sup.run())
    log = Path(info.log_path)
    try:
        # the partial line must not be shown before it completes
        for _ in range(500):
            if log.exists() and log.stat().st_size > 10 * MB and lines and lines[-1][1].startswith("[2026-02-24 11:55:14"):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert not any("Load weight end" in t for _, t in lines)
        go.touch()
        assert await sup.wait_until(lambda s: s.any_exited, 30)
        await asyncio.sleep(0.3)
    finally:
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    raw = split_lines(log.read_bytes())
    expected = [_shown(r) for r in raw]
    ledger.tried("logs", len(raw))
    assert [n for n, _ in lines] == list(range(1, len(raw) + 1)), "line numbers drifted from the file's"
    lost, repeated = ledger.lines(expected, [t for _, t in lines])
    assert (lost, repeated) == (0, 0)
    st = sup.snapshot().state
    assert st.ranks["TP1"].weights_gb == 68.63 and st.ranks["TP0"].pre_load_avail_gb == 78.21
    ledger.fault("logs")
    ledger.survive("logs")


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_parser_partial_line_completed_later(chunk: int, ledger) -> None:
    line = b"[2026-02-24 11:55:15 TP1] Load weight end. type=X, dtype=torch.bfloat16, avail mem=8.87 GB, mem usage=68.63 GB.\r\n"
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for i in range(0, len(line) - 1, chunk):
        for e in p.feed(line[i:min(i + chunk, len(line) - 1)]):
            apply(st, e)
    assert "TP1" not in st.ranks or st.ranks["TP1"].weights_gb is None  # not yet complete
    for e in p.feed(line[-1:]):
        apply(st, e)
    assert st.ranks["TP1"].weights_gb == 68.63
    ledger.tried("logs", len(line) // chunk)


def test_cockpit_logs_prints_the_hostile_log_line_for_line(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    go = tmp_path / "go"
    program = [PY, HOSTILE, str(go)]
    env.write_profile("hostile", f"name: hostile\nprogram: {json.dumps(program)}\nworkdir: {tmp_path / 'work'}\n"
                                 "log: logs/h.log\n")
    up = env.cockpit("up", "hostile", "--wait", "started", "--timeout", "30")
    assert up.returncode == 0, up.stdout + up.stderr
    go.touch()
    run_dir = env.current_run("hostile")
    assert wait_for(lambda: (run_dir / "exit_code").exists(), 15)
    logs = subprocess.run([PY, "-m", "cockpit", "logs", "hostile"], env=env.env, capture_output=True, timeout=120,
                          cwd=env.root)
    assert logs.returncode == 0, logs.stderr[-2000:]
    raw = (tmp_path / "work/logs/h.log").read_bytes()
    expected = raw.decode("utf-8", "replace").encode("utf-8")
    got_lines, want_lines = split_lines(logs.stdout), split_lines(expected)
    ledger.tried("logs", len(want_lines))
    lost, repeated = ledger.lines(want_lines, got_lines)
    assert (lost, repeated) == (0, 0), (len(want_lines), len(got_lines))
    assert logs.stdout == expected
    ledger.fault("logs")
    ledger.survive("logs")

