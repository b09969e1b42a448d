"""Pilot tests of the dashboard's keys on the Kimi story (snapshots and log lines fed directly:
domain data, not a stand-in for I/O). The flows against the real supervisor are in test_flows.py."""

from __future__ import annotations

from cockpit.supervisor.api import LogLine
from cockpit.ui.screens.crash import CrashScreen, parse_flag_edits
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import HelpScreen, QuitScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.story import story_log_lines, story_snapshot
from tests.ui.test_dashboard_snapshots import make_app


async def _ready(pilot, snap=None) -> DashboardScreen:  # type: ignore[no-untyped-def]
    screen = pilot.app.screen
    assert isinstance(screen, DashboardScreen)
    screen.query_one(LogPane).add_lines(story_log_lines())
    screen.apply_snapshot(snap or story_snapshot(0.93, "ready"))
    await pilot.pause()
    return screen


async def test_filter_presets_rank_focus_and_regex() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        assert len(pane.shown_lines) == 44
        await pilot.press("m")
        shown = pane.shown_lines
        assert shown and all(("avail mem" in ln.text or "Capture" in ln.text) for ln in shown)
        assert not any("Decode batch" in ln.text for ln in shown)
        await pilot.press("b")
        assert all("Decode batch" in ln.text for ln in pane.shown_lines)
        await pilot.press("a", "4")  # digit 4 = the fourth rank, TP3
        assert screen.rank_focus == "TP3"
        assert {ln.rank for ln in pane.shown_lines} == {"TP3"}
        await pilot.press("0")
        assert screen.rank_focus is None
        await pilot.press("ampersand")  # & filters (as in less); / searches
        await pilot.press(*"avail mem=0\\.8[37]")
        await pilot.press("enter")
        texts = [ln.text for ln in pane.shown_lines]
        assert len(texts) == 2 and all("TP3" in t or "TP7" in t for t in texts)
        assert "/avail mem=0\\.8[37]/" in str(pane.border_title)
        await pilot.press("f")  # cycles back to the presets
        assert screen.filter_spec == "memory"


async def test_bad_regex_is_refused_with_a_message() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _ready(pilot)
        await pilot.press("ampersand", "(", "enter")
        assert screen.filter_spec == "all"
        assert any("(" in n.message for n in app._notifications)


async def test_pause_counts_new_lines_and_end_follows() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        await pilot.press("p")
        assert pane.paused
        pane.add_lines([LogLine(100 + i, "TP0", f"[2026-11-29 11:57:{i:02d} TP0] Decode batch. #running-req: 1") for i in range(5)])
        await pilot.pause()
        assert pane.new_lines == 5
        assert "5 new lines" in str(pane.border_title)
        await pilot.press("end")
        assert not pane.paused and pane.new_lines == 0
        assert pane.scroll_y == pane.max_scroll_y


async def test_log_ring_buffer_is_bounded() -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await _ready(pilot)
        pane = screen.query_one(LogPane)
        cap = pane.model.lines.maxlen
        assert cap is not None
        pane.add_lines([LogLine(i, None, f"line {i}") for i in range(cap + 500)])
        await pilot.pause()
        assert len(pane.model.lines) == cap
        assert pane.total_seen == cap + 500 + 44


async def test_crash_modal_proposes_the_change_and_edit_prefills() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        await _ready(pilot, story_snapshot(0.93, "ready", crashed=True))
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, CrashScreen)
        assert modal.proposal is not None
        assert "--mem-fraction-static 0.93 → 0.88" in str(modal.query_one("#crash-diff").render())
        await pilot.press("e")
        edit = modal.query_one("#crash-edit")
        assert edit.value == "mem-fraction-static=0.88"  # type: ignore[attr-defined]
        await pilot.press("escape")  # leaves the editor
        assert app.screen is modal
        await pilot.press("escape")  # dismisses
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("c")  # and it can be opened again
        assert isinstance(app.screen, CrashScreen)


