"""The text an operator sees: the app's screen (and modal on top) as plain lines, for Pilot tests."""

from __future__ import annotations

from typing import Any


def screen_lines(app: Any) -> list[str]:
    """Each row of the terminal as text (modals composited over the screen below)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def screen_text(app: Any) -> str:
    return "\n".join(screen_lines(app))



def flat_text(app: Any) -> str:
    """The words of the top screen's text widgets in order, wrapping undone: for asserting on a
    sentence a dialog wraps (its rows on screen interleave with the dashboard's behind it)."""
    from textual.widgets import Static

    return " ".join(" ".join(str(w.render()).split()) for w in app.screen.query(Static))
