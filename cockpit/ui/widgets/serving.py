"""The engine's own serving figures (its /metrics, windowed by cockpit/core/serving.py) on one line
above the throughput and KV plots; hidden until the supervisor has read them."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from cockpit.face import serving_words


class ServingFigures(Static):
    DEFAULT_CSS = "ServingFigures { height: 1; text-wrap: nowrap; text-overflow: ellipsis; display: none; }"

    def show(self, serving: dict[str, Any] | None) -> None:
        self.display = serving is not None
        if serving is not None:
            self.update(serving_words(serving))
