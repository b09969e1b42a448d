"""GPU memory, utilisation and power over time, per GPU, from the telemetry samples the snapshots
carry (nvitop's history view in a few rows). Pure state, kept by the dashboard's handler; the
widget only draws it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from cockpit.face import RunSnapshot

HISTORY = 60  # samples per GPU: a minute at the agent's 1 Hz
BLOCKS = " ▁▂▃▄▅▆▇█"


@dataclass
class GpuTrace:
    name: str
    total_gb: float | None = None
    used: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY))
    util: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY))
    power: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last_sampled: float = 0.0


class GpuHistory:
    def __init__(self) -> None:
        self.traces: dict[tuple[str, int], GpuTrace] = {}

    def add(self, snapshot: RunSnapshot) -> bool:
        """Append each GPU's sample once (a snapshot repeats the last sample until a new one)."""
        changed = False
        for g in snapshot.gpus:
            key = (g.host, g.index)
            tr = self.traces.get(key)
            if tr is None:
                tr = self.traces[key] = GpuTrace(name=g.name or "")
            if g.sampled_at <= tr.last_sampled:
                continue
            tr.last_sampled = g.sampled_at
            tr.total_gb = g.total_gb if g.total_gb is not None else tr.total_gb
            tr.used.append(g.used_gb)
            tr.util.append(g.util_pct)
            tr.power.append(g.power_w)
            changed = True
        return changed


def sparkline(values: list[float | None] | deque[float | None], top: float | None, width: int) -> str:
    """The last `width` values as block characters scaled to `top` ("·" where unknown)."""
    vals = list(values)[-width:]
    if not vals:
        return "·" * width
    peak = top if top and top > 0 else max((v for v in vals if v is not None), default=0.0) or 1.0
    out = []
    for v in vals:
        if v is None:
            out.append("·")
        else:
            out.append(BLOCKS[max(0, min(len(BLOCKS) - 1, round(v / peak * (len(BLOCKS) - 1))))])
    return "".join(out).rjust(width)
