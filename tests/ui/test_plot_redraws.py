"""Plots redraw at most twice a second in a flood of points, and always end on the newest."""

from __future__ import annotations

from cockpit.core.state import SeriesPoint
from cockpit.ui.widgets.plots import SeriesPlot
from tests.ui.test_dashboard_snapshots import make_app


async def test_a_flood_of_points_is_drawn_at_most_twice_a_second() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        plot = app.screen.query_one("#plot-throughput", SeriesPlot)
        drawn: list[float] = []
        replot = plot.replot

        def counting_replot() -> None:
            drawn.append(plot._values[-1] if plot._values else 0.0)
            replot()

        plot.replot = counting_replot  # type: ignore[method-assign]
        series: list[SeriesPoint] = []
        for i in range(10):  # ten snapshots at 10 Hz, each with a new point
            series.append(SeriesPoint(f"2026-11-29 12:00:{i:02d}", 1000.0 + i))
            plot.show(list(series))
            await pilot.pause(0.1)
        await pilot.pause(0.6)
        assert 2 <= len(drawn) <= 4  # the first at once, then ≤ 2 Hz
        assert drawn[0] == 1000.0 and drawn[-1] == 1009.0
