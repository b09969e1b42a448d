"""The throughput and token-usage plots' series, kept across snapshots: the engine's own /metrics
reads (`RunSnapshot.serving_point`, typed where the snapshot is built), each read once however
many snapshots carry it; until the first read, the log's batch/statistics series. No Textual."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from cockpit.face import SERIES_MAX_POINTS, RunSnapshot, SeriesPoint


class ServingSeries:
    def __init__(self, max_points: int = SERIES_MAX_POINTS) -> None:
        self.gen: deque[SeriesPoint] = deque(maxlen=max_points)  # generated tok/s
        self.kv: deque[SeriesPoint] = deque(maxlen=max_points)  # the KV pool's share in use
        self._seen: dict[str, Any] | None = None  # the /metrics read last plotted

    def add(self, snap: RunSnapshot) -> tuple[Sequence[SeriesPoint], Sequence[SeriesPoint]]:
        """The series to plot with this snapshot: (gen tok/s, token usage)."""
        point = snap.serving_point
        if point is not None and point.figures is not self._seen:
            self._seen = point.figures
            if point.gen_tok_s is not None:
                self.gen.append(SeriesPoint(point.at, point.gen_tok_s))
            if point.kv_usage is not None:
                self.kv.append(SeriesPoint(point.at, point.kv_usage))
        if self.gen or self.kv:
            return self.gen, self.kv
        return snap.state.gen_throughput, snap.state.token_usage
