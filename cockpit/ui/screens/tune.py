"""The tuning screen: the steps of one `cockpit tune` session from the journal, and the measured
throughput against the memory setting.

Reached with `T` on a tuned run in the history screen. The journal is read in a thread worker that
posts `TuneLoaded`; the handlers only render. Every step is a run of the journal tagged with the
session: its flags, outcome, headroom after capture and the bench recorded on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual_plotext import PlotextPlot

from cockpit.face import Journal, RunRecord, backend_names, bench_value, words_of

UNKNOWN = "—"
COLUMNS = (("n", "#"), ("run", "RUN"), ("outcome", "OUTCOME"), ("headroom", "HEADROOM"), ("kv", "KV TOKENS"),
           ("tps", "BENCH TOK/S"), ("ttft", "TTFT p99 ms"), ("setting", "SETTING"))


class TuneLoaded(Message):
    def __init__(self, runs: list[RunRecord], error: str | None = None) -> None:
        super().__init__()
        self.runs = runs
        self.error = error


def _engines_words(r: RunRecord) -> list[Any]:
    """The words of the run's engine; every engine's while the journal does not know it yet (a run
    that never ended was not read as any engine's log)."""

    return [words_of(r.backend)] if r.backend else [words_of(n) for n in backend_names()]


def memory_setting(r: RunRecord) -> tuple[str, float] | None:
    """The run's memory setting (its engine's `memory_flag`) as (flag, value), or None: not set."""
    for words in _engines_words(r):
        dest = words.memory_flag
        for flag in (dest.replace("_", "-"), dest) if dest else ():
            v = r.flags.get(flag)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return dest.replace("_", "-"), float(v)
    return None


def setting_words(r: RunRecord) -> str:
    """The flags the run's engine tunes (`EngineWords.tuned_flags`), as the run set them."""
    tuned = dict.fromkeys(f for words in _engines_words(r) for f in words.tuned_flags)
    return ", ".join(f"--{k} {r.flags[k]}" for k in tuned if k in r.flags) or "the engine's defaults"


def step_rows(runs: list[RunRecord]) -> list[list[str]]:
    rows = []
    for i, r in enumerate(runs, 1):
        tps = bench_value(r, "output_tok_s")
        ttft = bench_value(r, "ttft_ms", "p99")
        outcome = r.outcome if r.outcome != "crashed" else f"crashed: {r.crash_kind or 'unknown'}"
        rows.append([str(i), r.id, outcome,
                     UNKNOWN if r.min_headroom_gb is None else f"{r.min_headroom_gb:.2f} GiB",
                     UNKNOWN if r.max_total_num_tokens is None else f"{r.max_total_num_tokens:,}",
                     "not benched" if tps is None else f"{tps:,.0f}",
                     UNKNOWN if ttft is None else f"{ttft:,.0f}", setting_words(r)])
    return rows


class ThroughputBySetting(PlotextPlot):
    """Bench tok/s against the memory setting, one point per benched step, numbered as the table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._runs: list[RunRecord] = []

    def show(self, runs: list[RunRecord]) -> None:
        self._runs = list(runs)
        self.replot()

    def replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        points = [(i, memory_setting(r), bench_value(r, "output_tok_s")) for i, r in enumerate(self._runs, 1)]
        points = [(i, s, v) for i, s, v in points if s is not None and v is not None]
        if not points:
            plt.title("throughput vs setting: no benched step yet")
            plt.xticks([])
            plt.yticks([])
            self.refresh()
            return
        flag = points[0][1][0] if points[0][1] else ""
        xs = [s[1] for _, s, _ in points if s]
        ys = [v for _, _, v in points if v is not None]
        plt.title(f"bench tok/s vs --{flag}")
        plt.scatter(xs, ys, marker="●")
        for (i, s, v) in points:
            if s is not None and v is not None:
                plt.text(str(i), s[1], v)
        self.refresh()


TUNE_BINDINGS: list[BindingType] = [
    Binding("escape", "back", "Back", id="tune.back"),
    Binding("q", "back", "Back", show=False, id="tune.quit"),
    Binding("g", "reload", "Reload", id="tune.reload"),
]


class TuneScreen(Screen[None]):
    BINDINGS = TUNE_BINDINGS

    DEFAULT_CSS = """
    TuneScreen { layout: vertical; }
    TuneScreen #tune-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    TuneScreen #tune-steps { height: 1fr; min-height: 6; }
    TuneScreen #tune-bottom { height: 1fr; min-height: 10; }
    TuneScreen #tune-hint { width: 1fr; padding: 0 1; color: $text-muted; }
    TuneScreen #tune-plot { width: 2fr; }
    """

    def __init__(self, session: str, journal_path: Path | None = None) -> None:
        super().__init__()
        self.session = session
        self.journal_path = journal_path
        self.runs: list[RunRecord] = []

    def compose(self) -> ComposeResult:
        yield Static(f"Tuning · session {self.session}", id="tune-title")
        table: DataTable[Any] = DataTable(id="tune-steps", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        with Horizontal(id="tune-bottom"):
            yield Static("loading the journal…", id="tune-hint")
            yield ThroughputBySetting(id="tune-plot")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tune-steps", DataTable).focus()
        self.load()

    @work(thread=True, exclusive=True, group="tune-load")
    def load(self) -> None:

        try:
            journal = Journal.open(self.journal_path, readonly=True)
            try:
                runs = journal.tune_runs(self.session)
            finally:
                journal.close()
        except Exception as exc:  # one line for the operator; the app keeps running
            self.post_message(TuneLoaded([], str(exc)))
            return
        self.post_message(TuneLoaded(runs))

    def on_tune_loaded(self, message: TuneLoaded) -> None:
        hint = self.query_one("#tune-hint", Static)
        if message.error is not None:
            hint.update(f"cannot read the journal: {message.error}")
            return
        self.runs = message.runs
        table = self.query_one("#tune-steps", DataTable)
        table.clear()
        for r, row in zip(self.runs, step_rows(self.runs), strict=True):
            table.add_row(*row, key=r.id)
        crashes = sum(1 for r in self.runs if r.outcome == "crashed")
        benched = [r for r in self.runs if bench_value(r, "output_tok_s") is not None]
        best = max(benched, key=lambda r: bench_value(r, "output_tok_s") or 0.0, default=None)
        self.query_one("#tune-title", Static).update(
            f"Tuning · session {self.session} · {len(self.runs)} launches · {crashes} crashes")
        if best is None:
            hint.update("no step benched yet")
        else:
            hint.update(f"highest measured: step {self.runs.index(best) + 1}, "
                        f"{bench_value(best, 'output_tok_s') or 0:,.0f} tok/s at {setting_words(best)}; "
                        "`cockpit tune` chose among the steps that kept the headroom target "
                        "(see NAME.tuned.yaml)")
        self.query_one("#tune-plot", ThroughputBySetting).show(self.runs)

    def action_reload(self) -> None:
        self.load()

    def action_back(self) -> None:
        self.app.pop_screen()
