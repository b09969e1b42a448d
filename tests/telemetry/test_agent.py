"""The telemetry agent as a real process: nvidia-smi (fake binary), simulator files, host memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.telemetry.client import agent_source

if TYPE_CHECKING:
    from tests.conftest import FakeNvidiaSmi


def run_agent(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> list[dict[str, Any]]:
    full_env = dict(os.environ)
    full_env.pop("COCKPIT_SIM_GPU_DIR", None)
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-", *args], input=agent_source(), capture_output=True, env=full_env, timeout=timeout
    )
    assert out.returncode == 0, out.stderr.decode()
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


def no_nvml_env(path: str) -> dict[str, str]:
    # The venv has nvidia-ml-py; without a driver NVML fails to initialise and nvidia-smi is next.
    return {"PATH": path}


def test_nvidia_smi_values_and_processes(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    [s] = run_agent("--once", "--pids", "4242", env=no_nvml_env(fake_nvidia_smi.path_env))
    assert s["source"] == "nvidia-smi"
    g0, g1 = s["gpus"]
    assert g0 == {
        "index": 0,
        "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "mem_used_mib": 40000.0,
        "mem_total_mib": 81559.0,
        "util_pct": 97.0,
        "temp_c": 61.0,
        "power_w": 312.5,
    }
    assert g1["index"] == 1 and g1["mem_used_mib"] == 1024.0
    procs = {p["pid"]: p for p in s["procs"]}
    assert procs[4242] == {"pid": 4242, "gpu_index": 0, "mem_used_mib": 39000.0, "belongs_to_run": True}
    assert procs[5151]["gpu_index"] == 1 and procs[5151]["belongs_to_run"] is False
    assert s["errors"] == []
    assert s["host"]["mem_total_kb"] > 0 and s["host"]["mem_available_kb"] > 0
    assert "4242" in s["pids_alive"]


def test_nvidia_smi_not_available_fields_are_null(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    fake_nvidia_smi.use("na")
    [s] = run_agent("--once", env=no_nvml_env(fake_nvidia_smi.path_env))
    [g] = s["gpus"]
    assert g["mem_used_mib"] == 40000.0
    assert g["util_pct"] is None and g["temp_c"] is None and g["power_w"] is None
    [p] = s["procs"]
    assert p["mem_used_mib"] is None


def test_hanging_nvidia_smi_does_not_stall_the_stream(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    fake_nvidia_smi.use("hang")
    t0 = time.monotonic()
    lines = run_agent(
        "--interval",
        "0.2",
        "--smi-timeout",
        "0.6",
        "--count",
        "12",
        env=no_nvml_env(fake_nvidia_smi.path_env),
    )
    elapsed = time.monotonic() - t0
    assert len(lines) == 12
    assert elapsed < 8, elapsed  # 12 lines at 0.2 s, not 12 × the nvidia-smi timeout
    assert all(s["gpus"] == [] for s in lines)
    errors = " ".join(e for s in lines for e in s["errors"])
    assert "did not answer" in errors or "has not answered" in errors
    # Host values keep coming while the GPU query hangs.
    assert all(s["host"]["mem_total_kb"] for s in lines)
    # and the agent takes its hung nvidia-smi with it when it leaves (it used to sleep on, orphaned)
    time.sleep(0.3)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith(str(fake_nvidia_smi.dir))]
    assert not left, [_cmdline(p) for p in left]


def _cmdline(proc_dir: Path) -> str:
    try:
        raw = (proc_dir / "cmdline").read_bytes()
    except OSError:
        return ""
    # a script runs as `python3 /path/nvidia-smi …`: the script path is the second word
    words = raw.split(b"\0")
    return next((w.decode(errors="replace") for w in words[:2] if b"nvidia-smi" in w), "")


def test_failing_nvidia_smi_is_reported(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    fake_nvidia_smi.use("fail")
    [s] = run_agent("--once", env=no_nvml_env(fake_nvidia_smi.path_env))
    assert s["gpus"] == []
    assert any("exited with 9" in e and "NVIDIA-SMI has failed" in e for e in s["errors"])


def _write_sim(d: Path, procs: list[dict[str, Any]]) -> None:
    (d / "devices.json").write_text(
        json.dumps(
            {
                "gpu": "RTX PRO 6000",
                "devices": [
                    {"index": 0, "uuid": "GPU-sim-0", "name": "NVIDIA RTX PRO 6000", "total_mib": 97887},
                    {"index": 1, "uuid": "GPU-sim-1", "name": "NVIDIA RTX PRO 6000", "total_mib": 97887},
                ],
            }
        )
    )
    for p in procs:
        (d / f"proc-{p['pid']}.json").write_text(json.dumps(p))


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_sim_source_counts_live_processes_only(sim_gpu_dir: Path, fake_nvidia_smi: FakeNvidiaSmi) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        dead = _dead_pid()
        now = time.time()
        _write_sim(
            sim_gpu_dir,
            [
                {"pid": child.pid, "gpu_index": 0, "used_mib": 80000, "updated": now},
                {"pid": dead, "gpu_index": 0, "used_mib": 5000, "updated": now},
                {"pid": os.getpid(), "gpu_index": 1, "used_mib": 1000.5, "updated": now},
            ],
        )
        (sim_gpu_dir / "proc-999999999.json").write_text("{not json")
        # The sim dir is explicit, so the simulator wins even though nvidia-smi is on PATH.
        [s] = run_agent(
            "--once",
            "--pids",
            str(os.getpid()),
            env={"COCKPIT_SIM_GPU_DIR": str(sim_gpu_dir), "PATH": fake_nvidia_smi.path_env},
        )
    finally:
        child.kill()
        child.wait()
    assert s["source"] == "sim"
    g0, g1 = s["gpus"]
    assert g0["mem_used_mib"] == 80000.0 and g0["mem_total_mib"] == 97887 and g0["uuid"] == "GPU-sim-0"
    assert g1["mem_used_mib"] == 1000.5
    assert g0["temp_c"] is None and g0["power_w"] is None and g0["util_pct"] is None
    procs = {p["pid"]: p for p in s["procs"]}
    assert dead not in procs
    # The child of this test process descends from --pids: it belongs to the run.
    assert procs[child.pid]["belongs_to_run"] is True
    assert procs[os.getpid()]["belongs_to_run"] is True
    assert any("proc-999999999.json" in e for e in s["errors"])


def test_sim_dir_flag_and_missing_devices(sim_gpu_dir: Path) -> None:
    [s] = run_agent("--once", "--sim-dir", str(sim_gpu_dir))
    assert s["source"] == "sim" and s["gpus"] == []
    assert any("no devices.json" in e for e in s["errors"])


def test_pids_alive() -> None:
    dead = _dead_pid()
    [s] = run_agent("--once", "--source", "none", "--pids", f"{os.getpid()},{dead}")
    assert s["pids_alive"] == {str(os.getpid()): True, str(dead): False}
    assert s["source"] == "none" and s["gpus"] == []


def test_agent_is_stdlib_only() -> None:
    """Only the stdlib (and pynvml when the host has it); the package's own modules are imported
    only under the guard that skips them when procfs.py's text ran first, as it does on a host."""
    import ast

    tree = ast.parse(agent_source())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "globals()" in ast.unparse(node.test):
            guarded |= {id(n) for n in ast.walk(node)}
    mods = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module.split(".")[0])
    assert mods - {"pynvml"} <= set(sys.stdlib_module_names)
    assert "cockpit" not in mods


