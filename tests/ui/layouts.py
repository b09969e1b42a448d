"""Counting the screen's layout passes (each walks every widget of the dashboard)."""

from __future__ import annotations

from typing import Any


def count_layout_passes(monkeypatch: Any) -> list[bool]:
    """From here on, one entry per `Screen._refresh_layout` (its `scroll` flag)."""
    from textual.screen import Screen

    passes: list[bool] = []
    real = Screen._refresh_layout

    def counted(self: Screen, size: Any = None, scroll: bool = False) -> None:
        passes.append(scroll)
        real(self, size, scroll)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    return passes
