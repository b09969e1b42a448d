"""The TUI on the REAL engine (vLLM's CPU build), driven in a real tmux pane.

One launch of `cockpit tui PROFILE` serves every assertion, in order (each real start-up costs
~60-90 s of a 2-core machine):

1. the dashboard of a CPU engine: no `?/? GiB` GPU row (the KV space the engine printed and the
   host's RAM instead, said so), the startup timeline advanced on the CPU runner's lines, the
   profile's pinned version in the header, the phase clock counting from READY;
2. a REAL crash (SIGKILL of the run's `VLLM::Worker`, found in the run's own process tree by the
   API server's pid the header shows; vLLM then prints `Worker proc VllmWorker-0 died unexpectedly`
   and more lines, each judging the crash again): one crash dialog, updated in place;
3. `cockpit tui PROFILE` opened again on the crashed profile shows the crash and launches nothing;
4. `R` in that dialog restarts the run: a new run READY.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.test_tmux_e2e import Pane

READY_S = 300  # a start-up on a busy 2-core machine, with margin
# two start-ups, a crash and the engine lock (another test's engine may hold it first)
pytestmark = pytest.mark.timeout(1800)


def _descendants(pid: int) -> list[int]:
    """Every process under `pid` (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Tui:
    """`cockpit tui PROFILE` in its own tmux server, with the test's own HOME and XDG folders."""

    def __init__(self, tmp_path: Path, profile: Path) -> None:
        self.profile = profile
        self.socket = ""
        self._opens = 0
        self.env = {
            "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "tmux-256color", "LANG": "C.UTF-8",
        }
        for key in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
            Path(self.env[key]).mkdir(exist_ok=True)
        self.cwd = tmp_path

    def open(self) -> Pane:
        # a tmux server of its own at each open: a reopen right after close() never meets the last
        # one still going down (new-session failed so once, under xdist)
        self._opens += 1
        self.socket = f"cockpit-real-views-{os.getpid()}-{self._opens}"
        self.pane = Pane(self.socket, "views")
        argv = ["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", "views", "-x", "150", "-y", "45",
                "env", "-i", *(f"{k}={v}" for k, v in self.env.items()),
                sys.executable, "-m", "cockpit", "tui", str(self.profile)]
        subprocess.run(argv, check=True, cwd=self.cwd)
        self.pane.tmux("set-option", "-t", "views", "remain-on-exit", "on")
        return self.pane

    def close(self) -> None:
        if self.socket:
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)

    def cockpit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cockpit", *args], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def tui(tmp_path: Path, real_vllm: Any, engine_lock: None) -> Iterator[Tui]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (scripts/test.sh installs it)")
    # -O0: no torch.compile warm-up (~30 s less on 2 cores); the CPU runner's lines are the same
    t = Tui(tmp_path, real_vllm.profile(tmp_path, "views", server={"optimization-level": 0}))
    try:
        yield t
    finally:
        t.close()
        t.cockpit("down", str(t.profile), "--timeout", "20", timeout=180)


def _wait_gone(pane: Pane, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while re.search(pattern, pane.text()):
        assert time.monotonic() < deadline, f"{pattern!r} still on screen after {timeout:.0f} s:\n{pane.text()}"
        time.sleep(0.3)


def _run_and_pid(screen: str) -> tuple[str, int]:
    m = re.search(r"run (\S+) · pid (\d+)", screen)
    assert m, screen
    return m[1], int(m[2])


def test_cpu_dashboard_real_crash_reopen_and_restart_by_one_key(tui: Tui) -> None:
    pane = tui.open()
    screen = pane.wait(r"\bREADY\b", READY_S)
    screen = pane.wait(r"ready \d", 30)  # the timeline's last stage, dated once READY
    # 1. a CPU engine: no phantom GPU row; its KV space and the host's RAM, said so
    assert "?/? GiB" not in screen and "USED/TOTAL" not in screen, screen
    assert "CPU engine, no GPU" in screen and re.search(r"1\.00/\d+\.\d\d GiB", screen), screen
    assert re.search(r"RAM \d+\.\d/\d+\.\d GiB used", screen), screen
    assert re.search(r"TP0\s+init \S+ weights \S+ warm-up \+ KV \S+ ready \S+", screen), screen
    assert "vllm 0.32.0" in screen and "vllm-unknown" not in screen, screen
    first_run, api_pid = _run_and_pid(screen)
    clock = re.search(r"READY\s+(\d\d):(\d\d):(\d\d)", screen)
    assert clock, screen
    time.sleep(3)
    later = re.search(r"READY\s+(\d\d):(\d\d):(\d\d)", pane.text())
    assert later and later.groups() >= clock.groups(), pane.text()
    assert "GET /health HTTP/1.1" not in pane.text()  # Cockpit's own probes are not the server's log

    # 2. a real crash: SIGKILL the run's worker (in the run's own process tree)
    workers = [p for p in _descendants(api_pid) if "VLLM::Worker" in _title(p)]
    assert workers, f"no VLLM::Worker under pid {api_pid}: {[(_title(p), p) for p in _descendants(api_pid)]}"
    os.kill(workers[0], signal.SIGKILL)
    screen = pane.wait(r"CRASHED|ENDED", 120)
    screen = pane.wait(r"R restart unchanged", 30)
    time.sleep(3)  # more of the crash's lines arrive: the dialog is updated, not stacked
    assert pane.text().count("R restart unchanged") == 1, pane.text()
    pane.keys("Escape")
    _wait_gone(pane, r"R restart unchanged", 10)  # (a key right after Escape would read as alt+key)
    pane.keys("q")
    pane.wait(r"enter quit", 10)
    pane.keys("Enter")
    time.sleep(1.0)
    tui.close()

    # 3. the crashed profile opened again: the crash, nothing launched
    pane = tui.open()
    screen = pane.wait(r"R restart unchanged", 120)
    screen = pane.wait(r"nothing launched", 30)
    assert _run_and_pid(screen)[0] == first_run, screen
    time.sleep(5)
    screen = pane.text()
    assert _run_and_pid(screen)[0] == first_run and not re.search(r"LAUNCHING|PREFLIGHT|STARTING", screen), screen

    # 4. one key: R restarts the run, and the new one comes READY
    pane.keys("R")
    screen = pane.wait(r"\bREADY\b", READY_S)
    new_run, _pid = _run_and_pid(screen)
    assert new_run != first_run, screen
    pane.keys("q")
    pane.wait(r"leave it running|enter quit", 10)
    pane.keys("s")  # stop the server
    time.sleep(2)
