"""Issue 29 (the operator's words) and issue 27's second operator round in the TUI: the crash
dialog's numbers in words with units, advice `r` applies never offered again as "other", the
header fitted to its width by rule (`i` lists what it leaves out), clocks that keep running and a
stale /health marked stale, the history screen's run ids whole at 80 columns, no negative axis
on the token-usage plot."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from cockpit.core.findings import Finding, FlagChange
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.crash import CrashScreen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import AdviceChoiceScreen, ConfirmScreen
from tests.ui.screen_text import flat_text, screen_lines
from tests.ui.story import T0, story_log_lines, story_snapshot
from tests.ui.test_dashboard_snapshots import PROFILE

TWO_OVERRIDES = (FlagChange("--gpu-memory-utilization", 0.97, 0.95), FlagChange("--max-model-len", 32768, 16384))


def clocked_app() -> tuple[CockpitApp, list[float]]:
    now = [T0]
    return CockpitApp(profile=PROFILE, theme="dark", supervisor_factory=None, clock=lambda: now[0]), now


async def _settle(pilot: Any) -> None:
    for _ in range(4):
        await pilot.pause()


async def _dashboard(pilot: Any, snap: Any) -> DashboardScreen:
    screen = pilot.app.screen
    assert isinstance(screen, DashboardScreen)
    screen.query_one("#log").add_lines(story_log_lines())
    screen.apply_snapshot(snap)
    await _settle(pilot)
    return screen


def vllm_oom_finding() -> Finding:
    """The vLLM demo's finding as its backend makes it: the prediction carries `freed_gb_per_gpu`
    and `kv_gb`, which the dialog printed as `freed gb per gpu 1.58 · kv gb 40.72`."""
    return Finding(
        id="oom_crash", severity="critical", ranks=("TP1",),
        message="CUDA out of memory in prefill on TP1 (line 87); after start-up the worst rank (TP0) had only 3.68 GiB free.",
        changes=(FlagChange("--gpu-memory-utilization", 0.97, 0.95),),
        predicted={"freed_gb_per_gpu": 1.58, "headroom_gb": 5.26, "max_total_num_tokens": 333539, "kv_gb": 40.72},
    )


async def test_crash_dialog_says_numbers_in_words_with_units() -> None:
    base = story_snapshot(0.93, "ready", crashed=True)
    snap = dataclasses.replace(base, findings=(vllm_oom_finding(),))
    app, _now = clocked_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _dashboard(pilot, snap)
        assert isinstance(app.screen, CrashScreen)
        text = flat_text(app)
        assert "1.58 GiB freed per GPU" in text and "KV cache 40.72 GiB per GPU" in text, text
        assert "freed gb" not in text and "kv gb" not in text
        # the subtitle: the rank, the phase and the line in words, no internal kind name
        assert "TP3 · during prefill · log line 812" in text and "cuda_oom" not in text, text


async def test_other_advice_never_lists_the_change_r_applies() -> None:
    """Issue 29: the OOM and the low-headroom finding both carry `--mem-fraction-static 0.93 → 0.88`;
    `A` ("Other advice (not applied by r)") listed it, and `r` said "2 other change(s)" for one."""
    base = story_snapshot(0.93, "ready")
    low = base.findings[0]
    oom = dataclasses.replace(low, id="oom_crash", message="CUDA out of memory in prefill on TP3.")
    ctx = Finding(id="kv_pool_smaller_than_context", severity="warning",
                  message="The KV pool holds 58,368 tokens, fewer than --context-length 262,144.",
                  changes=(FlagChange("--context-length", None, 58368),))
    snap = dataclasses.replace(base, findings=(oom, low, ctx))
    app, _now = clocked_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap)
        await pilot.press("r")
        await _settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        body = flat_text(app)
        assert "Not included: 1 other change; A lists it with its reason." in body, body
        await pilot.press("n")
        await _settle(pilot)
        await pilot.press("A")
        await _settle(pilot)
        assert isinstance(app.screen, AdviceChoiceScreen)
        assert [f.id for f in app.screen.findings] == ["kv_pool_smaller_than_context"]
        assert "--mem-fraction-static" not in flat_text(app)


async def test_header_keeps_two_overrides_whole_at_120_columns() -> None:
    """Issue 27/29: `· gpu-memor…` — two overrides cut the header at 120 columns."""
    snap = dataclasses.replace(story_snapshot(0.88, "ready", restarted=True), flag_diff=TWO_OVERRIDES)
    app, _now = clocked_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _dashboard(pilot, snap)
        first = screen_lines(app)[0]
        # both whole, by the rule: the readiness source gave way, then the `(profile …)` parts
        assert "gpu mem util 0.95" in first and "max-model-len 16384" in first, first
        assert "…" not in first and "READY" in first


async def test_header_at_80_columns_abbreviates_by_rule_and_i_lists_the_rest() -> None:
    snap = dataclasses.replace(story_snapshot(0.88, "ready", restarted=True), flag_diff=TWO_OVERRIDES)
    app, _now = clocked_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _dashboard(pilot, snap)
        first = screen_lines(app)[0]
        assert "READY" in first and re.search(r"READY +\d\d:\d\d:\d\d", first), first  # the phase and its clock always stay
        assert "+1 more (i)" in first and "gpu mem util 0.95" in first and "…" not in first, first
        await pilot.press("i")
        await _settle(pilot)
        said = " ".join(n.message for n in app._notifications)
        assert "--gpu-memory-utilization 0.95 (profile 0.97)" in said and "--max-model-len 16384 (profile 32768)" in said


async def test_after_a_crash_the_clock_runs_and_a_stale_health_is_marked() -> None:
    """Issue 29: after a crash the header froze at `CRASHED 00:00:00` with `/health 200` (the probe
    stops with the server: its last answer is history, not news)."""
    base = story_snapshot(0.93, "ready", crashed=True)
    snap = dataclasses.replace(base, health="200", progress="")
    app, now = clocked_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _dashboard(pilot, snap)
        await pilot.press("escape")
        await _settle(pilot)
        now[0] += 7
        screen._tick()
        await _settle(pilot)
        lines = screen_lines(app)
        assert "CRASHED  00:00:07" in lines[0], lines[0]
        assert "last /health 200 (stale: the run ended)" in lines[1] and " · /health 200" not in lines[1], lines[1]


async def test_token_usage_axis_never_runs_below_zero() -> None:
    """Issue 27: the token-usage plot's y axis ran to −0.33 for a usage of 0."""
    from cockpit.core.state import SeriesPoint

    base = story_snapshot(0.88, "ready")
    state = base.state.copy()
    state.token_usage = [SeriesPoint(ts=f"11:56:{k:02d}", value=0.0) for k in range(30)]
    snap = dataclasses.replace(base, state=state)
    app, _now = clocked_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _dashboard(pilot, snap)
        plot = screen.query_one("#plot-usage")
        await pilot.pause(0.6)  # past the plot's redraw interval
        region = plot.region
        rows = [ln[region.x:region.x + region.width] for ln in screen_lines(app)[region.y:region.y + region.height]]
        assert any("0.0" in r for r in rows), rows
        assert not any("-0." in r or "−0." in r for r in rows), rows


