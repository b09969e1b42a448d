"""The supervisor's publisher: capped rates under a flood, asleep when nothing happens.

Lines are handed to the publisher where the follow path hands them (`Publisher.add_lines`, which
`Follow.feed` calls after parsing); the full path against the simulator is in test_supervisor.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from cockpit.core.profile import load_profile
from cockpit.supervisor.api import LogBatch, LogLine, RunInfo, RunSnapshot
from cockpit.supervisor.supervisor import Supervisor


def _supervisor(tmp_path: Path, snaps: list[float], batches: list[tuple[float, LogBatch]],
                journal: Any = None) -> Supervisor:
    p = tmp_path / "pub.yaml"
    p.write_text("name: pubtest\nversion: 0.5.9\nhosts: [{ssh: local}]\nprogram: [/bin/true]\n"
                 f"workdir: {tmp_path}\nlog: sglang.log\nserver:\n  model-path: /models/m\n  port: 30000\n")

    def on_snapshot(_: RunSnapshot) -> None:
        snaps.append(time.monotonic())

    return Supervisor(load_profile(p), on_snapshot=on_snapshot, journal=journal,
                      on_logs=lambda b: batches.append((time.monotonic(), b)))


async def test_publisher_caps_rates_in_a_flood_and_sleeps_when_idle(tmp_path: Path) -> None:
    snaps: list[float] = []
    batches: list[tuple[float, LogBatch]] = []
    sup = _supervisor(tmp_path, snaps, batches)
    pub = sup.publisher
    task = asyncio.create_task(pub.run())
    try:
        # a flood: 1,000 writes a second
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            lines = []
            for _ in range(20):
                n += 1
                lines.append(LogLine(n, "TP0", f"line {n}"))
            pub.add_lines(lines)
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.3)
        delivered = [ln.number for _, b in batches for ln in b.lines]
        assert delivered == list(range(1, n + 1))  # every line, in order, once
        assert len(batches) <= 17  # ≤ 15 Hz over ~1.1 s
        assert min(b - a for (a, _), (b, _) in itertools.pairwise(batches)) >= 1 / 15 - 0.005
        assert 5 <= len(snaps) <= 12  # ≤ 10 Hz
        assert min(b - a for a, b in itertools.pairwise(snaps)) >= 0.095

        # idle: no busy wake-ups (the old loop woke ~30 times a second)
        await asyncio.sleep(0.2)
        wakes_before, snaps_before = pub.wakes, len(snaps)  # one loop iteration per wake-up
        await asyncio.sleep(1.0)
        assert pub.wakes - wakes_before <= 1
        assert len(snaps) == snaps_before

        # and new data is delivered at once, not at the next poll
        t = time.monotonic()
        pub.add_lines([LogLine(n + 1, None, "late line")])
        while len(snaps) == snaps_before:
            await asyncio.sleep(0.001)
        assert batches[-1][1].lines[-1].text == "late line"
        assert batches[-1][0] - t < 0.05
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _Journal:
    """Takes the recorder's 1 s progress ticks (the TUI's supervisor has a journal)."""

    def __init__(self) -> None:
        self.ticks = 0

    def record_start(self, *_: object) -> None:
        pass

    def record_progress(self, *_: object) -> None:
        self.ticks += 1


async def test_publisher_stops_when_cancelled_as_data_arrives(tmp_path: Path) -> None:
    # close() cancels the publisher and waits for it: a cancel that lands as new data wakes it
    # must still end it (asyncio.wait_for on 3.11 swallowed such a cancel: `q s` hung the TUI)
    journal = _Journal()
    sup = _supervisor(tmp_path, [], [], journal=journal)
    sup.info = RunInfo(id="r1", profile="pubtest", hosts=("local",), pid=None, pgid=None,
                       started_at="2026-11-29T12:00:00Z", run_dir=str(tmp_path), log_path=str(tmp_path / "l"))
    for _ in range(20):
        task = asyncio.create_task(sup.publisher.run())
        await asyncio.sleep(0.15)  # asleep: nothing new since the first snapshot
        sup.publisher.dirty = True
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert done, "the publisher ignored its cancel"
        assert task.cancelled()
    assert journal.ticks >= 1
