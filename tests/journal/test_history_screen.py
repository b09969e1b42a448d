"""The history screen in a real Textual app: runs from a real journal, compare, relaunch."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable

from cockpit.core.state import SeriesPoint
from cockpit.journal import Journal
from cockpit.ui.screens.history import HistoryScreen, RelaunchRequested, ThroughputOverlay

from .helpers import crashed_state, ready_state, run_info

FLAGS = {"model-path": "/models/Kimi-K2.5", "tp": 8, "hicache-size": 48}


class HistoryApp(App[None]):
    def __init__(self, profile: str | None, path: Path) -> None:
        super().__init__()
        self.profile = profile
        self.path = path
        self.relaunched: list[RelaunchRequested] = []

    def on_mount(self) -> None:
        self.push_screen(HistoryScreen(self.profile, journal_path=self.path))

    def on_relaunch_requested(self, message: RelaunchRequested) -> None:
        self.relaunched.append(message)


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    with Journal.open(path) as j:
        j.record_start(run_info("run-a93", started_at="2026-11-29T08:00:00+00:00"), "kimi",
                       {**FLAGS, "mem-fraction-static": 0.93})
        j.record_end("run-a93", "crashed", crashed_state(), [])
        st = ready_state()
        for i in range(50):
            st.gen_throughput.append(SeriesPoint(ts=f"2026-11-29 08:14:{i:02d}", value=2500.0 + 10 * i))
        j.record_start(run_info("run-b88", started_at="2026-11-29T09:00:00+00:00"), "kimi",
                       {**FLAGS, "mem-fraction-static": 0.88})
        j.record_end("run-b88", "stopped", st, [])
        j.record_start(run_info("run-demo", profile="demo", started_at="2026-11-29T10:00:00+00:00"), "demo", {"tp": 2})
    return path


async def _loaded(pilot, screen: HistoryScreen) -> None:
    for _ in range(100):
        await pilot.pause(0.02)
        if screen.runs:
            return
    raise AssertionError("the journal never arrived")


def _column(table: DataTable, key: str) -> list[str]:
    return [str(table.get_cell(row, key)) for row in table.rows]


async def test_lists_the_profiles_runs_and_compares_two(journal_path: Path) -> None:
    app = HistoryApp("kimi", journal_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        await _loaded(pilot, screen)
        runs = screen.query_one("#history-runs", DataTable)
        assert _column(runs, "id") == ["run-b88", "run-a93"]  # newest first, only this profile
        assert "mem-fraction-static 0.93→0.88" in _column(runs, "changed")[0]
        assert _column(runs, "outcome")[1].startswith("crashed: cuda_oom")

        await pilot.press("space", "down", "space")
        await pilot.pause()
        assert screen.selected == ["run-b88", "run-a93"]
        assert _column(runs, "sel") == ["✓", "✓"]
        compare = screen.query_one("#history-compare", DataTable)
        rows = {str(compare.get_row_at(i)[0]): [str(c) for c in compare.get_row_at(i)[1:]]
                for i in range(compare.row_count)}
        assert rows["--mem-fraction-static"] == ["0.88", "0.93"]
        assert rows["min headroom"] == ["5.50 GiB", "0.82 GiB"]
        assert rows["KV tokens"] == ["174,617", "246,890"]
        assert rows["outcome"] == ["stopped", "crashed"]
        assert "--tp" not in rows
        plot = screen.query_one("#history-plot", ThroughputOverlay)
        assert [r.id for r in plot._runs] == ["run-b88", "run-a93"]

        await pilot.press("l")  # two picked: refused, nothing posted
        await pilot.pause()
        assert app.relaunched == []


async def test_relaunch_posts_the_past_runs_flags(journal_path: Path) -> None:
    app = HistoryApp("kimi", journal_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        await _loaded(pilot, screen)
        await pilot.press("down", "l")
        await pilot.pause()
        assert len(app.relaunched) == 1
        msg = app.relaunched[0]
        assert msg.flags["mem-fraction-static"] == 0.93 and msg.run_id == "run-a93" and msg.profile == "kimi"
        assert not isinstance(app.screen, HistoryScreen)  # back to where `h` was pressed


async def test_all_profiles_and_an_unreadable_journal(tmp_path: Path, journal_path: Path) -> None:
    app = HistoryApp(None, journal_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        await _loaded(pilot, screen)
        assert len(screen.runs) == 3

    bad = tmp_path / "not-a-journal.sqlite3"
    bad.write_bytes(b"garbage" * 1000)
    app = HistoryApp("kimi", bad)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(50):
            await pilot.pause(0.02)
            if "cannot read the journal" in str(app.screen.query_one("#history-hint").render()):
                break
        assert "not a Cockpit journal" in str(app.screen.query_one("#history-hint").render())
