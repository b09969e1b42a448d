"""Issue 17, the log view worth living in: maximised (z / enter), wrap (W), sideways (← →),
less-style search (/ n N) apart from the regex filter (&). Pilot on the story's log lines."""

from __future__ import annotations

from typing import Any

from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.layouts import count_layout_passes
from tests.ui.screen_text import screen_lines, screen_text
from tests.ui.story import story_log_lines, story_snapshot
from tests.ui.test_dashboard_snapshots import make_app


async def _ready(pilot: Any) -> DashboardScreen:
    screen = pilot.app.screen
    assert isinstance(screen, DashboardScreen)
    screen.query_one(LogPane).add_lines(story_log_lines())
    screen.apply_snapshot(story_snapshot(0.93, "ready"))
    await pilot.pause()
    return screen


async def _type(pilot: Any, text: str) -> None:
    for ch in text:
        await pilot.press("space" if ch == " " else ch)


async def test_z_and_enter_maximise_the_log_at_80x24() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        before = pane.size.height
        assert before <= 4  # what the issue measured: 3 lines at 80×24
        await pilot.press("z")
        await pilot.pause()
        assert not screen.query_one("#bars-box").display and not screen.query_one("#panels").display
        assert pane.size.height >= 15
        await pilot.press("z")
        await pilot.pause()
        assert pane.size.height == before
        await pilot.press("enter")  # on the focused log pane
        await pilot.pause()
        assert pane.size.height >= 15
        await pilot.press("escape")
        await pilot.pause()
        assert pane.size.height == before


async def test_search_jumps_in_context_and_n_N_walk_the_matches() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        total = len(pane.shown_lines)
        await pilot.press("slash")
        await _type(pilot, "load weight")  # lower case: case-insensitive, as less -i
        await pilot.press("enter")
        await pilot.pause()
        assert len(pane.shown_lines) == total  # a search hides nothing
        first = pane.hit
        assert first is not None and "Load weight" in pane.shown_lines[first].text
        assert pane.paused
        assert any(pane.shown_lines[first].text[:60] in ln for ln in screen_lines(app))
        await pilot.press("n")
        older = pane.hit
        assert older is not None and older < first and "Load weight" in pane.shown_lines[older].text
        await pilot.press("N")
        assert pane.hit == first
        assert "search /load weight/" in str(pane.border_title)
        await pilot.press("escape")
        assert pane.search_rx is None


async def test_ampersand_filters_with_a_regex() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _ready(pilot)
        await pilot.press("ampersand")
        await _type(pilot, "Decode")
        await pilot.press("enter")
        await pilot.pause()
        shown = screen.query_one(LogPane).shown_lines
        assert shown and all("Decode" in ln.text for ln in shown)
        assert screen.filter_spec == "Decode"


async def test_wrap_and_sideways_scroll_show_the_end_of_long_lines() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _ready(pilot)
        await pilot.press("z")
        await pilot.pause()
        assert "gen throughput" not in screen_text(app)  # cut at 80 columns
        await pilot.press("right", "right", "right", "right", "right", "right", "right", "right")
        await pilot.pause()
        assert "gen throughput" in screen_text(app)
        await pilot.press("W")
        await pilot.pause()
        text = screen_text(app)
        assert "gen throughput" in text and "[2026-11-29" in text  # both ends of a line, wrapped
        assert "wrapped" in str(app.screen.query_one(LogPane).border_title)


async def test_y_copies_the_advised_command_and_E_exports_the_visible_log(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _ready(pilot)
        await pilot.press("y")
        await pilot.pause()
        assert "--mem-fraction-static 0.88" in app.clipboard
        assert "--model-path /models/Kimi-K2.5" in app.clipboard and "--tp" in app.clipboard
        await pilot.press("m")  # the memory preset: what the pane shows is what is saved
        await pilot.press("E")
        for _ in range(20):
            await pilot.pause(0.05)
            saved = list(tmp_path.glob("cockpit-demo-*-visible-*.log"))
            if saved:
                break
        assert len(saved) == 1
        lines = saved[0].read_text().splitlines()
        assert lines == [ln.text for ln in screen.query_one(LogPane).shown_lines]
        assert lines and not any("Decode batch" in ln for ln in lines)


async def test_o_hands_the_log_to_the_pager_or_says_where_it_is(monkeypatch: Any) -> None:
    monkeypatch.setenv("PAGER", "cat")
    app = make_app()
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await _ready(pilot)
        await pilot.press("o")
        for _ in range(20):
            await pilot.pause(0.05)
            if app._notifications:
                break
        # the headless test driver cannot suspend: the log is written and its path said
        words = " ".join(str(n.message) for n in app._notifications)
        assert "the log is in" in words
        path = words.split("the log is in ", 1)[1].split()[0]
        with open(path, encoding="utf-8") as f:
            assert len(f.read().splitlines()) == 44


async def test_a_new_line_moves_the_scroll_range_not_the_screens_layout(monkeypatch: Any) -> None:
    """A running server adds a line every second or two (its access line for each /health probe):
    once the pane overflows, a new line must not lay out the whole screen (a pass of the whole
    dashboard per batch of lines, for nothing), and the pane still follows the end. (A change that makes a scrollbar
    appear or go still lays out: the snapshots cover the first overflow.)"""
    passes = count_layout_passes(monkeypatch)
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        await pilot.pause()
        assert pane.virtual_size.height > pane.scrollable_content_region.height  # it overflows
        lines = story_log_lines()
        passes.clear()
        for i in range(5):
            pane.add_lines(lines[i:i + 1])
            await pilot.pause(0.05)
            assert pane.scroll_y == pane.max_scroll_y  # following the end
            assert pane.virtual_size.height == len(pane.shown_lines)
        assert passes == []
        # the last line added is on screen, at the bottom of the pane
        assert lines[4].text[:40] in screen_text(pilot.app)
