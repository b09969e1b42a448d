"""Cockpit's lifecycle on the REAL vLLM (its CPU build): launch, follow, crash, stop — locally and
through the loopback sshd (host alias gpu-box-1, the same machine).

Each launch costs ~60–90 s of CPU on 2 cores, so the engines are few and each carries several
assertions (`-O0`: no torch.compile warm-up):

- a local `vllm serve` run to READY: `status --json` per the contract, `logs` filters, `logs -f`,
  then a VLLM::Worker SIGKILLed mid-request: crashed within seconds, named, nothing of it left;
- an SSH `python -m vllm.entrypoints.openai.api_server --model …` run to READY: the profile's model
  is served (not vLLM's default), then VLLM::EngineCore SIGKILLed mid-request: the API server exits 0
  and the run is CRASHED (not stopped), journal row `crashed`, no orphan left;
- runs stopped while starting (EngineCore and Worker already spawned): an outside SIGTERM is
  "ended unexpectedly", `cockpit down` is `stopped`, and neither leaves a process of the run;
- wide-kv-llama with --max-model-len 65536 in a 1 GiB KV cache: init_not_enough_memory with vLLM's
  own estimate as the change and the knob that sized the cache (VLLM_CPU_KVCACHE_SPACE) named;
- no engine at all: a bound port and a missing model path are critical in `check` and refused by `up`.

Processes are found by the run's own records (its run directory's pid and `tree` files, its
session), never by name; every engine is stopped by `cockpit down` or, failing that, by the
recorded process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.real_engine.conftest import RealVllm

# a launch waits for the machine-wide engine lock (other engineers' engines) and then ~60–90 s
pytestmark = pytest.mark.timeout(1500)

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 420  # a 2-core machine shared with other engineers' engines and tests
FAST = {"optimization-level": 0}  # -O0: no torch.compile warm-up (~30 s less per start)


@contextlib.contextmanager
def _engine_lock(real_vllm: RealVllm) -> Iterator[None]:
    """conftest's engine_lock for module-scoped engines (one real engine on this machine at a time)."""
    import fcntl

    with open(real_vllm.venv.parent / ".engine.lock", "a+") as fh:
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
                if word in " ".join(_cmdline(pid)):
                    return pid
            time.sleep(0.5)
        raise AssertionError(f"no {word} in the run's recorded tree {self.tree()} after {timeout:g} s")

    def live_processes(self) -> list[int]:
        """Processes of the run still alive: its recorded tree (same start time) and its session."""
        out = [pid for pid, start in self.tree().items() if _start_time(pid) == start]
        sid = self.recorded("sid")
        waiter = self.recorded("waiter_pid")
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != waiter and _session(int(name)) == sid:
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
        assert not left, [(p, _cmdline(p)) for p in left]

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


def _stat(pid: int) -> list[str] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest if rest and rest[0] not in ("Z", "X") else None


def _start_time(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[19]) if st else None


def _session(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[3]) if st else None


def _cmdline(pid: int) -> list[str]:
    try:
        return [p.decode() for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]
    except OSError:
        return []


def _cockpit(root: Path, profile: Path, base_env: dict[str, str] | None = None) -> Cockpit:
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


def _port(profile: Path) -> int:
    import yaml

    return int(yaml.safe_load(profile.read_text())["server"]["port"])


def _stream_completion(port: int, model: str, started: threading.Event, out: dict[str, Any]) -> None:
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


def _kill_mid_request(ck: Cockpit, port: int, model: str, word: str) -> float:
    """SIGKILL the run's own `word` process while a request decodes; returns the kill's time."""
    pid = ck.process_named(word, timeout=10)
    started, out = threading.Event(), {}
    t = threading.Thread(target=_stream_completion, args=(port, model, started, out), daemon=True)
    t.start()
    assert started.wait(60), "the request never started streaming"
    t_kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    t.join(60)
    return t_kill


def _journal(ck: Cockpit) -> list[dict[str, Any]]:
    runs = ck.run("runs", "--json")
    assert runs.returncode == 0, runs.stderr
    rows: list[dict[str, Any]] = json.loads(runs.stdout)
    return rows


def _finding(data: dict[str, Any], fid: str) -> dict[str, Any]:
    found = [f for f in data["findings"] if f["id"] == fid]
    assert found, (fid, [(f["id"], f["message"][:120]) for f in data["findings"]], data.get("crash"))
    return found[0]


# ---------------------------------------------------------------- local `vllm serve` to READY


