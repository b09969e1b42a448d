"""Issue 28, the idle dashboard: a snapshot a second (telemetry at 1 Hz, the engine's /metrics every
2 s) must repaint what changed, not lay out the whole screen. Each full layout pass walks every
widget of the dashboard; the serving line's `Static.update` asked for one per snapshot, which was
most of the idle 64-rank TUI's CPU (bench/ui.py --only idle)."""

from __future__ import annotations

import dataclasses
from typing import Any

from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.groups import GroupsStrip, GroupSummary
from cockpit.ui.widgets.serving import ServingFigures
from tests.ui.layouts import count_layout_passes
from tests.ui.screen_text import screen_text
from tests.ui.story import T0, story_snapshot
from tests.ui.test_dashboard_snapshots import make_app

SERVING = {"gen_tok_s": 812.5, "prompt_tok_s": 40.0, "running": 3, "waiting": 0, "kv_usage_pct": 41.0,
           "preemptions_per_min": 0.0, "ttft_ms": {"p50": 120.0, "p99": 410.0, "count": 9},
           "itl_ms": None, "source": "/metrics"}


async def test_new_serving_figures_repaint_their_line_without_a_layout_pass(monkeypatch: Any) -> None:
    passes = count_layout_passes(monkeypatch)
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        first = dataclasses.replace(story_snapshot(0.88, "ready"), taken_at=T0, serving=SERVING)
        screen.apply_snapshot(first)
        await pilot.pause(0.3)  # the line appears: that one lays out (it was display: none)
        passes.clear()
        for i in range(1, 6):
            snap = dataclasses.replace(first, taken_at=T0 + i, serving={**SERVING, "gen_tok_s": 800.0 + i})
            screen.apply_snapshot(snap)
            await pilot.pause(0.1)
            assert f"gen {800.0 + i:.1f} tok/s" in screen_text(app)  # the new figure is on screen
        assert passes == []
        # the same snapshot again changes nothing at all
        screen.apply_snapshot(snap)
        await pilot.pause(0.1)
        assert passes == []
        assert "gen 805.0 tok/s" in str(screen.query_one(ServingFigures).render())


async def test_the_groups_strip_lays_out_only_when_its_height_changes(monkeypatch: Any) -> None:
    prefill = GroupSummary("prefill", "pd.prefill", "ready", 8, 6.5, "KV pool", "r1")
    decode = GroupSummary("decode", "pd.decode", "ready", 8, 4.0, "capture", "r2")
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        strip = GroupsStrip("prefill", [prefill])
        await app.screen.mount(strip)
        await pilot.pause()
        layouts: list[bool] = []
        real = strip.update

        def update(content: Any = "", *, layout: bool = True) -> None:
            layouts.append(layout)
            real(content, layout=layout)

        monkeypatch.setattr(strip, "update", update)
        strip.show(prefill)  # the same summary: nothing to paint
        assert layouts == []
        strip.show(dataclasses.replace(prefill, headroom_gb=5.25))  # new words, same height
        assert layouts == [False]
        await pilot.pause()
        assert "headroom 5.2 GiB after KV pool" in strip.text()
        strip.show(decode)  # a second group's line: taller, the panels below move
        assert layouts == [False, True]


def _refreshes(monkeypatch: Any, widget: Any) -> list[dict[str, Any]]:
    """The refreshes `widget` asks for from here on (read right after a synchronous call: nothing
    else runs in between)."""
    calls: list[dict[str, Any]] = []
    real = widget.refresh

    def refresh(*regions: Any, **kw: Any) -> Any:
        calls.append(kw)
        return real(*regions, **kw)

    monkeypatch.setattr(widget, "refresh", refresh)
    return calls