def test_assembled_agent_runs_standalone_and_reports_processes(sim_gpu_dir: Path, tmp_path: Path) -> None:
    """The agent as sent to a host (procfs.py, then agent.py) on `python3 -` with no cockpit to
    import (-I -S: no site-packages, no working directory on the path): the simulated GPUs'
    processes, which of them descend from --pids (walked up by procfs's parent links), which
    --pids are alive."""
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        dead = _dead_pid()
        now = time.time()
        _write_sim(sim_gpu_dir, [
            {"pid": grandchild, "gpu_index": 0, "used_mib": 70000, "updated": now},
            {"pid": os.getpid(), "gpu_index": 1, "used_mib": 2048, "updated": now},
            {"pid": dead, "gpu_index": 1, "used_mib": 5000, "updated": now},
        ])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
        out = subprocess.run([sys.executable, "-I", "-S", "-", "--once", "--sim-dir", str(sim_gpu_dir),
                              "--pids", f"{parent.pid},{dead}"],
                             input=agent_source(), capture_output=True, env=env, cwd=tmp_path, timeout=30)
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()
    assert out.returncode == 0, out.stderr.decode()
    [s] = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert s["source"] == "sim" and s["errors"] == []
    procs = {p["pid"]: p for p in s["procs"]}
    assert set(procs) == {grandchild, os.getpid()}  # the dead one holds nothing, whatever its file says
    assert procs[grandchild] == {"pid": grandchild, "gpu_index": 0, "mem_used_mib": 70000.0, "belongs_to_run": True}
    assert procs[os.getpid()]["belongs_to_run"] is False  # this test is no descendant of the run
    assert s["pids_alive"] == {str(parent.pid): True, str(dead): False}
    assert [g["mem_used_mib"] for g in s["gpus"]] == [70000.0, 2048.0]


