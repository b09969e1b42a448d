"""Shared pieces of the reliability suite: an isolated cockpit environment, a log writer, waits.

Nothing here fakes a component: the writer is a real process launched through the real host
program, the cockpit runs as a real subprocess (`python -m cockpit ...`), and the files compared
are the real log files on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
SIM_SPEED = "200"

# A log writer that runs until a stop file appears (at most 5 minutes): numbered lines of varied length, some longer
# than one 64 KiB transport read (so chunk boundaries fall inside lines), then exits 0.
WRITER = r"""
import os, sys, time
stop = sys.argv[1]
delay = float(sys.argv[2])
give_up = time.time() + 300  # never outlive a test that died before touching the stop file
i = 0
while not os.path.exists(stop) and time.time() < give_up:
    if i % 97 == 13:
        body = 'L' * (70000 + i % 5000)
    else:
        body = 'x' * (i % 120)
    sys.stdout.write(f'line {i:07d} {body}\n')
    sys.stdout.flush()
    i += 1
    time.sleep(delay)
sys.stdout.write(f'last {i:07d}\n')
sys.stdout.flush()
"""


@dataclass
class CockpitEnv:
    """An isolated HOME/XDG/run-directory root for cockpit subprocesses and in-process supervisors."""

    root: Path
    env: dict[str, str]
    runs_root: Path

    def cockpit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cockpit", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([PY, "-m", "cockpit", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=self.root)

    def write_profile(self, name: str, text: str) -> Path:
        d = self.root / "profiles"
        d.mkdir(exist_ok=True)
        p = d / f"{name}.yaml"
        p.write_text(text)
        return p

    def current_run(self, name: str) -> Path:
        d = self.runs_root / name
        return d / (d / "current").read_text().strip()

    @property
    def journal(self) -> Path:
        return self.root / "xdg-data" / "cockpit"


def make_env(root: Path, base: dict[str, str] | None = None) -> CockpitEnv:
    env = dict(os.environ)
    if base:
        env.update(base)
    home = Path(env["HOME"]) if base and "HOME" in base else root / "home"
    home.mkdir(exist_ok=True)
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"),
        "COCKPIT_RUNS_ROOT": str(root / "runs"),
        "PYTHONPATH": str(REPO),
    })
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("COCKPIT_SIM_GPU_DIR", None)
    return CockpitEnv(root, env, root / "runs")


def writer_script(root: Path) -> Path:
    """WRITER as a file (a profile's program items are single lines)."""
    path = root / "writer.py"
    path.write_text(WRITER)
    return path


def writer_profile(name: str, host: str, root: Path, stop: Path, delay: float = 0.002) -> str:
    program = [PY, str(writer_script(root)), str(stop), str(delay)]
    return (
        f"name: {name}\nhosts:\n  - ssh: {host}\nprogram: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\nlog: logs/{name}.log\n"
    )


def sim_profile(name: str, host: str, root: Path, sim_dir: Path, *, port: int | None = None, tp: int = 4,
                speed: str = SIM_SPEED, traffic: str = "steady", mfs: float = 0.88) -> str:
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", speed,
               "--sim-traffic", traffic, "--sim-dir", str(sim_dir)]
    return (
        f"name: {name}\nversion: 0.5.9\nhosts:\n  - ssh: {host}\nprogram: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\nlog: logs/{name}.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        f"server:\n  model-path: /models/Llama-3.1-70B-Instruct\n  tp: {tp}\n"
        f"  mem-fraction-static: {mfs}\n  port: {port or free_port()}\n"
    )


@contextlib.contextmanager
def port_server(script: str, workdir: Path) -> Iterator[str]:
    """A test server process (`python SCRIPT PORT_FILE`, it writes its port there and ends with its
    parent): its base URL while the block runs, killed after."""
    port_file = workdir / "port"
    proc = subprocess.Popen([PY, script, str(port_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, f"{script} did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        proc.kill()
        proc.wait(5)


def wait_for(pred: Callable[[], object], timeout: float = 10.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def session_pids(sid: int, exclude: tuple[int, ...] = ()) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[3]) == sid and rest[0] not in ("Z", "X"):
            out.append(int(name))
    return sorted(out)


def split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


class Drained:
    """A subprocess whose stdout and stderr are read continuously (a full pipe would stall it)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        import threading

        self.proc = proc
        self.out = bytearray()
        self.err = bytearray()
        self._threads = [threading.Thread(target=self._pump, args=(proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._pump, args=(proc.stderr, self.err), daemon=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(pipe, buf: bytearray) -> None:
        while True:
            data = pipe.read1(65536)
            if not data:
                return
            buf.extend(data)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for t in self._threads:
            t.join(5)
        return rc
