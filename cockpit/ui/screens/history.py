"""The history screen: a profile's past runs from the journal, several side by side, relaunch one.

Reached with `h` from the dashboard or the picker. The journal is read in a thread worker that
posts `HistoryLoaded`; the screen's handlers only render what arrived. Comparing needs no I/O:
every record carries its downsampled gen-throughput series.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual_plotext import PlotextPlot

from cockpit.face import Journal, RunRecord, compare_rows, run_rows, value_text, without_masked
from cockpit.ui.screens.tune import TuneScreen
from cockpit.ui.themes import hex_rgb

HISTORY_BINDINGS: list[BindingType] = [
    Binding("escape", "back", "Back", id="history.back"),
    Binding("q", "back", "Back", show=False, id="history.quit"),
    Binding("space", "toggle_select", "Select", id="history.select"),
    Binding("x", "clear_selection", "Clear selection", id="history.clear"),
    Binding("l", "relaunch", "Relaunch flags", id="history.relaunch"),
    Binding("g", "reload", "Reload", id="history.reload"),
    Binding("T", "tune_session", "Tuning steps", id="history.tune"),  # t is the theme, app-wide
    Binding("v", "toggle_plot", "Table/plot", id="history.plot"),
]

# When the comparison table needs more than its half of the screen (the run ids of its columns
# were cut to `20261201-14` at 80 columns, and a second run's at 120), the table gets the whole
# width and `v` swaps in the plot.

# One colour per overlaid run, from theme variables (a theme file is the one place colours are
# chosen); the RGB fallbacks serve Textual's own themes, which lack Cockpit's variables.
SERIES_COLOR_VARIABLES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("plot-throughput", (95, 215, 215)),
    ("mem-graphs", (215, 175, 95)),
    ("plot-usage", (175, 135, 255)),
    ("headroom-ok", (95, 215, 95)),
    ("mem-foreign", (255, 135, 95)),
    ("mem-weights", (95, 135, 215)),
)


RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sel", " "),
    ("id", "ID"),
    ("started", "STARTED"),
    ("outcome", "OUTCOME"),
    ("headroom", "MIN HEADROOM"),
    ("kv", "KV TOKENS"),
    ("peak", "PEAK TOK/S"),
    ("ready", "READY IN"),
    ("changed", "CHANGED"),  # last: it is the one that grows
)


class RelaunchRequested(Message):
    """The operator wants a new run with a past run's flags (the app launches it)."""

    def __init__(self, flags: dict[str, Any], profile: str | None = None, run_id: str | None = None) -> None:
        super().__init__()
        self.flags = dict(flags)
        self.profile = profile
        self.run_id = run_id


class HistoryLoaded(Message):
    def __init__(self, runs: list[RunRecord]) -> None:
        super().__init__()
        self.runs = runs


class HistoryLoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ThroughputOverlay(PlotextPlot):
    """Gen throughput over time of several runs, one line each, from the journal's series."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._runs: list[RunRecord] = []

    def show_runs(self, runs: list[RunRecord]) -> None:
        self._runs = list(runs)
        self.replot()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.replot())
        self.replot()

    def _colors(self) -> list[tuple[int, int, int]]:
        variables = self.app.theme_variables
        return [hex_rgb(variables.get(name)) or fallback for name, fallback in SERIES_COLOR_VARIABLES]

    def replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        with_series = [r for r in self._runs if r.gen_throughput_series]
        if not with_series:
            plt.title("gen throughput: no samples in the selected runs" if self._runs else "gen throughput")
            plt.xticks([])
            plt.yticks([])
            self.refresh()
            return
        span = max(p[0] for r in with_series for p in r.gen_throughput_series)
        unit, per = ("seconds", 1.0) if span < 180 else ("minutes", 60.0) if span < 3 * 3600 else ("hours", 3600.0)
        plt.title(f"gen throughput (tok/s) over {unit} of serving")
        colors = self._colors()
        for i, r in enumerate(with_series):
            xs = [p[0] / per for p in r.gen_throughput_series]
            ys = [p[1] for p in r.gen_throughput_series]
            plt.plot(xs, ys, marker="braille", color=colors[i % len(colors)], label=_short_id(r.id))
        self.refresh()


def _short_id(run_id: str) -> str:
    return run_id if len(run_id) <= 20 else "…" + run_id[-19:]


class HistoryScreen(Screen[None]):
    BINDINGS = HISTORY_BINDINGS

    DEFAULT_CSS = """
    HistoryScreen { layout: vertical; }
    HistoryScreen #history-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    HistoryScreen #history-runs { height: 1fr; min-height: 6; }
    HistoryScreen #history-compare-area { height: 2fr; min-height: 10; }
    HistoryScreen #history-compare-side { width: 1fr; }
    HistoryScreen #history-compare { height: 1fr; }
    HistoryScreen #history-hint { height: auto; padding: 0 1; color: $text-muted; }
    HistoryScreen #history-plot { width: 1fr; }
    HistoryScreen DataTable { scrollbar-size-vertical: 1; }
    HistoryScreen.-narrow #history-plot { display: none; }
    HistoryScreen.-narrow.-plot #history-plot { display: block; }
    HistoryScreen.-narrow.-plot #history-compare-side { display: none; }
    """

    def __init__(self, profile_name: str | None, journal_path: Path | None = None) -> None:
        super().__init__()
        self.profile_name = profile_name
        self.journal_path = journal_path
        self.runs: list[RunRecord] = []
        self.selected: list[str] = []  # run ids in the order they were picked

    # ---- layout ----
    def compose(self) -> ComposeResult:
        yield Static(self._title(None), id="history-title")
        table: DataTable[Any] = DataTable(id="history-runs", cursor_type="row", zebra_stripes=True)
        for key, label in RUN_COLUMNS:
            table.add_column(label, key=key)
        yield table
        with Horizontal(id="history-compare-area"):
            with Vertical(id="history-compare-side"):
                yield Static("loading the journal…", id="history-hint")
                yield DataTable(id="history-compare", cursor_type="none", show_cursor=False)
            yield ThroughputOverlay(id="history-plot")
        yield Footer()

    def _title(self, count: int | None) -> str:
        who = f"profile {self.profile_name}" if self.profile_name else "all profiles"
        n = "" if count is None else f" · {count} run{'s' if count != 1 else ''}"
        return f"History · {who}{n}"

    def on_mount(self) -> None:
        self.query_one("#history-runs", DataTable).focus()
        self.load()

    def on_resize(self, event: Any) -> None:
        self._fit_comparison()

    def _fit_comparison(self) -> None:
        table = self.query_one("#history-compare", DataTable)
        # each column: its widest cell plus one column of padding either side
        needed = sum(c.get_render_width(table) for c in table.columns.values()) + 2
        self.set_class(needed > (self.size.width - 2) // 2, "-narrow")
        self._show_comparison_hint()

    def action_toggle_plot(self) -> None:
        if not self.has_class("-narrow"):
            self.notify("the table and the plot are both shown at this width", timeout=3)
            return
        self.toggle_class("-plot")

    # ---- loading (a thread worker: sqlite never runs on the event loop) ----
    @work(thread=True, exclusive=True, group="history-load")
    def load(self) -> None:

        try:
            journal = Journal.open(self.journal_path, readonly=True)
            try:
                runs = journal.list_runs(self.profile_name)
            finally:
                journal.close()
        except Exception as exc:  # the operator sees one line; the dashboard keeps running
            self.post_message(HistoryLoadFailed(str(exc)))
            return
        self.post_message(HistoryLoaded(runs))

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        self.runs = message.runs
        known = {r.id for r in self.runs}
        self.selected = [i for i in self.selected if i in known]
        self.query_one("#history-title", Static).update(self._title(len(self.runs)))
        table = self.query_one("#history-runs", DataTable)
        table.clear()
        for r, row in zip(self.runs, run_rows(self.runs), strict=True):
            table.add_row("✓" if r.id in self.selected else " ", *row, key=r.id)
        self._show_comparison()

    def on_history_load_failed(self, message: HistoryLoadFailed) -> None:
        self.query_one("#history-hint", Static).update(f"cannot read the journal: {message.error}")
        self.notify(message.error, title="journal", severity="error")

    # ---- selection and comparison ----
    def _cursor_run(self) -> RunRecord | None:
        table = self.query_one("#history-runs", DataTable)
        if not self.runs or table.row_count == 0:
            return None
        row = max(0, min(table.cursor_row, len(self.runs) - 1))
        return self.runs[row]

    def _selected_runs(self) -> list[RunRecord]:
        by_id = {r.id: r for r in self.runs}
        return [by_id[i] for i in self.selected if i in by_id]

    def action_toggle_select(self) -> None:
        run = self._cursor_run()
        if run is None:
            return
        if run.id in self.selected:
            self.selected.remove(run.id)
        else:
            self.selected.append(run.id)
        table = self.query_one("#history-runs", DataTable)
        table.update_cell(run.id, "sel", "✓" if run.id in self.selected else " ")
        self._show_comparison()

    def action_clear_selection(self) -> None:
        table = self.query_one("#history-runs", DataTable)
        for run_id in self.selected:
            table.update_cell(run_id, "sel", " ")
        self.selected = []
        self._show_comparison()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "history-runs" and len(self.selected) < 2:
            self._show_comparison()

    def _show_comparison(self) -> None:
        """Two or more picked: side by side. Fewer: the run under the cursor (and the picked one)."""
        hint = self.query_one("#history-hint", Static)
        table = self.query_one("#history-compare", DataTable)
        table.clear(columns=True)
        runs = self._selected_runs()
        if len(runs) < 2:
            cursor = self._cursor_run()
            if cursor is not None and cursor not in runs:
                runs = [*runs, cursor]
        if not self.runs:
            hint.update("no runs in the journal yet" + (f" for {self.profile_name}" if self.profile_name else ""))
        else:
            self._show_comparison_hint()
        self.query_one("#history-plot", ThroughputOverlay).show_runs(runs)
        if not runs:
            return
        table.add_column("", key="what")
        for r in runs:
            table.add_column(_short_id(r.id), key=r.id)
        measures, flags = compare_rows(runs)
        for name, values in measures:
            table.add_row(name, *values)
        if len(runs) >= 2:
            if flags:
                table.add_row("flags that differ", *[""] * len(runs))
                for name, values in flags:
                    table.add_row(name, *values)
            else:
                table.add_row("flags that differ", "none", *[""] * (len(runs) - 1))
        else:
            for key in sorted(runs[0].flags):
                table.add_row(f"--{key.lstrip('-')}", value_text(runs[0].flags[key]))
        self.call_after_refresh(self._fit_comparison)  # the columns' widths are known once laid out

    def _show_comparison_hint(self) -> None:
        if not self.runs:
            return
        hint = self.query_one("#history-hint", Static)
        plot = " · v the throughput plot" if self.has_class("-narrow") else ""
        if len(self._selected_runs()) >= 2:
            hint.update(f"comparing {len(self._selected_runs())} picked runs · x clears{plot}")
        else:
            hint.update(f"space picks runs to compare · l relaunches flags{plot}")

    # ---- actions ----
    def action_relaunch(self) -> None:
        picked = self._selected_runs()
        if len(picked) > 1:
            self.notify("pick one run to relaunch (x clears the selection)", severity="warning")
            return
        run = picked[0] if picked else self._cursor_run()
        if run is None:
            self.notify("no run to relaunch", severity="warning")
            return
        if not run.flags:
            self.notify(f"run {run.id} has no recorded flags", severity="warning")
            return
        # Posted to the app, not the screen: the screen is about to go away.
        self.app.post_message(RelaunchRequested(without_masked(run.flags), profile=run.profile, run_id=run.id))
        self.dismiss()

    def action_reload(self) -> None:
        self.load()

    def action_tune_session(self) -> None:
        """The steps of the `cockpit tune` session that launched the run under the cursor."""
        run = self._cursor_run()
        hint = self.query_one("#history-hint", Static)
        if run is None or not run.tune_session:
            hint.update("this run was not launched by `cockpit tune`")
            return

        self.app.push_screen(TuneScreen(run.tune_session, journal_path=self.journal_path))

    def action_back(self) -> None:
        self.dismiss()
