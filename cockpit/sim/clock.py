"""Simulated time shared by the main process and the ranks: seconds since start, times --sim-speed.

CLOCK_MONOTONIC is system-wide on Linux, so forked processes that share `t0` agree on "now".
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self, speed: float, t0: float | None = None):
        self.speed = speed
        self.t0 = time.monotonic() if t0 is None else t0

    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def real(self, sim_seconds: float) -> float:
        """How long `sim_seconds` of simulated time lasts in real seconds."""
        return sim_seconds / self.speed

    def sleep_until(self, t: float) -> None:
        while True:
            dt = (t - self.now()) / self.speed
            if dt <= 0:
                return
            time.sleep(min(dt, 1.0))

    def sleep(self, sim_seconds: float) -> None:
        self.sleep_until(self.now() + sim_seconds)
