"""Issue 40 item 19: reconnects back off with jitter, so transports that lost the same jump host do
not all knock again at the same moments.

Two real SSH transports try a port nothing listens on (the kernel refuses each connect at once),
five times each, at the same time. Before, both chose the same back-offs (1, 2, 4 … s, capped):
every transport behind one jump host came back in lockstep. Now each back-off is drawn between half
the exponential delay and all of it ("equal jitter"): the two schedules differ, each delay stays in
its bounds, and the next attempt really waits it out.
"""

from __future__ import annotations

import asyncio
import time

from cockpit.core.backoff import jittered
from cockpit.transport.base import TransportError
from cockpit.transport.ssh import SSHTransport
from tests.conftest import free_port

CAP_S = 0.4
ATTEMPTS = 5


async def _schedule(port: int) -> tuple[list[float], list[float]]:
    """(the back-offs the transport chose, the seconds between its failed attempts)."""
    t = SSHTransport(f"127.0.0.1:{port}", connect_timeout=2.0, backoff_cap=CAP_S)
    chosen, gaps = [], []
    last = None
    try:
        for _ in range(ATTEMPTS):
            try:
                await t.connection()
            except TransportError:
                pass
            now = time.monotonic()
            if last is not None:
                gaps.append(now - last)
            last = now
            chosen.append(t.backoff_s)
    finally:
        await t.close()
    return chosen, gaps


def test_two_transports_back_off_on_different_schedules_within_bounds(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of the machine's
    port = free_port()  # nothing listens: each connect is refused at once

    async def both() -> list[tuple[list[float], list[float]]]:
        return list(await asyncio.gather(_schedule(port), _schedule(port)))

    (a, gaps_a), (b, gaps_b) = asyncio.run(both())
    assert a != b, f"the same back-offs for both: {a}"
    for chosen, gaps in ((a, gaps_a), (b, gaps_b)):
        for n, delay in enumerate(chosen, start=1):
            full = min(CAP_S, 2.0 ** (n - 1))
            assert full / 2 <= delay <= full, (n, delay, chosen)
        for delay, gap in zip(chosen, gaps, strict=False):
            assert gap >= delay * 0.95, (chosen, gaps)  # the next attempt waited its back-off out


def test_jitter_stays_between_half_and_all_of_the_delay() -> None:
    draws = [jittered(8.0) for _ in range(2000)]
    assert min(draws) >= 4.0 and max(draws) <= 8.0
    assert len(set(draws)) > 1900  # drawn, not a fixed fraction
    assert min(draws) < 4.4 and max(draws) > 7.6  # the whole range is used
