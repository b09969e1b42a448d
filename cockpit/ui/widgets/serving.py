"""The engine's own serving figures (its /metrics, windowed by cockpit/core/serving.py) on one line
above the throughput and KV plots; hidden until the supervisor has read them."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from cockpit.face import serving_words


class ServingFigures(Static):
    DEFAULT_CSS = "ServingFigures { height: 1; text-wrap: nowrap; text-overflow: ellipsis; display: none; }"

    _words: object = None

    def show(self, serving: dict[str, Any] | None) -> None:
        self.display = serving is not None
        if serving is None:
            return
        words = serving_words(serving)
        if words != self._words:
            self._words = words
            # One line high and as wide as its panel: new figures never move anything, so no layout
            # pass (Static.update's default lays out the whole dashboard — once a second while idle).
            self.update(words, layout=False)