@pytest.fixture(scope="module")
def served(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cockpit]:
    root = tmp_path_factory.mktemp("served")
    ck = _cockpit(root, real_vllm.profile(root, "served", server=FAST))
    with _engine_lock(real_vllm):
        try:
            up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S),
                        timeout=READY_TIMEOUT_S + 60)
            assert up.returncode == 0, up.stdout + up.stderr
            assert "READY" in up.stdout and "/health 200" in up.stdout, up.stdout
            yield ck
        finally:
            ck.reap()


def test_status_follows_the_contract(served: Cockpit, real_vllm: RealVllm) -> None:
    data = served.status()
    assert data["phase"] == "ready" and data["health"] == "200", data
    assert data["backend"] == "vllm" and data["format"].startswith("vllm-0.32."), data["format"]
    # `CPU KV cache size: 1,048,576 tokens`: VLLM_CPU_KVCACHE_SPACE=1 GiB at 1 KiB a token (bfloat16)
    assert data["max_total_num_tokens"] == 1_048_576
    assert data["run"]["pid"] == served.recorded("pid")
    # the waiter recorded the server's tree: the API server's EngineCore and its Worker
    words = " ".join(" ".join(_cmdline(p)) for p in served.tree())
    assert "VLLM::EngineCore" in words and "VLLM::Worker" in words, served.tree()


