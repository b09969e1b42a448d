"""The TUI header of a Slurm run: login node, job id, node list, Slurm state and time left."""

from __future__ import annotations

import time

from textual.app import App, ComposeResult

from cockpit.core.state import RunState
from cockpit.supervisor.api import RunInfo, RunSnapshot
from cockpit.ui.widgets.header import RunHeader


def _snap(slurm: dict, lifecycle: str, progress: str) -> RunSnapshot:  # type: ignore[type-arg]
    state = RunState(backend="sglang")
    run = RunInfo(id="20261201-0540-ab12", profile="kimi", hosts=("login1", "slurm job 4242"), pid=None, pgid=None,
                  started_at="2026-12-01T05:40:00Z", run_dir="/shared/runs/kimi/x", log_path="/shared/x/node0.log")
    return RunSnapshot(taken_at=time.time(), profile="kimi", lifecycle=lifecycle, state=state, findings=(), run=run,
                       progress=progress, slurm=slurm)


class _HeaderApp(App[None]):
    def compose(self) -> ComposeResult:
        yield RunHeader("kimi", ("login1",), id="h")


async def test_header_shows_job_nodes_state_and_time_left() -> None:
    app = _HeaderApp()
    async with app.run_test(size=(160, 10)):
        header = app.query_one(RunHeader)
        header.show(_snap({"login": "login1", "job_id": "4242", "state": "PENDING", "reason": "Resources",
                           "nodes": [], "node_list": None, "time_left": None}, "launching", "queued: Resources"),
                    None, 0.0)
        first, second = header.render().plain.split("\n")
        assert "login1 · job 4242 · no nodes yet" in first
        assert second.startswith("Slurm PENDING · queued: Resources")
        header.show(_snap({"login": "login1", "job_id": "4242", "state": "RUNNING", "reason": None,
                           "nodes": ["gpu01", "gpu02"], "node_list": "gpu[01-02]", "time_left": "3:59:12"},
                          "running", ""), None, 0.0)
        first, second = header.render().plain.split("\n")
        assert "login1 · job 4242 · gpu[01-02]" in first
        assert second.startswith("Slurm RUNNING · 3:59:12 left · run 20261201-0540-ab12")
