"""The tuning screen in a real Textual app: a `cockpit tune` session's runs from a real journal,
reached with `T` from the history screen."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.widgets import DataTable, Static

from cockpit.journal import Journal
from cockpit.ui.screens.history import HistoryScreen
from cockpit.ui.screens.tune import ThroughputBySetting, TuneScreen

from .helpers import ready_state, run_info

FLAGS = {"model-path": "/models/Kimi-K2.5", "tp": 8}


class HistoryApp(App[None]):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def on_mount(self) -> None:
        self.push_screen(HistoryScreen("kimi", journal_path=self.path))


def make_journal(path: Path) -> None:
    with Journal.open(path) as j:
        steps = [("s1", 0.93, None, 0.82, None), ("s2", 0.88, None, 5.55, 11946.0), ("s3", 0.91, 64, 5.69, 12502.0)]
        for k, (rid, mfs, bs, h, tps) in enumerate(steps):
            flags = {**FLAGS, "mem-fraction-static": mfs, **({"cuda-graph-max-bs": bs} if bs else {})}
            j.record_start(run_info(rid, profile="kimi", started_at=f"2026-12-01T06:0{k}:00+00:00"), "kimi", flags)
            j.record_end(rid, "stopped", ready_state(headroom=h), [])
            j.tag_tune_session(rid, "tune-x")
            if tps is not None:
                j.record_bench(rid, {"output_tok_s": tps, "ttft_ms": {"p50": 900.0, "p90": 1500.0, "p99": 2100.0}})
        j.record_start(run_info("other", profile="kimi", started_at="2026-12-01T07:00:00+00:00"), "kimi", FLAGS)


async def test_t_opens_the_session_of_a_tuned_run(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    make_journal(path)
    app = HistoryApp(path)
    async with app.run_test(size=(160, 48)) as pilot:
        history = app.screen
        assert isinstance(history, HistoryScreen)
        for _ in range(100):
            await pilot.pause(0.02)
            if history.runs:
                break
        await pilot.press("T")  # the newest run was not launched by cockpit tune
        await pilot.pause()
        assert "not launched by `cockpit tune`" in str(history.query_one("#history-hint", Static).render())
        await pilot.press("down", "T")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, TuneScreen) and app.screen.runs:
                break
        screen = app.screen
        assert isinstance(screen, TuneScreen) and screen.session == "tune-x"
        table = screen.query_one("#tune-steps", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[1] for r in rows] == ["s1", "s2", "s3"]  # oldest first: the order of the steps
        assert rows[0][5] == "not benched" and rows[2][5] == "12,502" and rows[2][6] == "2,100"
        assert "--cuda-graph-max-bs 64" in rows[2][7] and rows[0][3].startswith("0.8")
        assert "3 launches · 0 crashes" in str(screen.query_one("#tune-title", Static).render())
        assert "step 3" in str(screen.query_one("#tune-hint", Static).render())
        plot = screen.query_one("#tune-plot", ThroughputBySetting)
        assert len(plot._runs) == 3
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