def test_logs_filters_and_follow(served: Cockpit, real_vllm: RealVllm) -> None:
    kv = served.run("logs", str(served.profile), "--filter", "KV cache size")
    assert kv.returncode == 0, kv.stderr
    assert "CPU KV cache size: 1,048,576 tokens" in kv.stdout
    assert all("KV cache size" in ln for ln in kv.stdout.splitlines()), kv.stdout
    assert len(served.run("logs", str(served.profile), "--tail", "3").stdout.splitlines()) == 3
    # -f prints what the server writes from now on: a request's access line
    follow = subprocess.Popen([PY, "-m", "cockpit", "logs", str(served.profile), "-f", "--tail", "0",
                               "--filter", "POST /v1/completions"],
                              env=served.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=served.root)
    try:
        time.sleep(3)  # attached
        body = json.dumps({"model": str(real_vllm.tiny), "prompt": "hi", "max_tokens": 2}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{_port(served.profile)}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200
        line = _readline_within(follow, 30)
        assert '"POST /v1/completions HTTP/1.1" 200' in line, line
    finally:
        follow.terminate()
        follow.wait(10)


def _readline_within(proc: subprocess.Popen[str], timeout: float) -> str:
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    t.start()
    t.join(timeout)
    return got[0] if got else ""


def test_worker_sigkill_is_a_named_crash_within_seconds(served: Cockpit, real_vllm: RealVllm) -> None:
    t_kill = _kill_mid_request(served, _port(served.profile), str(real_vllm.tiny), "VLLM::Worker")
    data, _ = served.wait_phase(("crashed", "stopped"), 60)
    took = time.monotonic() - t_kill
    assert data["phase"] == "crashed", data
    assert took < 30, f"crashed only {took:.1f} s after the kill"
    crash = data["crash"]
    assert "Worker proc VllmWorker-0 died unexpectedly" in crash["message"], crash
    fid = "host_oom_killed" if crash["kind"] == "host_oom_killed" else "process_died"
    f = _finding(data, fid)
    assert "VllmWorker-0" in f["message"] and "no known signature" not in f["message"], f
    assert "dmesg" in f["message"]
    # vLLM's own cleanup plus the waiter's: nothing of the run is left
    served.wait_no_process()
    rows = _journal(served)
    assert rows[0]["outcome"] == "crashed", rows[0]


# ---------------------------------------------------------------- the api_server entry, over SSH


def test_api_server_entry_over_ssh_serves_the_profiles_model_and_an_enginecore_kill_is_a_crash(
        real_vllm: RealVllm, ssh_home: Any, tmp_path: Path, engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "apisrv", server=FAST, hosts=[{"ssh": "gpu-box-1"}],
                                program=[str(real_vllm.python), "-m", "vllm.entrypoints.openai.api_server"])
    ck = _cockpit(tmp_path, profile, base_env={**os.environ, **ssh_home.env})
    try:
        chk = ck.run("check", str(profile), "--json")
        argv = json.loads(chk.stdout)["argv"]
        assert argv[argv.index("--model") + 1] == str(real_vllm.tiny), argv  # not the ignored positional
        up = ck.run("up", str(profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 0, up.stdout + up.stderr
        port = _port(profile)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as resp:
            models = [m["id"] for m in json.load(resp)["data"]]
        assert models == [str(real_vllm.tiny)], models  # the profile's model, not vLLM's default
        data = ck.status()
        assert data["phase"] == "ready" and data["format"].startswith("vllm-0.32."), data
        assert data["max_total_num_tokens"] == 1_048_576

        _kill_mid_request(ck, port, str(real_vllm.tiny), "VLLM::EngineCore")
        data, took = ck.wait_phase(("crashed", "stopped"), 90)
        assert data["phase"] == "crashed", data  # the API server exits 0: nobody stopped it
        assert took < 30, f"crashed only {took:.1f} s after the kill"
        assert ck.recorded("exit_code") == 0
        f = _finding(data, "process_died")
        assert "EngineCore" in f["message"], f
        ck.wait_no_process()
        assert _journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


# ---------------------------------------------------------------- endings while starting


def _start_and_wait_for_engine(ck: Cockpit) -> None:
    up = ck.run("up", str(ck.profile), "--wait", "started", timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    ck.process_named("VLLM::EngineCore")
    ck.process_named("VLLM::Worker")


def test_outside_sigterm_is_an_unexpected_end_and_leaves_nothing(real_vllm: RealVllm, tmp_path: Path,
                                                                engine_lock: None) -> None:
    ck = _cockpit(tmp_path, real_vllm.profile(tmp_path, "termed", server=FAST))
    try:
        _start_and_wait_for_engine(ck)
        os.kill(ck.recorded("pid"), signal.SIGTERM)  # an operator's `kill`, not Cockpit's stop
        data, _ = ck.wait_phase(("crashed", "stopped"), 60)
        assert data["phase"] == "crashed", data
        assert "ended unexpectedly" in data["crash"]["message"], data["crash"]
        assert not (ck.run_dir() / "stopped_by").exists()
        ck.wait_no_process()  # the orphaned EngineCore/Worker were ended by the run's waiter
        assert _journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


def test_down_while_starting_over_ssh_leaves_no_process(real_vllm: RealVllm, ssh_home: Any, tmp_path: Path,
                                                        engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "downed", server=FAST, hosts=[{"ssh": "gpu-box-1"}])
    ck = _cockpit(tmp_path, profile, base_env={**os.environ, **ssh_home.env})
    try:
        _start_and_wait_for_engine(ck)
        tree = ck.tree()
        down = ck.run("down", str(profile), "--timeout", "20")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not [p for p, s in tree.items() if _start_time(p) == s]
        ck.wait_no_process(5)
        assert ck.status()["phase"] == "stopped"
        assert _journal(ck)[0]["outcome"] == "stopped"
    finally:
        ck.reap()


# ---------------------------------------------------------------- a KV cache too small, a failed start


def test_kv_cache_too_small_for_max_model_len(real_vllm: RealVllm, tmp_path: Path, engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "widekv", server={**FAST, "model": str(real_vllm.wide_kv),
                                                            "max-model-len": 65536})
    ck = _cockpit(tmp_path, profile)
    try:
        up = ck.run("up", str(profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 1, up.stdout + up.stderr
        data = ck.status()
        assert data["phase"] == "crashed" and data["crash"]["kind"] == "init_not_enough_memory", data["crash"]
        f = _finding(data, "init_not_enough_memory")
        # vLLM's own estimate of what fits (1 GiB / 32 KiB a token, less what its blocks round off)
        est = f["changes"][0]
        assert est["flag"] == "--max-model-len" and est["from"] == 65536 and 30_000 < est["to"] <= 32_768, f
        assert "VLLM_CPU_KVCACHE_SPACE" in f["message"] and "--gpu-memory-utilization" not in str(f["changes"]), f
        ck.wait_no_process()  # vLLM leaves its EngineCore behind a failed start: the waiter does not
        assert _journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


# ---------------------------------------------------------------- refused before launch (no engine)


def test_bound_port_and_missing_model_are_critical_and_refused(real_vllm: RealVllm, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    profile = real_vllm.profile(tmp_path, "refused", server={"model": str(missing)})
    ck = _cockpit(tmp_path, profile)
    with socket.socket() as s:
        s.bind(("127.0.0.1", _port(profile)))
        s.listen()
        chk = ck.run("check", str(profile), "--json")
        assert chk.returncode == 1, chk.stdout + chk.stderr
        crit = {f["id"]: f for f in json.loads(chk.stdout)["findings"] if f["severity"] == "critical"}
        assert set(crit) >= {"model_path_missing", "port_in_use"}, crit
        assert str(missing) in crit["model_path_missing"]["message"]
        up = ck.run("up", str(profile), "--wait", "started")
        assert up.returncode == 1 and "refused before launch" in up.stderr, up.stdout + up.stderr
        assert "model_path_missing" in up.stderr and "port_in_use" in up.stderr
    assert not (Path(ck.env["COCKPIT_RUNS_ROOT"]) / "refused").exists() or not any(
        (Path(ck.env["COCKPIT_RUNS_ROOT"]) / "refused").glob("2*")), "a run was launched"
