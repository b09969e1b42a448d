"""Back-off between retries, with jitter.

Every transport behind one jump host loses its connection at the same moment when the jump host
drops; with a fixed exponential back-off (1, 2, 4 … s) they all knock again at the same moments,
in lockstep, for as long as the outage lasts. Each wait is drawn instead between half the
exponential delay and all of it ("equal jitter"): never sooner than half the plan (a refusing
host is not hammered), never later than the plan (a recovered host is not kept waiting), and two
clients that failed together spread out from the first retry on.
Pure: no I/O.
"""

from __future__ import annotations

import random

_RNG = random.Random()  # seeded from the OS: two processes draw apart as two transports do


def jittered(delay: float) -> float:
    """A wait between delay/2 and delay, drawn uniformly."""
    return delay / 2 + _RNG.random() * delay / 2


def exponential(attempt: int, first: float, cap: float) -> float:
    """The planned delay before retry `attempt` (1: the first retry): first × 2^(attempt−1), capped,
    jittered."""
    return jittered(min(cap, first * 2.0 ** max(0, attempt - 1)))
