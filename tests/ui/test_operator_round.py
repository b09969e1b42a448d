"""Issue 17, the operator's round: the TUI defects a first-time operator hit, each read off the
screen as the operator sees it (Pilot, the story's snapshots, a frozen clock)."""

from __future__ import annotations

import dataclasses
from typing import Any

from cockpit.core.findings import Finding, FlagChange
from cockpit.supervisor.api import GpuProcess, RunSnapshot
from cockpit.ui.messages import ActionDone, LeftoversFound
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import ConfirmScreen, QuitScreen
from tests.ui.screen_text import flat_text, screen_lines, screen_text
from tests.ui.story import story_log_lines, story_snapshot
from tests.ui.test_dashboard_snapshots import make_app


async def _dashboard(pilot: Any, snap: RunSnapshot, logs: bool = True) -> DashboardScreen:
    screen = pilot.app.screen
    assert isinstance(screen, DashboardScreen)
    if logs:
        screen.query_one("#log").add_lines(story_log_lines())
    screen.apply_snapshot(snap)
    await _settle(pilot)
    return screen


async def _settle(pilot: Any) -> None:
    """A message, then the screen it may push, then that screen's first paint."""
    for _ in range(4):
        await pilot.pause()


def _rank_row(lines: list[str], rank: str) -> str:
    return next(ln for ln in lines if ln.strip().startswith(rank + " "))


def _with_used(snap: RunSnapshot, used: float | None) -> RunSnapshot:
    return dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, used_gb=used) for g in snap.gpus))


async def test_bars_follow_used_after_a_crash_released_the_memory() -> None:
    """Defect 4: after a crash the bars stayed full while USED read 0.0."""
    snap = _with_used(story_snapshot(0.93, "ready", crashed=True), 0.0)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap)
        await pilot.press("escape")  # the crash modal
        await pilot.pause()
        row = _rank_row(screen_lines(app), "TP3")
        assert "0.0/95.0 GiB" in row
        assert "█" not in row and "▓" not in row, row
        assert "●" not in row  # the ended run's after-capture figure is greyed, without a policy dot


async def test_bars_show_memory_while_loading() -> None:
    """Defect 4: while loading the bars were empty while USED read 0.5."""
    snap = _with_used(story_snapshot(0.93, "loading"), 0.5)
    for r in snap.state.ranks.values():
        r.weights_gb = None
        r.kv_gb = None
        r.graph_gb = None
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap, logs=False)
        row = _rank_row(screen_lines(app), "TP0")
        assert "0.5/95.0 GiB" in row
        assert "▚" in row, row


async def test_after_capture_column_is_named_and_units_are_gib() -> None:
    """Defects 5 and 12: HEADROOM (an after-capture figure) beside USED looked like live free
    memory; GiB values were labelled GB; the prediction had one decimal beside two."""
    for size, heading in (((160, 48), "AFTER CAPTURE"), ((80, 24), "@CAPTURE")):
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await _dashboard(pilot, story_snapshot(0.93, "ready"))
            text = screen_text(app)
            assert heading in text and "HEADROOM" not in text
            assert "94.2/95.0 GiB" in text and "0.82 GiB ●" in text
            assert " GB ●" not in text and "/95.0 GB" not in text
            if size[0] == 160:
                assert "predicted 5.50 GiB free per rank" in text


async def test_80x24_shows_the_whole_legend_and_the_gpu_column() -> None:
    """Defect 6: at 80×24 the legend lost ░free and the GPU % column disappeared."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _dashboard(pilot, story_snapshot(0.93, "ready"))
        lines = screen_lines(app)
        heading = next(ln for ln in lines if ln.strip().startswith("RANK"))
        assert "░free" in heading and "GPU" in heading
        assert "96%" in _rank_row(lines, "TP0")
        assert "/health 200" in lines[1]


async def test_leftovers_after_restart_unchanged_do_not_mention_a_change() -> None:
    """Defect 8: after R the leftover dialog asked to launch "with the change"."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _dashboard(pilot, story_snapshot(0.93, "ready"))
        leftover = (GpuProcess(host="local", pid=4412, gpu_index=3, used_gb=0.4, belongs_to_run=False),)
        screen.post_message(LeftoversFound(leftover, ()))
        await _settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        text = flat_text(app)
        assert "launch again unchanged" in text and "with the change" not in text
        assert "0.4 GiB" in text
        await pilot.press("n")
        screen.post_message(LeftoversFound(leftover, (FlagChange("--mem-fraction-static", 0.93, 0.88),)))
        await _settle(pilot)
        assert "launch with --mem-fraction-static 0.93 → 0.88" in flat_text(app)


