"""What the real-engine lifecycle tests share: a cockpit CLI on its own state directories, the run's
recorded processes (its run directory's pid, sid and `tree` files, never a name), a request that
streams while a process is killed. See test_lifecycle.py and test_lifecycle_endings.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.real_engine.conftest import RealSglang, RealVllm, engine_lock_path

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 420  # a 2-core machine shared with other engineers' engines and tests
FAST = {"optimization-level": 0}  # -O0: no torch.compile warm-up (~30 s less per start)


@contextlib.contextmanager
def module_engine_lock(engine: RealVllm | RealSglang) -> Iterator[None]:
    """conftest's engine_lock for module-scoped engines (one real engine on this machine at a time,
    vLLM or SGLang: both venvs lie in one folder, and so does the lock)."""
    import fcntl

    with open(engine_lock_path(engine.venv), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class Cockpit:
    root: Path
    env: dict[str, str]
    profile: Path
    name: str

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cockpit", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    def status(self) -> dict[str, Any]:
        st = self.run("status", str(self.profile), "--json")
        assert st.returncode in (0, 1), st.stdout + st.stderr
        data: dict[str, Any] = json.loads(st.stdout)
        return data

    def run_dir(self) -> Path:
        pdir = Path(self.env["COCKPIT_RUNS_ROOT"]) / self.name
        return pdir / (pdir / "current").read_text().strip()

    def recorded(self, name: str) -> int:
        return int((self.run_dir() / name).read_text().strip())

    def tree(self) -> dict[int, int]:
        """The run's processes as the host-side waiter recorded them: pid -> start time."""
        path = self.run_dir() / "tree"
        if not path.exists():
            return {}
        return {int(a): int(b) for a, b in (ln.split() for ln in path.read_text().splitlines() if ln.strip())}

    def process_named(self, word: str, timeout: float = 240) -> int:
        """The pid of the run's own process whose cmdline holds `word` (VLLM::Worker): looked up
        among the pids the run recorded, never across the machine."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in self.tree():
                if word in " ".join(cmdline(pid)):
                    return pid
            time.sleep(0.5)
        raise AssertionError(f"no {word} in the run's recorded tree {self.tree()} after {timeout:g} s")

    def live_processes(self) -> list[int]:
        """Processes of the run still alive: its recorded tree (same start time) and its session."""
        out = [pid for pid, start in self.tree().items() if start_time(pid) == start]
        sid = self.recorded("sid")
        waiter = self.recorded("waiter_pid")
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != waiter and session(int(name)) == sid:
                out.append(int(name))
        return sorted(set(out))

    def wait_phase(self, phases: tuple[str, ...], timeout: float) -> tuple[dict[str, Any], float]:
        t0 = time.monotonic()
        data: dict[str, Any] = {}
        while time.monotonic() - t0 < timeout:
            data = self.status()
            if data["phase"] in phases:
                return data, time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"phase {data.get('phase')} after {timeout:g} s, wanted {phases}: {data.get('crash')}")

    def wait_no_process(self, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while self.live_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = self.live_processes()
        assert not left, [(p, cmdline(p)) for p in left]

    def reap(self) -> None:
        """The last resort after a failed test: the run's own recorded processes, by pid and group."""
        with contextlib.suppress(Exception):
            self.run("down", str(self.profile), "--timeout", "5", timeout=60)
        with contextlib.suppress(Exception):
            for pid in self.live_processes():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.killpg(self.recorded("pgid"), signal.SIGKILL)


def stat(pid: int) -> list[str] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest if rest and rest[0] not in ("Z", "X") else None


def start_time(pid: int) -> int | None:
    st = stat(pid)
    return int(st[19]) if st else None


def session(pid: int) -> int | None:
    st = stat(pid)
    return int(st[3]) if st else None


def cmdline(pid: int) -> list[str]:
    try:
        return [p.decode() for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]
    except OSError:
        return []


def cockpit(root: Path, profile: Path, base_env: dict[str, str] | None = None) -> Cockpit:
    env = dict(base_env or os.environ)
    if base_env is None:
        (root / "home").mkdir(exist_ok=True)
        env["HOME"] = str(root / "home")
    env.update({
        "XDG_CONFIG_HOME": str(root / "xdg-config"), "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_STATE_HOME": str(root / "xdg-state"), "XDG_CACHE_HOME": str(root / "xdg-cache"),
        "COCKPIT_RUNS_ROOT": str(root / "runs"), "PYTHONPATH": str(REPO),
    })
    env.pop("SSH_AUTH_SOCK", None)
    import yaml

    name = yaml.safe_load(profile.read_text())["name"]
    return Cockpit(root, env, profile, name)


def api_port_of(profile: Path) -> int:
    import yaml

    return int(yaml.safe_load(profile.read_text())["server"]["port"])


def stream_completion(port: int, model: str, started: threading.Event, out: dict[str, Any]) -> None:
    """A long streamed completion: `started` is set at its first chunk (the engine is decoding)."""
    body = json.dumps({"model": model, "prompt": "hello " * 8, "max_tokens": 400, "stream": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            for line in resp:
                if line.startswith(b"data:"):
                    started.set()
    except Exception as exc:  # the engine dies under it: that is the point
        out["error"] = repr(exc)
    finally:
        started.set()


def kill_mid_request(ck: Cockpit, port: int, model: str, word: str) -> float:
    """SIGKILL the run's own `word` process while a request decodes; returns the kill's time."""
    pid = ck.process_named(word, timeout=10)
    started, out = threading.Event(), {}
    t = threading.Thread(target=stream_completion, args=(port, model, started, out), daemon=True)
    t.start()
    assert started.wait(60), "the request never started streaming"
    t_kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    t.join(60)
    return t_kill


def journal(ck: Cockpit) -> list[dict[str, Any]]:
    runs = ck.run("runs", "--json")
    assert runs.returncode == 0, runs.stderr
    rows: list[dict[str, Any]] = json.loads(runs.stdout)
    return rows


def finding(data: dict[str, Any], fid: str) -> dict[str, Any]:
    found = [f for f in data["findings"] if f["id"] == fid]
    assert found, (fid, [(f["id"], f["message"][:120]) for f in data["findings"]], data.get("crash"))
    return found[0]




def readline_within(proc: subprocess.Popen[str], timeout: float) -> str:
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    t.start()
    t.join(timeout)
    return got[0] if got else ""


class Generating(threading.Thread):
    """A client generating long completions one after another until `stop` is set (an engine under
    load: a stopped process shows as no token generated, not as an idle server)."""

    def __init__(self, port: int, model: str, max_tokens: int = 200) -> None:
        super().__init__(daemon=True)
        self.port, self.model, self.max_tokens = port, model, max_tokens
        self.stop = threading.Event()
        self.done = 0

    def run(self) -> None:
        body = json.dumps({"model": self.model, "prompt": "hello", "max_tokens": self.max_tokens,
                           "ignore_eos": True}).encode()
        while not self.stop.is_set():
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=600).read()
                self.done += 1
            except OSError:
                time.sleep(0.5)


def scrape_metrics(port: int, prefix: str) -> dict[str, float]:
    """The engine's own /metrics: name -> value summed over label sets, histograms left out."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            continue
        for s in fam.samples:
            if s.name.startswith(prefix) and not s.name.endswith("_created"):
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out
