"""Telemetry faults: no NVML here (the agent's fallback chain), nvidia-smi missing, hanging or
failing, the agent SIGKILLed. GPU values are then unknown (None), or the last real value with its
growing age — never a zero that looks real — and come back when the source does."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from cockpit.commands._support import rank_gpu_json
from cockpit.core.profile import parse_profile
from cockpit.supervisor.supervisor import Supervisor
from cockpit.telemetry.client import agent_source, sample_once, stream_telemetry
from cockpit.telemetry.samples import TelemetrySample
from cockpit.transport.local import LocalTransport
from tests.reliability.helpers import PY


def _no_fake_zeros(sample: TelemetrySample) -> None:
    for g in sample.gpus:
        for v in (g.used_gb, g.total_gb):
            assert v is None or v > 0 or g.index == 1, g  # GPU 1 of the fake really uses 1 GiB


async def test_nvidia_smi_missing_and_no_nvml_give_unknown_not_zero(tmp_path: Path, ledger) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    # a PATH with python's own directory and nothing else: no nvidia-smi, and no NVML library here
    # (and a HOME without a simulator's default GPU directory, the chain's last resort)
    env = {"PATH": f"{empty}{os.pathsep}{Path(PY).parent}", "COCKPIT_SIM_GPU_DIR": "", "HOME": str(tmp_path)}
    ledger.fault("telemetry")
    s = await sample_once(LocalTransport(), PY, env=env, timeout=30)
    assert s.source == "none" and s.gpus == ()
    assert s.host is not None and s.host.mem_total_gb  # the host side still reads
    ledger.survive("telemetry")


async def test_hanging_then_recovering_nvidia_smi(fake_nvidia_smi, ledger) -> None:
    fake_nvidia_smi.use("hang")
    env = {**os.environ, "PATH": fake_nvidia_smi.path_env}
    env.pop("COCKPIT_SIM_GPU_DIR", None)
    # the agent as it is sent to a host: its assembled text on stdin
    proc = subprocess.Popen([PY, "-", "--interval", "0.2", "--smi-timeout", "1"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdin.write(agent_source())
    proc.stdin.close()
    ledger.fault("telemetry")
    try:
        t0 = time.monotonic()
        lines = []
        while time.monotonic() - t0 < 2.5:
            lines.append(json.loads(proc.stdout.readline()))
        # the stream goes on while nvidia-smi hangs: lines keep coming, with no GPU values and a reason
        assert len(lines) >= 5, len(lines)
        assert all(ln["gpus"] == [] for ln in lines), lines[-1]
        assert any("not answer" in " ".join(ln["errors"]) for ln in lines), [ln["errors"] for ln in lines]
        fake_nvidia_smi.use("ok")
        back = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ln = json.loads(proc.stdout.readline())
            if ln["gpus"]:
                back = ln
                break
        assert back is not None, "values did not come back"
        g0 = next(g for g in back["gpus"] if g["index"] == 0)
        assert g0["mem_used_mib"] == 40000 and g0["mem_total_mib"] == 81559
        ledger.note(f"nvidia-smi hang: values back {time.monotonic() - t0:.1f} s after start")
        ledger.survive("telemetry")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def test_failing_nvidia_smi_is_unknown(fake_nvidia_smi, ledger) -> None:
    fake_nvidia_smi.use("fail")
    env = {"PATH": fake_nvidia_smi.path_env, "COCKPIT_SIM_GPU_DIR": "", "HOME": str(fake_nvidia_smi.dir)}
    ledger.fault("telemetry")
    s = await sample_once(LocalTransport(), PY, env=env, timeout=30)
    assert s.gpus == () and s.errors, s
    fake_nvidia_smi.use("na")
    s = await sample_once(LocalTransport(), PY, env=env, timeout=30)
    assert s.gpus and s.gpus[0].util_pct is None and s.gpus[0].temp_c is None and s.gpus[0].power_w is None
    assert s.processes and s.processes[0].used_gb is None  # [N/A] is unknown, not 0
    ledger.survive("telemetry")


def _agent_pids() -> list[int]:
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"--interval" in cmd and b"-" in cmd:
            out.append(int(name))
    return out


async def test_agent_killed_values_unknown_then_recovered(fake_nvidia_smi, tmp_path: Path, ledger) -> None:
    env = {"PATH": fake_nvidia_smi.path_env, "COCKPIT_SIM_GPU_DIR": "", "HOME": str(tmp_path)}
    gen = stream_telemetry(LocalTransport(), PY, interval=0.2, env=env)
    # what the operator sees: the supervisor's snapshot of the same samples, per rank
    prof = parse_profile({"name": "tele", "server": {"tp": 2}}, "tele.yaml")
    sup = Supervisor(prof, runs_root=str(tmp_path / "runs"))
    sup.fold.state.rank("TP0")
    node = sup.nodes[0]
    try:
        first = await asyncio.wait_for(gen.__anext__(), 20)
        while not first.gpus:  # the agent's first line may precede its first nvidia-smi answer
            assert first.source == "nvidia-smi"
            first = await asyncio.wait_for(gen.__anext__(), 20)
        _no_fake_zeros(first)
        sup.telemetry.take(node, first)
        pids = _agent_pids()
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        ledger.fault("telemetry")
        killed_at = time.time()
        gap = None
        while True:
            s = await asyncio.wait_for(gen.__anext__(), 20)
            if s.source == "none":
                gap = s
                break
        assert gap.gpus == () and gap.errors and "exited" in gap.errors[0], gap
        sup.telemetry.take(node, gap)
        await asyncio.sleep(0.5)
        snap = sup.snapshot()
        g = rank_gpu_json(snap, "TP0")
        # the last real value is kept with its age (dimmed on screen), never replaced by a 0
        assert g["used_gb"] is None or g["used_gb"] == round(first.gpus[0].used_gb or 0, 2)
        assert g["used_gb"] != 0
        assert g["age_s"] is not None and g["age_s"] >= round(time.time() - killed_at, 1) - 0.2, g
        back = await asyncio.wait_for(gen.__anext__(), 20)  # restarted after 1 s
        while not back.gpus:
            assert back.source in ("nvidia-smi", "none")
            back = await asyncio.wait_for(gen.__anext__(), 20)
        sup.telemetry.take(node, back)
        g = rank_gpu_json(sup.snapshot(), "TP0")
        assert g["age_s"] is not None and g["age_s"] < 2
        ledger.survive("telemetry")
    finally:
        await gen.aclose()
        for pid in _agent_pids():
            os.kill(pid, signal.SIGKILL)


def test_status_shows_unknown_gpu_values_as_null_then_recovers(tmp_path: Path, ledger) -> None:
    from tests.reliability.helpers import make_env, sim_profile

    env = make_env(tmp_path)
    sim = tmp_path / "gpus"
    sim.mkdir()
    env.env["COCKPIT_SIM_GPU_DIR"] = str(sim)
    env.write_profile("tel", sim_profile("tel", "local", tmp_path, sim, speed="200", tp=2, traffic="none"))
    try:
        up = env.cockpit("up", "tel", "--wait", "ready", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr

        def ranks() -> list[dict]:
            st = env.cockpit("status", "tel", "--json")
            return list(json.loads(st.stdout)["ranks"])

        assert all(r["gpu"]["used_gb"] and r["gpu"]["used_gb"] > 10 for r in ranks())
        # the GPU source goes away (the simulator's device list is gone, as a driver would be)
        devices = sim / "devices.json"
        devices.rename(sim / "devices.json.away")
        ledger.fault("telemetry")
        for r in ranks():
            g = r["gpu"]
            assert g["index"] is not None  # which GPU is still known from the flags
            assert g["used_gb"] is None and g["total_gb"] is None and g["age_s"] is None, g
        (sim / "devices.json.away").rename(devices)
        assert all(r["gpu"]["used_gb"] and r["gpu"]["used_gb"] > 10 for r in ranks())
        ledger.survive("telemetry")
    finally:
        env.cockpit("down", "tel", "--timeout", "5")