async def test_stop_on_a_crashed_run_says_stopped_once() -> None:
    """Defect 9: after s on a crashed run the status line read `stopped · stopped`."""
    snap = dataclasses.replace(story_snapshot(0.93, "ready", crashed=True), progress="stopped")
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _dashboard(pilot, snap)
        await pilot.press("escape")
        screen.post_message(ActionDone("stop"))
        await _settle(pilot)
        second = screen_lines(app)[1]
        assert second.count("stopped") == 1, second


async def test_quit_dialog_names_the_command_that_attaches() -> None:
    """Defect 11: the quit dialog said `cockpit status` attaches; `cockpit tui PROFILE` does."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, story_snapshot(0.93, "ready"))
        app.push_screen(QuitScreen("demo", running=True))
        await _settle(pilot)
        text = flat_text(app)
        assert "`cockpit tui demo` attaches" in text
        assert "`cockpit status demo` reports" in text


async def test_exit_137_after_a_cuda_oom_is_said_in_words() -> None:
    """Defect 13: "exit code 137" for a CUDA OOM read like the kernel's OOM killer."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, story_snapshot(0.93, "ready", crashed=True))
        text = flat_text(app)
        assert "exit code 137: SIGKILL from the server's own cleanup" in text
        assert "not the kernel's OOM killer" in text


async def test_header_shows_uptime_phase_age_run_id_and_pid_at_once() -> None:
    """UX: the header timer reset at every phase; line 2 said only "starting" for ~20 s."""
    snap = dataclasses.replace(story_snapshot(0.93, "loading"), progress="starting", health=None)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap, logs=False)
        first, second = screen_lines(app)[:2]
        assert "up 00:07:58" in first
        assert second.strip().startswith("run 20261129-115402-demo · pid 40999 · sglang 0.5.9 · starting")


async def test_advice_dedupes_and_reconciles_opposite_changes() -> None:
    """UX: diagnose printed the OOM and low-headroom advice twice with identical text, and "higher
    --mem-fraction-static" sat beside "lower 0.93 → 0.88" without a word."""
    base = story_snapshot(0.93, "ready")
    low = base.findings[0]
    twin = dataclasses.replace(low, id="oom_crash")
    ctx = Finding(id="kv_pool_smaller_than_context", severity="warning",
                  message="The KV pool holds fewer tokens than --context-length.",
                  changes=(FlagChange("--mem-fraction-static", 0.93, 0.95),))
    snap = dataclasses.replace(base, findings=(low, twin, ctx))
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap)
        text = screen_text(app)
        assert text.count("free after CUDA graph capture (target") == 1
        assert "opposite to the change above (--mem-fraction-static 0.93 → 0.88)" in text


async def test_footer_shows_whole_hints_chosen_for_the_width() -> None:
    """Defect 6: at 80×24 the footer ended in a stray `Commandst` and cut `v`, History and Theme."""
    from cockpit.ui.widgets.keyhints import HINTS

    labels = {f"{k} {label}" for k, label, _p in HINTS}
    for size in ((80, 24), (160, 48)):
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await _dashboard(pilot, story_snapshot(0.93, "ready"))
            footer = screen_lines(app)[-1].strip()
            shown = [h.strip() for h in footer.split("  ") if h.strip()]
            assert shown and all(h in labels for h in shown), shown
            assert shown[:2] == ["q Quit", "? Help"]
            if size[0] == 80:
                assert "v Panel" in shown and "r Restart" in shown
            else:
                assert "^p Commands" in shown and "v Panel" not in shown


async def test_unexplained_exit_shows_the_logs_last_lines_and_claims_no_diagnosis() -> None:
    """Defects 2 and 15 in the TUI: a server that died at once on an import error, with a log that
    is not an SGLang log: the dialog shows its decisive lines and does not claim a crash kind."""
    from cockpit.core.state import Crash, RunState
    from cockpit.supervisor.api import LogLine

    base = story_snapshot(0.93, "ready")
    state = RunState(format=None, phase="crashed")
    state.crash = Crash(kind="unknown", phase="startup", rank=None, line=0,
                        message="server process exited with code 1", exit_code=1)
    snap = dataclasses.replace(base, state=state, findings=(), lifecycle="failed")
    lines = ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
             "ModuleNotFoundError: No module named 'sglang'"]
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        screen.query_one("#log").add_lines([LogLine(number=i + 1, rank=None, text=t) for i, t in enumerate(lines)])
        await _dashboard(pilot, snap, logs=False)
        text = flat_text(app)
        assert "ModuleNotFoundError: No module named 'sglang'" in text
        assert "names no known crash" in text and "nothing here is a diagnosis" in text
        assert "CUDA" not in text and "CRASHED:" not in text


