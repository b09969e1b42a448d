"""Delivery of a run to whoever listens: `LogBatch`es at ≤ 15 Hz, `RunSnapshot`s at ≤ 10 Hz.

One publisher lives as long as its supervisor's `run()`: a restart does not stop it, so the
screens keep receiving snapshots (the stop, the wait for the GPUs, the launch) without polling.
It sleeps while nothing changes and is woken by new data; it never calls back once per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable

from cockpit.supervisor.api import LogBatch, LogLine, RunSnapshot

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_S = 0.1  # ≤ 10 Hz
LOG_BATCH_INTERVAL_S = 1 / 15  # 10-20 Hz
LOG_RING_LINES = 5000  # what a late subscriber (or the TUI's scroll-back) can get at once
LOG_PENDING_MAX = 20000  # undelivered lines kept for a slow consumer; beyond that they are counted as dropped

SnapshotListener = Callable[[RunSnapshot], None]
LogListener = Callable[[LogBatch], None]
# A timer of a subscriber (the journal recorder): does what is due, returns when it is next due
# (time.monotonic()), or None when nothing is pending.
Ticker = Callable[[], float | None]


class Publisher:
    def __init__(self, snapshot: Callable[[], RunSnapshot], *, on_logs: LogListener | None = None) -> None:
        self._snapshot = snapshot
        self._on_logs = on_logs
        self._listeners: list[SnapshotListener] = []
        self._tickers: list[Ticker] = []
        self._ring: deque[LogLine] = deque(maxlen=LOG_RING_LINES)
        self._pending: deque[LogLine] = deque()
        self._dropped = 0
        self._own = 0  # Cockpit's own access lines left out since the last batch
        self._wake = asyncio.Event()  # set whenever there is something to publish
        self._dirty = True
        self._changed = asyncio.Condition()
        self.wakes = 0  # loop iterations (an idle publisher must not spin)

    # ---------------------------------------------------------------- subscribers
    def subscribe(self, listener: SnapshotListener) -> None:
        """`listener(snapshot)` for every snapshot published (≤ 10 Hz)."""
        self._listeners.append(listener)

    def add_ticker(self, ticker: Ticker) -> None:
        self._tickers.append(ticker)

    # ---------------------------------------------------------------- input
    @property
    def dirty(self) -> bool:
        """Something changed since the last snapshot."""
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        self._dirty = value
        if value:
            self._wake.set()

    def add_lines(self, lines: Iterable[LogLine], own: int = 0) -> None:
        """The log's new lines; `own`: how many of Cockpit's own access lines were left out."""
        self._own += own
        ring, pending = self._ring, self._pending
        for ll in lines:
            ring.append(ll)
            if len(pending) >= LOG_PENDING_MAX:
                pending.popleft()
                self._dropped += 1
            pending.append(ll)
        self.dirty = True

    def clear_lines(self) -> None:
        self._ring.clear()
        self._pending.clear()
        self._dropped = 0

    def recent_lines(self) -> list[LogLine]:
        return list(self._ring)

    # ---------------------------------------------------------------- output
    def flush_logs(self) -> None:
        if not self._pending and not self._dropped and not self._own:
            return
        lines = tuple(self._pending)
        self._pending.clear()
        dropped, self._dropped = self._dropped, 0
        own, self._own = self._own, 0
        if self._on_logs is not None:
            try:
                self._on_logs(LogBatch(lines, dropped, own))
            except Exception:  # a listener's bug must not stop the supervisor
                log.exception("on_logs listener failed")

    def publish(self, force: bool = False) -> RunSnapshot | None:
        if not (self._dirty or force):
            return None
        snap = self._snapshot()
        self._dirty = False
        for listener in self._listeners:
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed")
        self.notify()
        return snap

    def notify(self) -> None:
        """Wake whoever waits in `wait_until` (a state change that is not a snapshot yet)."""
        cond = self._changed

        async def _wake() -> None:
            async with cond:
                cond.notify_all()

        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().create_task(_wake())

    async def wait_changed(self, timeout: float) -> None:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def run(self) -> None:
        """Log batches at ≤ 15 Hz and snapshots at ≤ 10 Hz, woken by new data, never polling.

        Intervals count from the end of the previous delivery, so a slow snapshot build never
        squeezes two callbacks closer than the cap. With nothing new it sleeps until data comes
        (or a subscriber's timer is due: the journal's 1 s progress).
        """
        last_logs = last_snap = -1e9
        while True:
            self.wakes += 1
            now = time.monotonic()
            if (self._pending or self._dropped) and now - last_logs >= LOG_BATCH_INTERVAL_S:
                self.flush_logs()
                last_logs = time.monotonic()
            if self._dirty and now - last_snap >= SNAPSHOT_INTERVAL_S:
                self.publish()
                last_snap = time.monotonic()
            timers = [t for t in (tick() for tick in self._tickers) if t is not None]
            due: list[float] = []
            if self._pending or self._dropped:
                due.append(last_logs + LOG_BATCH_INTERVAL_S)
            if self._dirty:
                due.append(last_snap + SNAPSHOT_INTERVAL_S)
            if due:
                await asyncio.sleep(max(0.0, min(due) - time.monotonic()))
                continue
            self._wake.clear()  # nothing runs between here and the wait: no change is missed
            timeout = max(0.0, min(timers) - time.monotonic()) if timers else None
            # not asyncio.wait_for: on 3.11 it can swallow a cancel that lands as the event is set,
            # and close() would then wait for this task forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
