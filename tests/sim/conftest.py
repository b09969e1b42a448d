"""Run `cockpit sim` as a real process tree (main + one process per rank) for the simulator tests.

Each run gets its own simulated-GPU directory and a free port; the log goes to a file so that the
tests can wait for lines and parse the whole log with the backend's parser afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port


class SimRun:
    def __init__(self, tmp: Path, args: list[str], *, speed: float = 200, port: int | None = None,
                 gpu_dir: Path | None = None, env: dict[str, str] | None = None):
        self.port = port or free_port()
        self.gpu_dir = gpu_dir or (tmp / "gpus")
        self.log_path = tmp / f"sim-{self.port}.log"
        argv = [sys.executable, "-m", "cockpit", "sim", "--port", str(self.port), "--sim-speed", str(speed), *args]
        full_env = {**os.environ, "COCKPIT_SIM_GPU_DIR": str(self.gpu_dir), **(env or {})}
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - kept open for the process's lifetime
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = rx.search(self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                m = rx.search(self.text())
                if m:
                    return m
                raise AssertionError(f"sim exited ({self.proc.returncode}) before {pattern!r}:\n{self.text()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {pattern!r}:\n{self.text()[-3000:]}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"sim still running after {timeout}s:\n{self.text()[-3000:]}") from None

    def children(self) -> list[int]:
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == self.pid and fields[0] != "Z":
                out.append(int(d.name))
        return sorted(out)

    def proc_files(self) -> list[dict]:
        out = []
        for p in sorted(self.gpu_dir.glob("proc-*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, ValueError):
                pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator:
    """A factory: sim(args, speed=…) starts a run; every run is killed (whole group) at teardown."""
    runs: list[SimRun] = []

    def start(args: list[str], **kw: object) -> SimRun:
        run = SimRun(tmp_path, args, **kw)  # type: ignore[arg-type]
        runs.append(run)
        return run

    yield start
    for r in runs:
        r.stop()


KIMI = ["--model-path", "/models/Kimi-K2.5", "--tp", "8", "--trust-remote-code", "--sim-gpu", "rtx-pro-6000",
        "--sim-model", "kimi-k2.5"]


RECORD_INSIDE = re.compile(r".\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [A-Z_]+\d+)*\] ")


def assert_lines_intact(text: str) -> None:
    """No record starts in the middle of a line (a peer's line appended to TP0's open tqdm bar)."""
    bad = [line[:160] for line in text.splitlines() if RECORD_INSIDE.search(line)]
    assert bad == [], bad[:3]