async def test_no_lone_scrollbar_glyphs_beside_panels_or_under_the_log() -> None:
    """Issue 27: at 120×40 a lone `▊` row under five log lines, `▇▇`/`▂▂` beside the GPU panel and
    the plots: the horizontal bar of the log and two-column bars of panels that take no focus."""
    snap = story_snapshot(0.93, "ready")
    app, _now = clocked_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _dashboard(pilot, snap)
        log = screen.query_one("#log")
        assert log.styles.scrollbar_size_horizontal == 0
        for box in ("#procs-box", "#timeline-box"):
            assert screen.query_one(box).styles.scrollbar_size_vertical == 0
        assert screen.query_one("#advice-box").styles.scrollbar_size_vertical == 1
        bottom = screen_lines(app)[log.region.y + log.region.height - 1]
        assert bottom.strip() and not set(bottom.strip()) <= set("▉▊▋▌▍▎▏ "), bottom


async def test_history_at_80_columns_shows_run_ids_whole(tmp_path: Path) -> None:
    """Issue 29: at 80×24 the history's comparison cut run ids to `20261201-14`; `v` swaps the plot in."""
    from textual.app import App
    from textual.widgets import DataTable

    from cockpit.journal import Journal
    from cockpit.ui.screens.history import HistoryScreen
    from tests.journal.helpers import crashed_state, run_info

    path = tmp_path / "journal.sqlite3"
    run_id = "20261201-152926-dfa5"
    with Journal.open(path) as j:
        j.record_start(run_info(run_id, profile="demo-vllm", started_at="2026-12-01T15:29:27+00:00"), "demo-vllm",
                       {"model": "Qwen/Qwen3-32B", "gpu-memory-utilization": 0.97, "max-model-len": 32768})
        j.record_end(run_id, "crashed", crashed_state(), [])

    class HistoryApp(App[None]):
        def on_mount(self) -> None:
            self.push_screen(HistoryScreen("demo-vllm", journal_path=path))

    app = HistoryApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        for _ in range(100):
            await pilot.pause(0.02)
            if screen.runs:
                break
        await _settle(pilot)
        compare = screen.query_one("#history-compare", DataTable)
        assert compare.region.width > 0
        text = "\n".join(screen_lines(app))
        header_row = screen_lines(app)[compare.region.y]
        assert run_id in header_row, text
        assert "v the throughput plot" in text
        await pilot.press("v")
        await _settle(pilot)
        assert screen.query_one("#history-plot").display and not screen.query_one("#history-compare-side").display