FAKE_PYNVML = '''
"""A stand-in for nvidia-ml-py with two GPUs; GPU 1 cannot report power or temperature."""
class NVMLError(Exception):
    pass

class _Mem:
    def __init__(self, used, total):
        self.used, self.total = used, total

class _Util:
    gpu = 88

class _Proc:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used

MiB = 1024 * 1024

def nvmlInit():
    pass

def nvmlDeviceGetCount():
    return 2

def nvmlDeviceGetHandleByIndex(i):
    return i

def nvmlDeviceGetUUID(h):
    return b"GPU-nvml-%d" % h  # older bindings return bytes

def nvmlDeviceGetName(h):
    return "NVIDIA H200"

def nvmlDeviceGetMemoryInfo(h):
    return _Mem(1000 * MiB, 143771 * MiB)

def nvmlDeviceGetUtilizationRates(h):
    if h == 1:
        raise NVMLError("Not Supported")
    return _Util()

def nvmlDeviceGetTemperature(h, sensor):
    if h == 1:
        raise NVMLError("Not Supported")
    return 40

def nvmlDeviceGetPowerUsage(h):
    if h == 1:
        raise NVMLError("Not Supported")
    return 123456  # mW

def nvmlDeviceGetComputeRunningProcesses(h):
    if h == 1:
        raise NVMLError("GPU is lost")
    return [_Proc(PID, 900 * MiB), _Proc(77, None)]
'''


def test_nvml_source_with_every_error_as_null(tmp_path: Path) -> None:
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML.replace("PID", str(os.getpid())))
    [s] = run_agent(
        "--once", "--pids", str(os.getpid()), env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"}
    )
    assert s["source"] == "nvml"
    g0, g1 = s["gpus"]
    assert g0 == {
        "index": 0,
        "uuid": "GPU-nvml-0",
        "name": "NVIDIA H200",
        "mem_used_mib": 1000.0,
        "mem_total_mib": 143771.0,
        "util_pct": 88,
        "temp_c": 40,
        "power_w": 123.456,
    }
    assert (g1["util_pct"], g1["temp_c"], g1["power_w"]) == (None, None, None)
    assert g1["mem_used_mib"] == 1000.0
    assert s["procs"] == [
        {"pid": os.getpid(), "gpu_index": 0, "mem_used_mib": 900.0, "belongs_to_run": True},
        {"pid": 77, "gpu_index": 0, "mem_used_mib": None, "belongs_to_run": False},
    ]
    assert s["errors"] == ["NVML: cannot list processes on GPU 1"]


def test_local_stream_reads_nvml_in_process(tmp_path: Path) -> None:
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML.replace("PID", "4242"))
    code = (
        "import asyncio, json\n"
        "from cockpit.telemetry import nvml\n"
        "from cockpit.telemetry.client import stream_telemetry\n"
        "from cockpit.transport.local import LocalTransport\n"
        "async def main():\n"
        "    out = []\n"
        "    gen = stream_telemetry(LocalTransport(), 'python-not-needed', interval=0.05, pids=[4242])\n"
        "    async for s in gen:\n"
        "        out.append([s.source, s.gpus[0].used_gb, s.gpus[1].power_w, [p.belongs_to_run for p in s.processes]])\n"
        "        if len(out) == 2: break\n"
        "    await gen.aclose()\n"
        "    print(json.dumps(out))\n"
        "asyncio.run(main())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COCKPIT_SIM_GPU_DIR"}
    env["PYTHONPATH"] = str(fake)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    samples = json.loads(out.stdout)
    assert samples == [["nvml", 1000 / 1024, None, [True, False]]] * 2