async def test_toasts_are_small_and_stay_out_of_the_log_at_80x24() -> None:
    """UX: a critical toast covered 15 of 24 rows, log included, for ~12 s."""
    from textual.widgets._toast import Toast

    app = make_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        screen = await _dashboard(pilot, story_snapshot(0.93, "ready"))
        for _ in range(4):
            await pilot.pause(0.05)
        toasts = list(app.screen.query(Toast))
        assert toasts, "the critical finding is announced"
        log = screen.query_one("#log").region
        for t in toasts:
            assert t.region.height <= 4
            assert t.region.y + t.region.height <= log.y, (t.region, log)
        assert all(n.timeout <= 6 for n in app._notifications)


async def test_r_applies_only_the_headroom_advice_and_A_offers_the_rest() -> None:
    """UX: `r` on a healthy run proposed every finding's change at once (context length included)."""
    from cockpit.ui.screens.dialogs import AdviceChoiceScreen

    base = story_snapshot(0.93, "ready")
    ctx = Finding(id="kv_pool_smaller_than_context", severity="critical",
                  message="The KV pool holds 58,368 tokens, fewer than --context-length 262,144.",
                  changes=(FlagChange("--context-length", None, 58368),))
    snap = dataclasses.replace(base, findings=(ctx, *base.findings))
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap)
        await pilot.press("r")
        await _settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        body = flat_text(app)
        assert "--mem-fraction-static 0.93 → 0.88" in body and "--context-length" not in body
        assert "A lists them" in body
        await pilot.press("n")
        await _settle(pilot)
        await pilot.press("A")
        await _settle(pilot)
        assert isinstance(app.screen, AdviceChoiceScreen)
        assert [f.id for f in app.screen.findings] == ["kv_pool_smaller_than_context"]
        await pilot.press("enter")
        await _settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "--context-length unset → 58368" in flat_text(app) or "--context-length" in flat_text(app)


async def test_advice_panel_scrolls_from_the_keyboard_at_80x24() -> None:
    """UX: the advice panel overflowed and hid the ✓ finding at 80 columns."""
    base = story_snapshot(0.93, "ready")
    extra = tuple(Finding(id=f"note_{i}", severity="info", message=f"note {i}: something worth reading") for i in range(6))
    ok = Finding(id="headroom_ok_elsewhere", severity="ok", message="the last finding, an ok one")
    snap = dataclasses.replace(base, findings=(*base.findings, *extra, ok))
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _dashboard(pilot, snap)
        assert "the last finding" not in screen_text(app)
        box = screen.query_one("#advice-box")
        seen = []
        for _ in range(8):
            if app.focused is box:
                break
            await pilot.press("tab")
            seen.append(app.focused)
        assert app.focused is box, seen
        await pilot.press("end")
        await _settle(pilot)
        assert "the last finding, an ok one" in screen_text(app)


async def test_gpu_panel_keeps_history_and_K_asks_before_killing() -> None:
    """UX: an nvitop-like GPU panel: memory/util/power over time per GPU, and the per-process
    table with a kill behind a confirm."""
    from cockpit.ui.screens.dialogs import PickScreen

    base = story_snapshot(0.93, "ready", restarted=True)  # a leftover pid 4412 on GPU 3
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _dashboard(pilot, base)
        for k in range(1, 6):  # five later samples, memory growing on every GPU
            gpus = tuple(dataclasses.replace(g, sampled_at=g.sampled_at + k, used_gb=(g.used_gb or 0) + k,
                                             power_w=300.0 + 20 * k) for g in base.gpus)
            screen.apply_snapshot(dataclasses.replace(base, gpus=gpus))
        await _settle(pilot)
        trace = screen.gpu_history.traces[("local", 0)]
        assert len(trace.used) == 6 and trace.power[-1] == 400.0
        text = screen_text(app)
        assert "GPU0 mem" in text and "util" in text and "pwr" in text and "400 W" in text
        await pilot.press("K")
        await _settle(pilot)
        assert isinstance(app.screen, PickScreen)
        assert any("pid 4412" in i and "not this run" in i for i in app.screen.items)
        first = app.screen.items[0]
        await pilot.press("enter")
        await _settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert first in flat_text(app) and "SIGKILL" in flat_text(app)
        await pilot.press("n")
        await _settle(pilot)
        assert isinstance(app.screen, DashboardScreen)


async def test_exit_137_from_the_supervisor_is_said_in_words_too() -> None:
    """Defect 13, as the demo shows it: the log decided the OOM (no exit code in the crash) and the
    supervisor said "the server on local exited with code 137"."""
    base = story_snapshot(0.93, "ready", crashed=True)
    crash = dataclasses.replace(base.state.crash, exit_code=None)
    state = dataclasses.replace(base.state, crash=crash)
    snap = dataclasses.replace(base, state=state, progress="the server on local exited with code 137")
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _dashboard(pilot, snap)
        assert "not the kernel's OOM killer" in flat_text(app)  # the dialog
        await pilot.press("escape")
        await _settle(pilot)
        second = screen_lines(app)[1]
        assert "exited: exit code 137: SIGKILL from the server's own cleanup" in second
