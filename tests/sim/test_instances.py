"""Issue 17, defect 14: each simulator instance has its own GPUs unless told to share; simulated
GPUs never answer for a real profile; a scheduler that dies during warmup is the server's failure
(503), not a 400; the demo's port can be chosen so tests never use 30123."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from cockpit.commands.demo import demo_profile
from cockpit.core.profile import load_profile
from cockpit.sim.gpus import instance_dir
from cockpit.supervisor.telemetry_feed import sim_dir_of
from cockpit.telemetry.client import agent_source
from tests.sim.conftest import free_port

SMALL = ["--model-path", "/models/Llama-3.1-8B", "--tp", "1", "--sim-gpu", "h100", "--sim-model", "llama-3.1-8b"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COCKPIT_SIM_GPU_DIR"}
    env["HOME"] = str(home)
    return env


def _start(home: Path, log: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "cockpit", "sim", "--port", str(port), "--sim-speed", "200", *SMALL, *extra]
    with open(log, "wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=_env(home), start_new_session=True)


def _wait(log: Path, proc: subprocess.Popen[bytes], pattern: str, timeout: float = 60) -> re.Match[str]:
    rx = re.compile(pattern, re.M)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        m = rx.search(text)
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in the log:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_two_simulators_do_not_see_each_others_processes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    a_port, b_port = free_port(), free_port()
    a = _start(home, tmp_path / "a.log", a_port)
    try:
        _wait(tmp_path / "a.log", a, r"fired up and ready to roll")
        b = _start(home, tmp_path / "b.log", b_port)
        try:
            _wait(tmp_path / "b.log", b, r"fired up and ready to roll")
            a_avail = _wait(tmp_path / "a.log", a, r"Load weight begin\. avail mem=([\d.]+) GB").group(1)
            b_avail = _wait(tmp_path / "b.log", b, r"Load weight begin\. avail mem=([\d.]+) GB").group(1)
            # b started while a held ~70 GiB of "its" H100: on shared GPUs b would see a's memory
            assert a_avail == b_avail
            root = home / ".cache/cockpit/sim-gpus"
            assert sorted(p.name for p in root.iterdir()) == sorted([f"port-{a_port}", f"port-{b_port}"])
            pids_a = {json.loads(p.read_text())["pid"] for p in (root / f"port-{a_port}").glob("proc-*.json")}
            pids_b = {json.loads(p.read_text())["pid"] for p in (root / f"port-{b_port}").glob("proc-*.json")}
            assert pids_a and pids_b and not pids_a & pids_b
        finally:
            _stop(b)
    finally:
        _stop(a)


def test_told_to_share_means_one_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    home = tmp_path / "home"
    home.mkdir()
    a = _start(home, tmp_path / "a.log", free_port(), "--sim-dir", str(shared))
    try:
        _wait(tmp_path / "a.log", a, r"fired up and ready to roll")
        assert list(shared.glob("proc-*.json"))
        assert not (home / ".cache/cockpit/sim-gpus").exists()
    finally:
        _stop(a)


def test_profiles_map_to_their_simulator_or_to_none(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("COCKPIT_SIM_GPU_DIR", raising=False)
    assert sim_dir_of(demo_profile()) == "~/.cache/cockpit/sim-gpus/port-30123" == instance_dir(30123)
    assert sim_dir_of(demo_profile(port=41234)) == "~/.cache/cockpit/sim-gpus/port-41234"
    real = tmp_path / "real.yaml"
    real.write_text("name: real\nbackend: sglang\nhosts: [{ssh: local}]\nserver: {model-path: /m, tp: 1}\n")
    assert sim_dir_of(load_profile(real)) is None
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(tmp_path / "g"))
    assert sim_dir_of(load_profile(real)) is None
    assert sim_dir_of(demo_profile()) == str(tmp_path / "g")


def test_agent_never_reads_simulated_gpus_unasked(tmp_path: Path) -> None:
    """A real profile's agent on a GPU-less host: a demo's files in the home must not answer."""
    home = tmp_path / "home"
    d = home / ".cache/cockpit/sim-gpus"
    d.mkdir(parents=True)
    (d / "devices.json").write_text(json.dumps({"gpu": "x", "devices": [{"index": 0, "uuid": "GPU-sim-0",
                                                                        "name": "sim", "total_mib": 1000}]}))
    env = {**_env(home), "PATH": str(tmp_path)}  # no nvidia-smi; NVML fails without a driver
    out = subprocess.run([sys.executable, "-", "--once"], input=agent_source(), capture_output=True, env=env,
                         timeout=30)
    sample = json.loads(out.stdout.decode().splitlines()[0])
    assert sample["source"] != "sim" and sample["gpus"] == []


def test_scheduler_dead_during_warmup_is_not_a_400(tmp_path: Path) -> None:
    """How a simulator answered its own warmup with 400: its rank-0 scheduler was killed (a second
    instance sharing the GPU directory saw it as a foreign GPU holder) and the dead-scheduler reply
    carried no status, which the handler turned into 400 Bad Request."""
    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "s.log"
    port = free_port()
    # the kill must land between "Uvicorn running" and the warmup request: that window is the
    # warmup thread's max(0.5 s, 1 simulated s) wait, 0.5 s at any speed >= 1, so a fast start-up
    # (speed 20: ~1.3 s instead of ~12 s at speed 2) leaves the race as it was
    argv = [sys.executable, "-m", "cockpit", "sim", "--port", str(port), "--sim-speed", "20", *SMALL]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=_env(home), start_new_session=True)
    try:
        _wait(log, proc, r"Uvicorn running")
        rank0 = json.loads(next((home / f".cache/cockpit/sim-gpus/port-{port}").glob("proc-*.json")).read_text())["pid"]
        os.kill(rank0, signal.SIGKILL)
        m = _wait(log, proc, r"warmup error: .*")
        assert "503" in m.group(0) and "400" not in m.group(0)
    finally:
        _stop(proc)


def test_demo_port_option(tmp_path: Path) -> None:
    assert demo_profile(port=40001).server["port"] == 40001
    out = subprocess.run([sys.executable, "-m", "cockpit", "demo", "--port", "0"], capture_output=True, text=True,
                         timeout=60, env=_env(tmp_path))
    assert out.returncode == 2 and "--port" in out.stderr and "Traceback" not in out.stderr
