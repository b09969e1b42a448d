"""The dashboard on a CPU engine (vLLM's CPU build, from a real start-up log) and the one crash dialog.

A CPU engine has no GPU: its rank rows show the KV cache the engine printed and its host row the
host's RAM in GiB, never `?/? GiB`; the startup timeline advances on the CPU runner's lines;
stopping says nothing of GPU memory. One crash raises one dialog, updated in place as the crash is
judged again, with every decisive line whole. Cockpit's own /health probe lines are not shown.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cockpit.backends.vllm.logparse import read_log
from cockpit.core.linesplit import ByteReader
from cockpit.core.profile import parse_profile
from cockpit.core.state import Crash, RunState
from cockpit.supervisor.api import HostSample, LogBatch, LogLine, RunInfo, RunSnapshot
from cockpit.ui.app import CockpitApp
from cockpit.ui.messages import LogsArrived
from cockpit.ui.screens.crash import CrashScreen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import ConfirmScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.screen_text import flat_text, screen_text

CPU_LOG = Path(__file__).parent / "data" / "vllm-0.32.0-cpu-tiny-llama-ready.log"
# the log's READY (14:49:51 on the server's clock, UTC here) plus 30 s
NOW = 1_796_136_591.0 + 30

PROFILE = parse_profile(
    {"name": "tiny", "backend": "vllm", "version": "0.32.0", "hosts": [{"ssh": "local"}],
     "server": {"model": "/models/tiny-llama", "dtype": "bfloat16", "max-model-len": 512}},
    "tiny.yaml",
)


def make_app() -> CockpitApp:
    return CockpitApp(profile=PROFILE, theme="dark", supervisor_factory=None, clock=lambda: NOW)


def cpu_snapshot(state: RunState | None = None, *, lifecycle: str = "running", run_id: str = "r1") -> RunSnapshot:
    state = state if state is not None else read_log(CPU_LOG)
    run = RunInfo(id=run_id, profile="tiny", hosts=("local",), pid=14005, pgid=14005,
                  started_at="2026-12-01T14:48:40Z", run_dir="/tmp/r", log_path="/tmp/r/vllm.log")
    host = HostSample(host="local", mem_total_gb=16.0, mem_available_gb=10.0, cgroup_limit_gb=None,
                      sampled_at=NOW - 0.5, source="proc")
    return RunSnapshot(taken_at=NOW, profile="tiny", lifecycle=lifecycle, state=state, findings=(), run=run,
                       hosts=(host,), readiness="log + /health", health="200")


async def _show(pilot, snap: RunSnapshot) -> DashboardScreen:  # type: ignore[no-untyped-def]
    screen = pilot.app.screen
    assert isinstance(screen, DashboardScreen)
    screen.apply_snapshot(snap)
    await pilot.pause()
    return screen


def test_the_cpu_runners_lines_make_a_timeline_and_the_kv_space() -> None:
    state = read_log(CPU_LOG)
    assert state.device == "cpu" and state.phase == "ready"
    tp0 = state.ranks["TP0"]
    assert tp0.kv_gb == 1.0 and tp0.kv_tokens == 1_048_576 and tp0.figures["node_memory_gb"] == 9.34
    assert tp0.timeline == {"init": "2026-12-01 14:49:15", "weights_begin": "2026-12-01 14:49:15",
                            "weights_end": "2026-12-01 14:49:15", "kv_pool": "2026-12-01 14:49:48",
                            "ready": "2026-12-01 14:49:51"}
    assert state.phase_since == "2026-12-01 14:49:51"  # READY is dated: the phase clock counts from it


async def test_a_cpu_engine_has_no_gpu_row_and_a_timeline_that_advanced() -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _show(pilot, cpu_snapshot())
        text = screen_text(app)
        assert "?/? GiB" not in text and "USED/TOTAL" not in text and "AFTER CAPTURE" not in text
        assert "CPU engine, no GPU" in text
        assert "1.00/9.34 GiB" in text and "1,048,576" in text
        assert "RAM 5.6/14.9 GiB used" in text  # the host's RAM (16 GB, 10 GB available), in GiB
        screen.action_cycle_panel()
        screen.action_cycle_panel()  # the startup timeline
        await pilot.pause()
        text = screen_text(app)
        assert "warm-up + KV 33s" in text and "ready 3.0s" in text and "capture" not in text
        # the header: the engine's version, the phase clock from the phase change (30 s), not from attach
        assert "vllm 0.32.0" in text and "READY  00:00:30" in text


async def test_stopping_a_cpu_engine_speaks_of_its_processes() -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _show(pilot, cpu_snapshot())
        screen.supervisor = object()  # a stop is only offered with a supervisor; nothing is stopped here
        screen.action_stop_run()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        words = flat_text(app)
        assert "its processes have exited" in words and "GPU memory" not in words


async def test_the_header_says_the_pinned_version_until_the_log_says_one() -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await _show(pilot, cpu_snapshot(RunState(backend="vllm", format="vllm-unknown")))
        text = screen_text(app)
        assert "vllm 0.32.0" in text and "vllm-unknown" not in text


async def test_cockpits_own_requests_are_not_the_servers_log() -> None:
    """The log reader leaves Cockpit's own access lines out (tests/supervisor/test_footprint.py); the pane
    shows what arrives and its title says how many were left out."""
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _show(pilot, cpu_snapshot())
        lines = (LogLine(2, None, 'INFO:     127.0.0.1:52584 - "POST /v1/completions HTTP/1.1" 200 OK'),
                 LogLine(3, None, 'INFO:     10.1.2.3:40000 - "GET /health HTTP/1.1" 200 OK'))
        screen.post_message(LogsArrived(LogBatch(lines, own=1)))
        await pilot.pause()
        shown = [ln.text for ln in screen.query_one(LogPane).all_lines]
        assert shown == [lines[0].text, lines[1].text]  # another host's health check is the server's news
        assert screen.probes_hidden == 1
        assert "Cockpit's own requests hidden" in str(screen.query_one(LogPane).border_title)


def test_the_probe_slows_down_once_ready() -> None:
    """Each probe is a line in the server's access log: every 30 s once /health says 200."""
    from cockpit.supervisor.watch import HEALTH_INTERVAL_S, probe_interval

    assert probe_interval("200") == 30.0 > HEALTH_INTERVAL_S == probe_interval("503") == probe_interval(None)
    assert probe_interval("refused") == 1.0


