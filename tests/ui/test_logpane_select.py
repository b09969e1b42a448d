"""The log pane's filter selection over a full ring: the newest lines at once, the rest in slices,
with the same result as filtering the whole ring in one pass."""

from __future__ import annotations

from cockpit.backends import get_backend
from cockpit.core.logfilter import LineFilter
from cockpit.ui.widgets.logpane import DEFAULT_CAPACITY, LogPane
from tests.ui.logflood import flood
from tests.ui.test_dashboard_snapshots import make_app

SGLANG = get_backend("sglang").logs.filter_presets()  # the flood is SGLang's log


async def test_filter_on_a_full_ring_answers_at_once_and_completes() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.screen.query_one(LogPane)
        pane.add_lines(flood(DEFAULT_CAPACITY + 1000))
        await pilot.pause()
        matcher = LineFilter("memory", presets=SGLANG)
        pane.set_filter(matcher, None, "Log [memory]")
        # the screen's lines are there before any slice has run
        assert 0 < len(pane._shown) < len(pane.model.lines) // 50
        assert all("avail mem" in ln.text for ln in pane._shown)
        assert pane._shown[-1] is next(ln for ln in reversed(pane.model.lines) if "avail mem" in ln.text)
        for _ in range(50):
            await pilot.pause()
            if not pane.model.unselected:
                break
        assert pane.model.unselected == 0
        want = [ln for ln in pane.model.lines if "avail mem" in ln.text]
        assert list(pane._shown) == want
        assert f"{len(want)}/{len(pane.model.lines)} lines" in str(pane.border_title)
        assert pane.scroll_y == pane.max_scroll_y  # still following


async def test_slices_keep_a_paused_view_on_the_same_lines() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.screen.query_one(LogPane)
        pane.add_lines(flood(DEFAULT_CAPACITY))
        await pilot.pause()
        pane.pause()
        pane.set_filter(LineFilter("batches", presets=SGLANG), None, "Log [batches]")
        await pilot.pause()
        top = pane._shown[int(pane.scroll_y)]
        pane._finish_selection()
        await pilot.pause()
        assert pane._shown[int(pane.scroll_y)] is top
        assert list(pane._shown) == [ln for ln in pane.model.lines if "Decode batch" in ln.text]


async def test_lines_arriving_during_a_selection() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)):
        pane = app.screen.query_one(LogPane)
        pane.add_lines(flood(DEFAULT_CAPACITY))
        pane.set_filter(LineFilter("memory", presets=SGLANG), None, "Log [memory]")
        pending = pane.model.unselected
        assert pending > 0
        # new lines push unselected ones off the ring: they are simply never selected
        pane.add_lines(flood(5000, start=DEFAULT_CAPACITY))
        assert pane.model.unselected == pending - 5000
        got = pane.shown_lines
        assert got == [ln for ln in pane.model.lines if "avail mem" in ln.text]
        # a rank filter too is judged line by line (each line carries its record's rank, see
        # NodeLog): newest first, the rest in slices, with the one-pass result
        pane.set_filter(LineFilter("memory", "3", SGLANG), None, "Log [memory] · TP3")
        assert pane.model.unselected > 0
        assert pane.shown_lines == [ln for ln in pane.model.lines if "avail mem" in ln.text and ln.rank == "TP3"]
