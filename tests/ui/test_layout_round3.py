"""The dashboard's layout, round 3 (issue 39 item 4): at 120×40 the log shows at least 10 lines,
and the GPU panel is whole — every GPU row ends with its power figure — at 80×24 and 120×40; for
the simulator's view (the Kimi story, 8 GPUs) and the real engine's (vLLM's CPU build, from its
recorded start-up). Text checks first (they say what is wrong), then the snapshots."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cockpit.supervisor.nodelog import NodeLog
from cockpit.ui.messages import LogsArrived
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.screen_text import screen_lines
from tests.ui.story import story_log_lines, story_snapshot
from tests.ui.test_cpu_and_crash_views import CPU_LOG, cpu_snapshot
from tests.ui.test_cpu_and_crash_views import make_app as cpu_app
from tests.ui.test_dashboard_snapshots import make_app as story_app


def _story(panel: str | None = None):  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        screen = pilot.app.screen
        assert isinstance(screen, DashboardScreen)
        screen.query_one("#log").add_lines(story_log_lines())
        screen.apply_snapshot(story_snapshot(0.93, "ready"))
        if panel:
            screen._set_panel(panel)
        await pilot.pause()

    return run_before


def _cpu(panel: str | None = None):  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        from cockpit.backends import get_backend
        from cockpit.supervisor.api import LogBatch

        screen = pilot.app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(cpu_snapshot())
        reader = NodeLog(get_backend("vllm"), "local", parse=False)
        _ev, lines = reader.feed_lines(CPU_LOG.read_bytes())
        screen.post_message(LogsArrived(LogBatch(tuple(lines[-40:]), own=reader.own_lines)))
        if panel:
            screen._set_panel(panel)
        await pilot.pause()

    return run_before


VIEWS: dict[str, Any] = {"sim": (story_app, _story), "real-engine": (cpu_app, _cpu)}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("size,panel", [((120, 40), None), ((80, 24), "processes")])
async def test_the_log_has_room_and_the_gpu_panel_is_whole(view: str, size: tuple[int, int], panel: str | None) -> None:
    make, before = VIEWS[view]
    app = make()
    async with app.run_test(size=size) as pilot:
        await before(panel)(pilot)
        await pilot.pause()
        lines = screen_lines(app)
        pane = app.screen.query_one(LogPane)
        if size == (120, 40):
            assert pane.content_region.height >= 10, pane.content_region
        gpu_rows = [ln for ln in lines if re.search(r"\bGPU\d+\s", ln) and "GiB" in ln and "pid" not in ln]
        if view == "sim":
            assert gpu_rows, "\n".join(lines)
        for row in gpu_rows:  # the power figure, whole (it read "pw…")
            assert re.search(r"(\d+ W|\?)\s*(│|$)", row.rstrip()) and "…" not in row, row


def test_story_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(story_app(), terminal_size=(120, 40), run_before=_story())


def test_story_gpu_panel_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(story_app(), terminal_size=(80, 24), run_before=_story("processes"))


def test_real_engine_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(cpu_app(), terminal_size=(120, 40), run_before=_cpu())


def test_real_engine_gpu_panel_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(cpu_app(), terminal_size=(80, 24), run_before=_cpu("processes"))
