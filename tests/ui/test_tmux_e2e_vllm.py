"""End to end: `cockpit demo --backend vllm` in a real tmux pane (140×45), driven with send-keys and
read with capture-pane: both ranks READY at --gpu-memory-utilization 0.97, the CUDA OOM in prefill
under the simulator's traffic, the crash modal proposing 0.97 → 0.95 (Δu × total), `r`, and the new
run READY at 0.95 with the flag diff in the header and ~5 GiB free per GPU. Modelled on
test_tmux_e2e.py; the demo serves on a free port (never the bundled profile's)."""

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
from tests.ui.test_tmux_e2e import Pane

pytestmark = pytest.mark.e2e

SIM_SPEED = "25"
STARTUP_SPEED = "400"  # the start-ups (--sim-startup-speed); READY and the crash come at SIM_SPEED


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
    socket = f"cockpit-e2e-vllm-{os.getpid()}"
    p = Pane(socket, "demo")
    port = free_port()  # an operator's own demo may be running beside the suite
    cmd = [sys.executable, "-m", "cockpit", "demo", "--backend", "vllm", "--sim-speed", SIM_SPEED, "--sim-startup-speed", STARTUP_SPEED, "--port", str(port)]
    argv = ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "demo", "-x", "140", "-y", "45"]
    argv += ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *cmd]
    subprocess.run(argv, check=True, cwd=tmp_path)
    p.tmux("set-option", "-t", "demo", "remain-on-exit", "on")
    try:
        yield p
    finally:
        subprocess.run([sys.executable, "-m", "cockpit", "down", "demo-vllm", "--timeout", "5"], env=env, cwd=tmp_path,
                       capture_output=True, timeout=60)
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def test_vllm_demo_in_tmux_crash_then_restart_with_the_change(pane: Pane) -> None:
    screen = pane.wait(r"TP1 ", 60)
    assert "TP0 " in screen, screen
    screen = pane.wait(r"\bREADY\b", 150)
    assert "█" in screen  # the bars have filled
    screen = pane.wait(r"0\.97 → 0\.95", 150)  # the advice, then the crash modal
    screen = pane.wait(r"CRASHED", 120)
    screen = pane.wait(r"r restart with the change", 60)
    assert "gpu-memory-utilization" in screen, screen
    pane.keys("r")
    screen = pane.wait(r"READY .*0\.95 \(profile 0\.97\)", 180)

    def filled_rows(text: str) -> list[str]:
        # the rank bars' rows only: a rank label then its bar (the timeline's and the log's lines
        # start with a rank label too, and a log line may carry a progress bar's █)
        return [line for line in text.splitlines()
                if (m := re.match(r"\s*TP\d\s+([█▓▒▚▞░]+)", line)) and "█" in m.group(1)]

    # READY comes from the log and /health; the bars wait for the next telemetry sample (≤ 1 s)
    deadline = time.monotonic() + 30
    while len(rows := filled_rows(screen)) < 2 and time.monotonic() < deadline:
        time.sleep(0.25)
        screen = pane.text()
    assert len(rows) == 2, screen
    assert all(re.search(r"\b5\.\d\d GiB", row) for row in rows), "\n".join(rows)
    pane.keys("q")
    pane.wait(r"leave it running", 10)
    pane.keys("Enter")
    time.sleep(1.0)
