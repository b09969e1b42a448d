"""Snapshots of issue 17's new views at 80×24 and 160×48: the maximised log with a search hit,
and the scrollable help."""

from __future__ import annotations

from typing import Any

from tests.ui.story import story_snapshot
from tests.ui.test_dashboard_snapshots import feed, make_app


def zoom_and_search(pilot_keys: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    before = feed(story_snapshot(0.93, "ready"))

    async def run_before(pilot: Any) -> None:
        await before(pilot)
        await pilot.press("z", "slash", *"capture", "enter")
        await pilot.press(*pilot_keys)
        await pilot.pause()

    return run_before


def help_open():  # type: ignore[no-untyped-def]
    before = feed(story_snapshot(0.93, "ready"))

    async def run_before(pilot: Any) -> None:
        await before(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    return run_before


def test_log_zoomed_search_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=zoom_and_search())


def test_log_zoomed_search_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=zoom_and_search())


def test_help_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=help_open())


def test_help_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=help_open())
