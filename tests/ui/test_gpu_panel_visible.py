"""The GPU panel builds only the rows on screen: 16 GPUs (two nodes) and their processes in a box that
shows fewer, then scrolled. Its sparklines move every telemetry sample; at 64 ranks building every
row each second was most of the idle TUI's CPU."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.containers import VerticalScroll

from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.processes import GpuProcesses
from tests.ui.story import two_node_snapshot
from tests.ui.test_dashboard_snapshots import make_app


async def test_only_the_visible_gpu_rows_are_built() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        panel = screen.query_one(GpuProcesses)
        built: list[int] = []
        row = panel._row

        def counting_row(y: int) -> Text | None:
            built.append(y)
            return row(y)

        panel._row = counting_row  # type: ignore[method-assign]
        snap = two_node_snapshot()
        screen.apply_snapshot(snap)
        await pilot.pause()
        box = screen.query_one("#procs-box", VerticalScroll)
        rows = len(screen.gpu_history.traces) + max(1, len(snap.gpu_processes))
        assert len(screen.gpu_history.traces) == 16 and panel.virtual_size.height == rows
        visible = box.scrollable_content_region.height
        assert 0 < visible < rows
        assert set(built) <= set(range(visible)) and built  # the rows below the box were never built
        built.clear()
        box.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert max(built) == rows - 1 and min(built) >= rows - visible  # scrolled to: built then
        lines = [panel.render_line(y).text for y in range(rows)]
        # a narrow row drops its words ("mem ", "util ") before it would cut a figure
        assert lines[0].startswith("GPU0@") and "GiB" in lines[0] and "%" in lines[0], lines[0]
        assert all(ln.strip() for ln in lines)


async def test_rows_that_read_as_before_are_not_converted_again() -> None:
    """An idle server's rows read the same each second: their strips are reused, a changed row's is not."""
    from cockpit.ui.widgets import strips

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        snap = two_node_snapshot()
        screen.apply_snapshot(snap)
        await pilot.pause()
        screen.query_one(GpuProcesses).refresh()  # painted once more at the width the scrollbar leaves
        await pilot.pause()
        converted: list[str] = []
        to_strips = strips.Visual.to_strips

        def counting(widget, *args):  # type: ignore[no-untyped-def]
            converted.append(type(widget).__name__)
            return to_strips(widget, *args)

        strips.Visual.to_strips = counting  # type: ignore[method-assign]
        try:
            screen.query_one(GpuProcesses).refresh()
            screen.query_one("#bars").refresh()
            await pilot.pause()
            assert converted == []  # repainted, nothing converted again
            later = [dataclasses.replace(g, sampled_at=g.sampled_at + 1) for g in snap.gpus]
            later[0] = dataclasses.replace(later[0], used_gb=1.0)  # a new sample, GPU0's memory moved
            busy = dataclasses.replace(snap, taken_at=snap.taken_at + 1, gpus=tuple(later))
            screen.apply_snapshot(busy)
            await pilot.pause()
            assert "GpuProcesses" in converted  # GPU0's row changed: converted again
        finally:
            strips.Visual.to_strips = to_strips  # type: ignore[method-assign]


async def test_a_sample_repaints_only_the_gpu_rows_whose_sparklines_moved() -> None:
    """A sample moves the sparklines of the GPUs whose figures changed; the others read as before
    and are not repainted (the whole panel was, each second); rows off screen are marked."""
    from typing import Any

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        snap = two_node_snapshot()
        screen.apply_snapshot(snap)
        await pilot.pause()
        panel = screen.query_one(GpuProcesses)
        rows = len(screen.gpu_history.traces) + max(1, len(snap.gpu_processes))
        first, end = panel._rows_on_screen(rows) or (0, 0)
        assert first == 0 and 1 < end < rows
        # two samples that read the same fill every trace's first points alike
        for k in (1, 2):
            same = tuple(dataclasses.replace(g, sampled_at=g.sampled_at + k) for g in snap.gpus)
            screen.apply_snapshot(dataclasses.replace(snap, taken_at=snap.taken_at + k, gpus=same))
            await pilot.pause()
        repainted: list[Any] = []
        real = panel.refresh

        def refresh(*regions: Any, **kw: Any) -> Any:
            repainted.extend((r.y, r.height) for r in regions) if regions else repainted.append("all")
            return real(*regions, **kw)

        panel.refresh = refresh  # type: ignore[method-assign]
        later = [dataclasses.replace(g, sampled_at=g.sampled_at + 3) for g in snap.gpus]
        later[1] = dataclasses.replace(later[1], used_gb=1.0)  # GPU1 of the first node: row 1
        screen.apply_snapshot(dataclasses.replace(snap, taken_at=snap.taken_at + 3, gpus=tuple(later)))
        assert repainted == [(1, 1), (end, rows - end)]  # GPU1's row; the rows off screen marked
        await pilot.pause()
        assert "1.0/" in panel.render_line(1).text
