"""The TUI header of a Slurm run: login node, job id, node list, Slurm state and time left."""

from __future__ import annotations

import time

import pytest
from textual.app import App, ComposeResult

from cockpit.core.state import RunState
from cockpit.supervisor.api import RunInfo, RunSnapshot, SlurmView
from cockpit.ui.widgets.header import RunHeader


def _snap(slurm: dict, lifecycle: str, progress: str) -> RunSnapshot:
    state = RunState(backend="sglang")
    run = RunInfo(id="20261201-0540-ab12", profile="kimi", hosts=("login1", "slurm job 4242"), pid=None, pgid=None,
                  started_at="2026-12-01T05:40:00Z", run_dir="/shared/runs/kimi/x", log_path="/shared/x/node0.log")
    return RunSnapshot(taken_at=time.time(), profile="kimi", lifecycle=lifecycle, state=state, findings=(), run=run,
                       progress=progress, target=SlurmView(**slurm))


class _HeaderApp(App[None]):
    def compose(self) -> ComposeResult:
        yield RunHeader("kimi", ("login1",), id="h")


def _screen_lines(app: App[None], width: int) -> list[str]:
    """The header's two lines as the terminal shows them (cut to the screen's width)."""
    header = app.query_one(RunHeader)
    assert header.size.width == width
    return [header.render_line(y).text.rstrip() for y in range(2)]


@pytest.mark.parametrize("width", [80, 160])
async def test_header_shows_job_nodes_state_and_time_left(width: int) -> None:
    app = _HeaderApp()
    async with app.run_test(size=(width, 10)) as pilot:
        header = app.query_one(RunHeader)
        header.show(_snap({"login": "login1", "job_id": "4242", "state": "PENDING", "reason": "Resources",
                           "nodes": [], "node_list": None, "time_left": None}, "launching", "queued: Resources"),
                    None, 0.0)
        await pilot.pause()
        first, second = _screen_lines(app, width)
        assert "login1 · job 4242 · no nodes yet" in first
        # Slurm's reason reads with the state it explains; the run id follows (issue 17: shown from
        # the first snapshot on), and both fit at 80 columns
        assert second.startswith("Slurm PENDING · queued: Resources · run 20261201-0540-ab12"), second
        assert second.count("queued: Resources") == 1, second
        header.show(_snap({"login": "login1", "job_id": "4242", "state": "RUNNING", "reason": None,
                           "nodes": ["gpu01", "gpu02"], "node_list": "gpu[01-02]", "time_left": "3:59:12"},
                          "running", ""), None, 0.0)
        await pilot.pause()
        first, second = _screen_lines(app, width)
        assert "login1 · job 4242 · gpu[01-02]" in first
        assert second.startswith("Slurm RUNNING · 3:59:12 left · run 20261201-0540-ab12"), second