async def test_the_clock_repaints_the_ranks_only_when_the_samples_stop(monkeypatch: Any) -> None:
    """The dashboard's 1 Hz clock and the 1 Hz telemetry samples run at any phase to each other:
    a tick less than a second after a snapshot's paint shows nothing new (ages are whole seconds)."""
    from cockpit.ui.widgets.rankbars import RankBars

    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        bars = screen.query_one(RankBars)
        snap = dataclasses.replace(story_snapshot(0.88, "ready"), taken_at=T0)
        screen.apply_snapshot(snap)
        await pilot.pause()
        asked: list[float] = []
        monkeypatch.setattr(bars, "_refresh_changed_rows", lambda: asked.append(bars._now))
        painted_at = bars._now
        bars.tick(painted_at + 0.7)  # the clock between two samples
        assert asked == []
        bars.show(snap, painted_at + 1.0, bars._policy)  # the next sample looks
        assert asked == [painted_at + 1.0]
        bars.tick(painted_at + 1.9)
        assert len(asked) == 1
        bars.tick(painted_at + 2.4)  # no sample for 1.4 s: the ages count up on the clock
        bars.tick(painted_at + 3.4)
        assert asked == [painted_at + 1.0, painted_at + 2.4, painted_at + 3.4]


async def test_a_sample_repaints_only_the_rank_rows_that_read_differently(monkeypatch: Any) -> None:
    """16 ranks and 2 hosts in a box that shows a few: an identical sample repaints no row on
    screen; a rank whose memory moved repaints its own row; rows off screen are marked, and show
    the new figures once scrolled to."""
    from textual.containers import VerticalScroll

    from cockpit.ui.widgets.rankbars import RankBars
    from tests.ui.story import two_node_snapshot

    def moved(snap: Any, rank_index: int, used: float) -> Any:
        gpus = tuple(dataclasses.replace(g, used_gb=used) if i == rank_index else g for i, g in enumerate(snap.gpus))
        return dataclasses.replace(snap, gpus=gpus)

    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        snap = two_node_snapshot()
        screen.apply_snapshot(snap)
        await pilot.pause(0.2)
        bars = screen.query_one(RankBars)
        first, end = bars._rows_on_screen(bars._row_count()) or (0, 0)
        assert first == 0 and 3 < end <= 18  # the headings and some ranks on screen; TP15 (row 18) is not
        rows: list[tuple[int, int]] = []
        real = bars.refresh

        def refresh(*regions: Any, **kw: Any) -> Any:
            rows.extend((r.y, r.height) for r in regions)
            if not regions:
                rows.append((-1, -1))  # the whole widget
            return real(*regions, **kw)

        monkeypatch.setattr(bars, "refresh", refresh)
        screen.apply_snapshot(snap)
        assert rows == [(end, 21 - end)]  # nothing on screen repainted; the rest marked
        rows.clear()
        screen.apply_snapshot(moved(snap, 1, 60.0))  # TP1 is row 3, under node 0's line
        assert rows == [(3, 1), (end, 21 - end)]
        await pilot.pause(0.1)
        assert "60.0/" in screen_text(app)
        rows.clear()
        last = 15  # TP15, row 18: off screen
        screen.apply_snapshot(moved(moved(snap, 1, 60.0), last, 33.3))
        assert rows == [(end, 21 - end)]
        screen.query_one("#bars-box", VerticalScroll).scroll_end(animate=False)
        await pilot.pause(0.2)
        assert "33.3/" in screen_text(app)


async def test_the_header_repaints_only_when_its_words_change(monkeypatch: Any) -> None:
    from cockpit.ui.widgets.header import RunHeader

    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        snap = dataclasses.replace(story_snapshot(0.88, "ready"), taken_at=T0)
        screen.apply_snapshot(snap)
        await pilot.pause()
        header = screen.query_one(RunHeader)
        before = header.render().plain
        calls = _refreshes(monkeypatch, header)
        header.tick(header._now)  # the clock, the same second: the same words
        header.show(header._snapshot, header._phase_since, header._now, header._note)
        assert calls == []
        header.show(header._snapshot, header._phase_since, header._now, "restarted")  # news: repaint
        assert len(calls) == 1
        await pilot.pause()
        assert "restarted" in header.render().plain and header.render().plain != before


