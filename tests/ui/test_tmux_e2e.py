"""End to end: `cockpit demo` in a real tmux pane (140×45), driven with send-keys and read with
capture-pane, the way an operator sees it: rank bars fill, READY, the crash modal proposing
0.93 → 0.88, `r`, and the new run READY with the flag diff in the header."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.e2e

SIM_SPEED = "25"
STARTUP_SPEED = "400"  # the start-ups (--sim-startup-speed); READY and the crash come at SIM_SPEED


class Pane:
    def __init__(self, socket: str, session: str) -> None:
        self.socket, self.session = socket, session

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def wait(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.text()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} not on screen after {timeout:.0f} s; last screen:\n{screen}")


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (scripts/test.sh installs it)")
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "COCKPIT_SIM_GPU_DIR": str(tmp_path / "gpus"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TERM": "tmux-256color",
        "LANG": "C.UTF-8",
    }
    for k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "COCKPIT_SIM_GPU_DIR"):
        Path(env[k]).mkdir()
    socket = f"cockpit-e2e-{os.getpid()}"
    p = Pane(socket, "demo")
    # never the demo's own 30123: an operator's `cockpit demo` may be running beside the suite
    port = free_port()
    cmd = [sys.executable, "-m", "cockpit", "demo", "--sim-speed", SIM_SPEED, "--sim-startup-speed", STARTUP_SPEED, "--port", str(port)]
    argv = ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "demo", "-x", "140", "-y", "45"]
    argv += ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *cmd]
    subprocess.run(argv, check=True, cwd=tmp_path)
    p.tmux("set-option", "-t", "demo", "remain-on-exit", "on")
    try:
        yield p
    finally:
        # Stop the demo server whatever happened, then the tmux server of this test only.
        subprocess.run([sys.executable, "-m", "cockpit", "down", "demo", "--timeout", "5"], env=env, cwd=tmp_path,
                       capture_output=True, timeout=60)
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def test_demo_in_tmux_crash_then_restart_with_the_change(pane: Pane) -> None:
    screen = pane.wait(r"TP7 ", 60)
    deadline = time.monotonic() + 30  # the first frame may still be drawing the rank rows
    while not all(f"TP{i} " in screen for i in range(8)) and time.monotonic() < deadline:
        time.sleep(0.25)
        screen = pane.text()
    assert all(f"TP{i} " in screen for i in range(8)), screen
    screen = pane.wait(r"\bREADY\b", 120)
    assert "█" in screen  # the bars have filled
    screen = pane.wait(r"0\.93 → 0\.88", 120)  # advice, then the crash modal
    screen = pane.wait(r"CRASHED", 120)
    screen = pane.wait(r"r restart with the change", 60)
    pane.keys("r")
    screen = pane.wait(r"READY .*mfs 0\.88 \(profile 0\.93\)", 180)
    # a rank's bar row: its label, the bar, then USED/TOTAL (a panel that also names ranks has no total)
    rows = [line for line in screen.splitlines() if re.match(r"\s*TP\d\s+[█▓▒▚▞░]", line) and "/95.6 GiB" in line]
    assert {line.split()[0] for line in rows} == {f"TP{i}" for i in range(8)}, screen
    assert all(re.search(r"\b5\.\d\d GiB", row) for row in rows), "\n".join(rows)
    pane.keys("q")
    pane.wait(r"leave it running", 10)
    pane.keys("Enter")
    time.sleep(1.0)


def test_picker_at_80x24_under_screen_256color(tmp_path: Path) -> None:
    """The picker in a small pane with TERM=screen-256color, then too small, then big again."""
    env = {
        "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "screen-256color", "LANG": "C.UTF-8",
    }
    for k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        Path(env[k]).mkdir()
    socket = f"cockpit-e2e-picker-{os.getpid()}"
    p = Pane(socket, "picker")
    argv = ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "picker", "-x", "80", "-y", "24"]
    argv += ["env", "-i", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "cockpit"]
    subprocess.run(argv, check=True, cwd=tmp_path)
    try:
        screen = p.wait(r"demo", 30)
        assert "Cockpit · profiles" in screen
        p.wait(r"command", 30)  # the preview of the highlighted profile
        p.tmux("resize-window", "-t", "picker", "-x", "50", "-y", "12")
        p.wait(r"needs at least 60×16", 10)
        p.tmux("resize-window", "-t", "picker", "-x", "100", "-y", "30")
        p.wait(r"Cockpit · profiles", 10)
        p.keys("q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run(["tmux", "-L", socket, "has-session", "-t", "picker"], capture_output=True).returncode:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("q did not quit the picker")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