# ---- snapshots at 80×24 and 120×40 (frozen clock; docs/TUI.md shows them) ----

def _feed(snap: Any, keys: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    async def run_before(pilot: Any) -> None:
        await _dashboard(pilot, snap)
        if keys:
            await pilot.press(*keys)
            await _settle(pilot)

    return run_before


def _crash_snapshot() -> Any:
    return story_snapshot(0.93, "ready", crashed=True)


def _two_overrides() -> Any:
    return dataclasses.replace(story_snapshot(0.88, "ready", restarted=True), flag_diff=TWO_OVERRIDES)


def test_crash_modal_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app, _now = clocked_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=_feed(_crash_snapshot()))


def test_header_two_overrides_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app, _now = clocked_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=_feed(_two_overrides()))


def test_header_two_overrides_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app, _now = clocked_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=_feed(_two_overrides()))


def _history_app(tmp_path: Path) -> Any:
    from cockpit.core.state import SeriesPoint
    from cockpit.journal import Journal
    from cockpit.ui.screens.history import HistoryScreen
    from tests.journal.helpers import crashed_state, ready_state, run_info

    path = tmp_path / "journal.sqlite3"
    flags = {"model-path": "/models/Kimi-K2.5", "tp": 8}
    with Journal.open(path) as j:
        j.record_start(run_info("20261129-115402-a931", profile="demo", started_at="2026-11-29T11:54:02+00:00"), "demo",
                       {**flags, "mem-fraction-static": 0.93})
        j.record_end("20261129-115402-a931", "crashed", crashed_state(), [])
        st = ready_state()
        for i in range(50):
            st.gen_throughput.append(SeriesPoint(ts=f"2026-11-29 12:14:{i:02d}", value=2500.0 + 10 * i))
        j.record_start(run_info("20261129-120000-b882", profile="demo", started_at="2026-11-29T12:00:00+00:00"), "demo",
                       {**flags, "mem-fraction-static": 0.88})
        j.record_end("20261129-120000-b882", "stopped", st, [])

    class HistoryApp(CockpitApp):  # Cockpit's own stylesheet and theme, the history screen alone
        def on_mount(self, event: Any) -> None:
            event.prevent_default()  # not the picker behind it: CockpitApp's own on_mount is skipped
            self.push_screen(HistoryScreen("demo", journal_path=path))

    return HistoryApp(supervisor_factory=None, theme="dark")


async def _history_loaded(pilot: Any) -> None:
    for _ in range(200):
        await pilot.pause(0.02)
        if getattr(pilot.app.screen, "runs", None):
            break
    await pilot.press("space", "down", "space")  # both runs, side by side
    await _settle(pilot)


def test_history_80x24(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_history_app(tmp_path), terminal_size=(80, 24), run_before=_history_loaded)


def test_history_120x40(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_history_app(tmp_path), terminal_size=(120, 40), run_before=_history_loaded)


async def test_the_crash_subtitle_fits_80_columns_whole() -> None:
    """Issue 27: the header's crash line (`… exited: exit code 137: SIGKILL from the server's own
    clean…`) was cut at 120 columns, and at 80 too: by rule it sheds the pid, then words, never the run id."""
    base = story_snapshot(0.93, "ready", crashed=True)
    snap = dataclasses.replace(base, progress="the server on local exited with code 137")
    for size in ((80, 24), (120, 40)):
        app, _now = clocked_app()
        async with app.run_test(size=size) as pilot:
            await _dashboard(pilot, snap)
            await pilot.press("escape")
            await _settle(pilot)
            second = screen_lines(app)[1]
            assert "run 20261129-115402-demo" in second and "exit code 137 (the server's own cleanup)" in second, second
            assert "…" not in second, second
