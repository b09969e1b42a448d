"""Simulated time shared by the main process and the ranks: seconds since start, times --sim-speed.

CLOCK_MONOTONIC is system-wide on Linux, so forked processes that share `t0` agree on "now".

With a start-up speed (`--sim-startup-speed`), the clock runs at that rate until the main process
calls `serving()` once the server is ready, then at `speed`. The switch (the real and simulated
time it happened) lives in an anonymous shared mapping made before the ranks fork, so every process
reads the same piecewise-linear clock: continuous, never going back, the same "now" everywhere.
"""

from __future__ import annotations

import mmap
import struct
import time

_SWITCH = struct.Struct("ddd")  # switched (0/1), real time of the switch, simulated time of the switch


class Clock:
    def __init__(self, speed: float, t0: float | None = None, *, startup_speed: float | None = None):
        self.speed = speed
        self.t0 = time.monotonic() if t0 is None else t0
        self.startup_speed = startup_speed
        # shared with forked children (MAP_SHARED, anonymous); only made when the two rates differ
        self._switch = mmap.mmap(-1, _SWITCH.size) if startup_speed not in (None, speed) else None

    def _segment(self) -> tuple[float, float, float]:
        """(rate, real origin, simulated time at that origin) of the clock's current piece."""
        if self._switch is None:
            return self.speed, self.t0, 0.0
        switched, real0, sim0 = _SWITCH.unpack_from(self._switch)
        if not switched:
            return float(self.startup_speed or self.speed), self.t0, 0.0
        return self.speed, real0, sim0

    def rate(self) -> float:
        """Simulated seconds per real second now."""
        return self._segment()[0]

    def now(self) -> float:
        rate, real0, sim0 = self._segment()
        return sim0 + (time.monotonic() - real0) * rate

    def serving(self) -> None:
        """The server is ready: from now on the clock runs at `speed` (no-op without a start-up speed)."""
        if self._switch is None or _SWITCH.unpack_from(self._switch)[0]:
            return
        real0 = time.monotonic()
        sim0 = self.now()
        # the times first, the flag last: a reader never sees the flag without its times
        _SWITCH.pack_into(self._switch, 0, 0.0, real0, sim0)
        self._switch[0:8] = struct.pack("d", 1.0)

    def real(self, sim_seconds: float) -> float:
        """How long `sim_seconds` of simulated time lasts in real seconds (at the current rate)."""
        return sim_seconds / self.rate()

    def sleep_until(self, t: float) -> None:
        while True:
            # at the current rate; a switch to a slower one during the sleep is caught by the loop
            dt = (t - self.now()) / self.rate()
            if dt <= 0:
                return
            time.sleep(min(dt, 1.0))

    def sleep(self, sim_seconds: float) -> None:
        self.sleep_until(self.now() + sim_seconds)
