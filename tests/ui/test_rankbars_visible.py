"""Rank bars build only the rows on screen: 16 ranks in a box that shows fewer, then scrolled."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll

from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.rankbars import RankBars
from tests.ui.story import two_node_snapshot
from tests.ui.test_dashboard_snapshots import make_app


async def test_only_the_visible_rank_rows_are_built() -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        bars = screen.query_one(RankBars)
        built: list[int] = []
        row = bars._row

        def counting_row(y: int) -> Text | None:
            built.append(y)
            return row(y)

        bars._row = counting_row  # type: ignore[method-assign]
        screen.apply_snapshot(two_node_snapshot())
        await pilot.pause()
        box = screen.query_one("#bars-box", VerticalScroll)
        rows = bars._row_count()  # heading + 2 node lines + 16 ranks + 2 hosts
        assert rows == 21
        visible = box.scrollable_content_region.height
        assert 0 < visible < rows
        assert set(built) == set(range(visible))  # the rows below the box were never built
        built.clear()
        box.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert max(built) == rows - 1 and min(built) >= rows - visible  # scrolled to: built then
        lines = [bars.render_line(y).text for y in range(rows)]
        assert lines[0].startswith("RANK") and lines[1].startswith("node 0") and lines[10].startswith("node 1")
        assert lines[18].startswith("TP15") and lines[20].startswith("HOST")
