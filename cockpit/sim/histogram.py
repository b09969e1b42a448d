"""A Prometheus histogram as both simulated engines keep one: counts per bucket, a sum and a count,
so a days-long run stays bounded. The bucket bounds are each engine's own (in its package)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket (not cumulative), + the +Inf bucket
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, v: float, n: int = 1) -> None:
        """`n` observations of `v` (both engines count a chunk of n tokens as n gaps of interval / n)."""
        i = next((k for k, b in enumerate(self.bounds) if v <= b), len(self.bounds))
        self.counts[i] += n
        self.total += v * n
        self.n += n

    def to_json(self) -> dict[str, object]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.total, "count": self.n}


def exposition(metric: str, help_: str, bounds: tuple[float, ...], counts: list[int] | None, total: float,
               labels: str) -> list[str]:
    """A histogram in Prometheus' text format, as both engines' prometheus_client writes it: HELP,
    TYPE, the cumulative buckets up to +Inf, count and sum. `labels` is the series' own (`k="v",…`);
    no counts yet is every bucket at zero."""
    out = [f"# HELP {metric} {help_}", f"# TYPE {metric} histogram"]
    counts = list(counts or [0] * (len(bounds) + 1))
    running = 0
    for b, c in zip(bounds, counts, strict=False):
        running += c
        out.append(f'{metric}_bucket{{{labels},le="{b}"}} {float(running)}')
    n = sum(counts)
    out.append(f'{metric}_bucket{{{labels},le="+Inf"}} {float(n)}')
    out.append(f"{metric}_count{{{labels}}} {float(n)}")
    out.append(f"{metric}_sum{{{labels}}} {float(total)}")
    return out
