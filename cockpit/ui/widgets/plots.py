"""Throughput and token-usage plots over time (textual-plotext), redrawn only when a point arrives."""

from __future__ import annotations

import time
from collections.abc import Sequence

from textual.timer import Timer
from textual_plotext import PlotextPlot

from cockpit.face import SeriesPoint
from cockpit.ui.themes import hex_rgb


class SeriesPlot(PlotextPlot):
    """One series; the title carries the numbers (now, peak) so the plot reads at a glance."""

    MAX_POINTS = 600  # what fits a wide pane; older points are summarised by the peak in the title
    # A trend needs no more than two redraws a second, and one costs ~10 ms (plotext): in a busy
    # server's flood every 10 Hz snapshot brings points, and two plots redrawn each time were the
    # biggest block a key press could land behind.
    MIN_REDRAW_S = 0.5

    def __init__(self, title: str, unit: str, color_variable: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = title
        self._unit = unit
        self._color_variable = color_variable
        self._values: list[float] = []
        self._peak: float | None = None
        self._count = -1
        self._plotted_at = -1e9
        self._redraw: Timer | None = None

    def show(self, series: Sequence[SeriesPoint]) -> None:
        if len(series) == self._count and (not series or (self._values and series[-1].value == self._values[-1])):
            return  # no new point: skip the redraw
        self._count = len(series)
        values = [p.value for p in series]
        self._peak = max(values) if values else None
        self._values = values[-self.MAX_POINTS :]
        wait = self._plotted_at + self.MIN_REDRAW_S - time.monotonic()
        if wait <= 0:
            self._plot_now()
        elif self._redraw is None:  # the newest points are drawn when the interval is up
            self._redraw = self.set_timer(wait, self._plot_now)

    def _plot_now(self) -> None:
        self._redraw = None
        self._plotted_at = time.monotonic()
        self.replot()

    def on_resize(self) -> None:
        self.replot()  # the title's form depends on the width (side by side at 120×40)

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.replot())
        self.replot()

    def replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if self._values:
            now = self._values[-1]
            peak = self._peak if self._peak is not None else now
            now_s, peak_s = f"{now:,.{self._digits(now)}f}", f"{peak:,.{self._digits(peak)}f}"
            title = f"{self._title}: {now_s} now · {peak_s} peak"
            if len(title) > self.size.width - 2:  # plotext drops a title wider than the plot: the figure alone
                title = f"{self._title} {now_s}"
            plt.title(title)
            color = hex_rgb(self.app.theme_variables.get(self._color_variable, ""))
            plt.plot(list(range(len(self._values))), self._values, marker="braille", color=color or "cyan")
            # both series are never negative: the axis starts at 0 (a usage of 0 ran it to −0.33),
            # and a flat 0 still gets a range to draw in
            low, high = min(self._values), max(self._values)
            if low >= 0:
                plt.ylim(0, high if high > 0 else 1)
        else:
            plt.title(f"{self._title}: no {self._unit} yet")
        plt.xticks([])
        self.refresh()

    @staticmethod
    def _digits(v: float) -> int:
        return 2 if abs(v) < 10 else 0