async def test_a_row_joined_again_from_kept_strips_is_the_row_converted_whole() -> None:
    """The strip cache keeps a row's joined strip by its halves: on an idle rank the age alternates
    "0 s"/"1 s", and each paint must show exactly what converting the whole row would."""
    from rich.text import Text
    from textual.visual import Visual, visualize

    from cockpit.ui.widgets.rankbars import RankBars
    from cockpit.ui.widgets.strips import StripCache

    app = make_app()
    async with app.run_test(size=(140, 45)):
        bars = app.screen.query_one(RankBars)
        cache = StripCache()
        width = 60
        for age in ("0 s", "1 s", "0 s", "1 s", "7 s", "0 s"):
            row = Text(no_wrap=True, overflow="crop")
            row.append("TP3  ", style="bold")
            row.append("████▒▒░░", style="green")
            row.append(" 71.2/79.6 GiB", style="")
            row.append(f" {age:>5}", style="dim")
            got = cache.strip(bars, 3, row, width, tail=6)
            whole = Visual.to_strips(bars, visualize(bars, row, markup=False), width, 1, bars.visual_style)[0]
            assert list(got) == list(whole), age
        # the same halves again: the very strip of the last paint, not a new one
        assert cache.strip(bars, 3, row, width, tail=6) is got


def test_a_samples_age_is_under_two_seconds_then_whole_seconds() -> None:
    """Tenths (and 0s/1s) changed every rank's row on every snapshot (and repainted it) while
    saying nothing about freshness: samples come once a second, 0 to ~1.5 s old when shown."""
    from cockpit.ui.format import UNKNOWN, sample_age

    assert [sample_age(s) for s in (0.0, 0.4, 1.0, 1.99, 2.0, 9.4, 59.9)] == ["<2s", "<2s", "<2s", "<2s", "2s", "9s", "59s"]
    assert sample_age(-0.2) == "<2s"  # a clock a little behind the agent's
    assert sample_age(61) == "1m01s" and sample_age(None) == UNKNOWN


async def test_a_snapshot_that_reads_the_same_does_not_rebuild_a_row(monkeypatch: Any) -> None:
    """Between telemetry samples the dashboard gets snapshots for the engine's /metrics and the
    /health probe; a new sample may read as the last (same memory, same whole-second age)."""
    from cockpit.ui.widgets.rankbars import RankBars

    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        snap = dataclasses.replace(story_snapshot(0.88, "ready"), taken_at=T0)
        bars = screen.query_one(RankBars)
        bars.show(snap, T0, bars._policy)  # the first: rows appear, a layout
        await pilot.pause()
        bars.show(snap, T0, bars._policy)  # the rows on screen looked at once
        built: list[int] = []
        real = bars._row
        monkeypatch.setattr(bars, "_row", lambda y: built.append(y) or real(y))
        resampled = dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, sampled_at=g.sampled_at + 0.3) for g in snap.gpus))
        bars.show(resampled, T0 + 0.3, bars._policy)  # ages 0.4 s → 0.4 s: "<2s" both
        bars.show(snap, T0 + 1.2, bars._policy)  # the /metrics snapshot, the same samples 1.6 s old
        assert built == []
        bars.show(snap, T0 + 1.7, bars._policy)  # the samples 2.1 s old: "2s" — every rank row
        assert len(built) >= 8
        built.clear()
        moved = dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, util_pct=12.0) for g in snap.gpus))
        bars.show(moved, T0 + 0.7, bars._policy)
        assert len(built) >= 8
        await pilot.pause()
        assert "12%" in str(screen_text(app))


async def test_a_hosts_ram_moving_by_kilobytes_rebuilds_no_row(monkeypatch: Any) -> None:
    """The host's available RAM moves by a few kilobytes every sample; its row shows whole GB."""
    from cockpit.ui.widgets.rankbars import RankBars
    from tests.ui.story import two_node_snapshot

    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        bars = app.screen.query_one(RankBars)
        snap = two_node_snapshot()
        bars.show(snap, T0, bars._policy)
        await pilot.pause()
        bars.show(snap, T0, bars._policy)
        built: list[int] = []
        real = bars._row
        monkeypatch.setattr(bars, "_row", lambda y: built.append(y) or real(y))
        hosts = tuple(dataclasses.replace(h, mem_available_gb=h.mem_available_gb - 0.00002) for h in snap.hosts)
        bars.show(dataclasses.replace(snap, hosts=hosts), T0, bars._policy)
        assert built == []
        hosts = tuple(dataclasses.replace(h, mem_available_gb=h.mem_available_gb - 30) for h in snap.hosts)
        bars.show(dataclasses.replace(snap, hosts=hosts), T0, bars._policy)  # 30 GB more used: shown
        assert built
        app.screen.query_one("#bars-box").scroll_end(animate=False)  # the host rows end the box
        await pilot.pause()
        assert "79/449 GB RAM used" in screen_text(app)