def _crash(line: int, kind: str, decisive: list[str]) -> RunState:
    state = RunState(backend="vllm", format="vllm-0.32.0", phase="crashed")
    state.crash = Crash(kind=kind, phase="serving", rank=None, line=line, message=decisive[-1], decisive_lines=decisive)
    return state


async def test_one_crash_one_dialog_updated_in_place_with_whole_lines() -> None:
    long_fix = ("ValueError: To serve at least one request with the models's max seq len (4096), (0.50 GiB KV "
                "cache is needed, which is larger than the available KV cache memory (0.10 GiB). " + "x" * 300
                + " Try increasing `VLLM_CPU_KVCACHE_SPACE` or decreasing `max_model_len` when initializing the engine.")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _show(pilot, cpu_snapshot(_crash(40, "unknown", ["Traceback (most recent call last):"]), lifecycle="failed"))
        assert isinstance(app.screen, CrashScreen)
        first = app.screen
        # the same run's crash, judged again as lines arrive: the same dialog, newer words
        screen = app.screen_stack[1]
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(cpu_snapshot(_crash(52, "init_not_enough_memory", ["Traceback (most recent call last):", long_fix]),
                                           lifecycle="failed"))
        await pilot.pause()
        assert app.screen is first and sum(isinstance(s, CrashScreen) for s in app.screen_stack) == 1
        words = flat_text(app)
        assert "not enough memory at startup" in words
        assert "when initializing the engine." in words  # the engine's own fix, past 300 characters
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)
        # judged once more after it was dismissed: no dialog comes back by itself (c opens it)
        screen.apply_snapshot(cpu_snapshot(_crash(60, "init_not_enough_memory", [long_fix]), lifecycle="failed"))
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
        # another run's crash is news: its own dialog
        screen.apply_snapshot(dataclasses.replace(cpu_snapshot(_crash(9, "unknown", ["boom"]), lifecycle="failed", run_id="r2")))
        await pilot.pause()
        assert isinstance(app.screen, CrashScreen) and app.screen is not first


def test_a_bare_traceback_is_shown_as_its_line_never_as_an_event_name() -> None:
    """A crash decided on a bare `Traceback (most recent call last):` (KeyboardInterrupt, then the
    exit): its decisive line is that line, not the parser's internal `TracebackStart`."""
    from cockpit.backends.vllm.logparse import VLLMLogParser
    from cockpit.core.events import ProcessExited
    from cockpit.core.reducer import apply, end_of_input

    text = ("(APIServer pid=1) INFO 12-01 14:48:54 [api_utils.py:286] non-default args: {'model': 'm'}\n"
            "Traceback (most recent call last):\n"
            '  File "/x/vllm/entrypoints/cli/main.py", line 10, in main\n'
            "KeyboardInterrupt\n")
    parser, state = ByteReader(VLLMLogParser()), RunState(backend="vllm")
    for e in [*parser.feed(text.encode()), *parser.finish()]:
        apply(state, e)
    apply(state, ProcessExited(5, None, None, 1))
    end_of_input(state)
    assert state.crash is not None
    assert "Traceback (most recent call last):" in state.crash.decisive_lines
    assert not any("TracebackStart" in line for line in [state.crash.message, *state.crash.decisive_lines])


def test_cpu_engine_ready_snapshot_120x36(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The CPU engine's dashboard as the operator sees it (KV space, host RAM, the CPU timeline)."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        from cockpit.backends import get_backend
        from cockpit.supervisor.nodelog import NodeLog

        screen = await _show(pilot, cpu_snapshot())
        # through the log reader the supervisor uses (it leaves Cockpit's own access lines out)
        reader = NodeLog(get_backend("vllm"), "local", parse=False)
        _events, lines = reader.feed_lines(CPU_LOG.read_bytes())
        screen.post_message(LogsArrived(LogBatch(tuple(lines[-12:]), own=reader.own_lines)))
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(120, 36), run_before=run_before)