def test_flag_edits_are_typed_and_checked() -> None:
    changes = parse_flag_edits("mem-fraction-static=0.88 --hicache-size=48", {"mem-fraction-static": 0.93})
    assert [c.as_diff() for c in changes] == ["--mem-fraction-static 0.93 → 0.88", "--hicache-size unset → 48"]


async def test_quit_asks_and_escape_cancels() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_help_theme_and_palette() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {row[0] for row in app.screen.rows}
        assert {"q", "f / m e b a", "r / R", "1–8, 0", "t", "?, F1"} <= keys  # the one key table (test_key_table.py)
        await pilot.press("escape")
        assert app.theme == "cockpit-dark"
        await pilot.press("t")
        assert app.theme == "cockpit-light"
        await pilot.press("t")
        assert app.theme == "cockpit-high-contrast"
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for want in ("Quit", "Filter", "Restart", "Stop", "History", "Theme", "Help"):
            assert want in titles


async def test_too_small_says_so_and_recovers() -> None:
    app = make_app()
    async with app.run_test(size=(59, 15)) as pilot:
        screen = await _ready(pilot)
        msg = screen.query_one("#too-small")
        assert msg.display and "needs at least 60×16" in str(msg.render())
        assert not screen.query_one("#body").display
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert screen.query_one("#body").display and not msg.display
        assert screen.has_class("-narrow")
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert screen.has_class("-wide")


async def test_history_key_opens_history_or_says_unavailable() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        await pilot.press("h")
        await pilot.pause()
        try:
            from cockpit.ui.screens.history import HistoryScreen
        except ImportError:
            assert any("history not available" in n.message for n in app._notifications)
        else:
            assert isinstance(app.screen, HistoryScreen)


async def test_compact_layout_cycles_panels_with_v() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _ready(pilot)
        assert screen.has_class("-narrow")
        assert screen.query_one("#advice-box").display
        await pilot.press("v")
        assert screen.panel == "plots" and screen.query_one("#plots-box").display
        assert not screen.query_one("#advice-box").display
        await pilot.press("v", "v")
        assert screen.panel == "processes" and screen.query_one("#procs-box").display
        await pilot.press("v")
        assert screen.panel == "advice"


async def test_relaunch_from_history_asks_with_the_flag_diff() -> None:
    from cockpit.ui.screens.dialogs import ConfirmScreen

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        # the history screen's RelaunchRequested carries flags, profile and run_id
        msg = type("RelaunchRequested", (), {})()
        msg.flags = {"mem-fraction-static": 0.88, "tp": 8}  # type: ignore[attr-defined]
        msg.profile = "demo"  # type: ignore[attr-defined]
        msg.run_id = "r1"  # type: ignore[attr-defined]
        app.on_relaunch_requested(msg)
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "--mem-fraction-static 0.93 → 0.88" in app.screen.body and "tp" not in app.screen.body.split(":")[-1]
        await pilot.press("n")
        assert isinstance(app.screen, DashboardScreen)


async def test_idle_dashboard_costs_little_cpu() -> None:
    import time

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _ready(pilot)
        await pilot.pause(0.5)
        cpu0, wall0 = time.process_time(), time.monotonic()
        await pilot.pause(3.0)
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - wall0
        assert cpu < 0.25 * wall, f"{cpu:.2f} s of CPU in {wall:.1f} s idle"


async def test_crash_edit_refuses_an_unknown_flag_before_anything_stops() -> None:
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        await _ready(pilot, story_snapshot(0.93, "ready", crashed=True))
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, CrashScreen)
        await pilot.press("e")
        edit = modal.query_one("#crash-edit")
        edit.value = "mem-fraction-statik=0.88"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is modal, "a refused edit keeps the modal open"
        assert any("mem-fraction-statik" in n.message for n in app._notifications)
        edit.value = "mem-fraction-static=0.87"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        # accepted: the modal closes and a restart is attempted (no supervisor in this test)
        assert isinstance(app.screen, DashboardScreen)
        assert any("nothing to restart" in n.message for n in app._notifications)
