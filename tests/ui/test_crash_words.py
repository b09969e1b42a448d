"""The crash dialog's words, round 3 (issue 39 item 4): one sentence per cause, never against the
evidence shown. Exit 137 under a CUDA OOM's traceback was explained twice, the second time "with
no Python error before it" under the very traceback the dialog showed."""

from __future__ import annotations

from pathlib import Path

from cockpit.backends import get_backend
from cockpit.core.events import ProcessExited
from cockpit.core.reducer import apply
from cockpit.core.state import RunState
from cockpit.ui.format import SIGKILL_WORDS, exit_words
from cockpit.ui.screens.crash import CrashScreen
from tests.ui.screen_text import flat_text
from tests.ui.test_cpu_and_crash_views import make_app

OOM_LOG = Path(__file__).parent.parent / "data" / "sglang-0.5.23-kimi-0.93-prefill-oom.log"


def _dialog_text(state: RunState) -> str:
    import asyncio

    async def go() -> str:
        app = make_app()
        async with app.run_test(size=(160, 48)) as pilot:
            assert state.crash is not None
            app.push_screen(CrashScreen(state.crash, [], None, backend="sglang", log_tail=["(the log's last line)"]))
            await pilot.pause()
            return flat_text(app)

    return asyncio.run(go())


def test_exit_137_after_a_logged_oom_is_explained_once_and_agrees_with_the_traceback() -> None:
    state = get_backend("sglang").logs.read(OOM_LOG)
    apply(state, ProcessExited(line=0, ts=None, rank=None, exit_code=137, stopped=False))
    assert state.crash is not None and state.crash.kind == "cuda_oom"
    text = _dialog_text(state)
    assert "Traceback" in text or "OutOfMemoryError" in text  # the evidence is on screen
    assert text.count("SIGKILL from") == 1, text  # one sentence for the one cause
    assert "server's own cleanup" in text
    assert "no Python error" not in text and "OOM killer or an operator" not in text


def test_a_bare_sigkill_is_one_sentence_too() -> None:
    state = RunState(backend="sglang", phase="ready")
    apply(state, ProcessExited(line=0, ts=None, rank=None, exit_code=137, stopped=False))
    text = _dialog_text(state)
    # who could have sent it is said once (the crash's line), the exit words name only the signal
    assert text.count("who sent it is not known") == 1 and "killed from outside: an operator" not in text, text


def test_a_new_ending_kind_slots_in_with_its_own_sigkill_sentence() -> None:
    """An ending another change adds (a kill told by its signal) brings its words in one place."""
    assert exit_words(137, "killed_by_sigkill") == exit_words(137, None)  # unknown to the table: from outside
    SIGKILL_WORDS["killed_by_sigkill"] = ("killed by signal 9", "killed by signal 9 (SIGKILL)")
    try:
        assert exit_words(137, "killed_by_sigkill") == "exit code 137: killed by signal 9 (SIGKILL)"
        assert exit_words(-9, "killed_by_sigkill", short=True) == "exit code -9 (killed by signal 9)"
    finally:
        del SIGKILL_WORDS["killed_by_sigkill"]
