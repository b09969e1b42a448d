"""stream_telemetry / sample_once / host_facts through real transports (local and real sshd)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cockpit.telemetry import nvml
from cockpit.telemetry.client import (
    parse_line,
    sample_once,
    stream_telemetry,
)
from cockpit.telemetry.hostfacts import measure as host_facts
from cockpit.telemetry.samples import TelemetrySample, sample_from_agent
from cockpit.transport.local import LocalTransport
from cockpit.transport.ssh import SSHTransport

if TYPE_CHECKING:
    from tests.conftest import FakeNvidiaSmi, SshHome

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def test_conversion_units_and_unknowns() -> None:
    s = sample_from_agent(
        {
            "ts": 100.0,
            "gpu_ts": 99.5,
            "source": "nvidia-smi",
            "gpus": [
                {
                    "index": 3,
                    "uuid": "GPU-x",
                    "name": "H100",
                    "mem_used_mib": 1024,
                    "mem_total_mib": 81920,
                    "util_pct": None,
                    "temp_c": 50,
                    "power_w": None,
                },
                {"uuid": "no index: skipped"},
            ],
            "procs": [{"pid": 7, "gpu_index": None, "mem_used_mib": 512, "belongs_to_run": True}],
            "host": {
                "mem_total_kb": 1_000_000,
                "mem_available_kb": 500_000,
                "cgroup_limit_bytes": 400_000_000,
                "cgroup_usage_bytes": 300_000_000,
            },
            "pids_alive": {"7": True, "x": True},
            "errors": ["e1"],
        },
        "gpu-box-1",
    )
    [g] = s.gpus
    assert (g.host, g.index, g.used_gb, g.total_gb, g.util_pct, g.power_w) == (
        "gpu-box-1",
        3,
        1.0,
        80.0,
        None,
        None,
    )
    assert g.sampled_at == 99.5 and g.source == "nvidia-smi"
    [p] = s.processes
    assert p.gpu_index == -1 and p.used_gb == 0.5 and p.belongs_to_run
    assert s.host is not None
    assert s.host.mem_total_gb == pytest.approx(1.024)
    # min(MemAvailable 0.512 GB, cgroup headroom 0.1 GB)
    assert s.host.mem_available_gb == pytest.approx(0.1)
    assert s.host.cgroup_limit_gb == pytest.approx(0.4)
    assert s.pids_alive == {7: True}
    assert s.errors == ("e1",)


def test_parse_line_skips_garbage() -> None:
    assert parse_line(b"Welcome to gpu-box!", "h") is None
    assert parse_line(b"{broken", "h") is None
    assert parse_line(b'{"no": "ts"}', "h") is None
    assert parse_line(b"[1, 2]", "h") is None
    s = parse_line(b'{"ts": 1, "source": "none", "gpus": "nonsense", "host": 5}', "h")
    assert s is not None and s.gpus == () and s.host is None


async def test_stream_local_sim(sim_gpu_dir: Path) -> None:
    (sim_gpu_dir / "devices.json").write_text(
        json.dumps({"gpu": "x", "devices": [{"index": 0, "uuid": "GPU-0", "name": "Sim", "total_mib": 2048}]})
    )
    (sim_gpu_dir / f"proc-{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "gpu_index": 0, "used_mib": 1024, "updated": time.time()})
    )
    env = {"COCKPIT_SIM_GPU_DIR": str(sim_gpu_dir)}
    samples: list[TelemetrySample] = []
    t0 = time.monotonic()
    gen = stream_telemetry(LocalTransport(), sys.executable, interval=0.1, pids=[os.getpid()], env=env)
    async for s in gen:
        samples.append(s)
        if len(samples) == 5:
            break
    await gen.aclose()
    assert time.monotonic() - t0 < 10
    assert all(s.source == "sim" for s in samples)
    g = samples[-1].gpus[0]
    assert (g.used_gb, g.total_gb, g.host) == (1.0, 2.0, "local")
    assert samples[-1].processes[0].belongs_to_run
    assert samples[-1].pids_alive == {os.getpid(): True}


async def test_stream_restarts_a_dead_agent(tmp_path: Path) -> None:
    # A "python" that prints a banner and lets the agent emit two samples before it exits.
    fake_python = tmp_path / "python"
    fake_python.write_text(f'#!/bin/sh\necho "login banner"\nexec {sys.executable} "$@" --count 2\n')
    fake_python.chmod(0o755)
    seen: list[TelemetrySample] = []
    t0 = time.monotonic()
    gen = stream_telemetry(
        LocalTransport(), str(fake_python), interval=0.05, env={"COCKPIT_SIM_GPU_DIR": str(tmp_path)}
    )
    async for s in gen:
        seen.append(s)
        if len(seen) == 5:
            break
    await gen.aclose()
    kinds = ["error" if any("exited" in e for e in s.errors) else "sample" for s in seen]
    assert kinds == ["sample", "sample", "error", "sample", "sample"]
    assert "status 0" in seen[2].errors[0]
    assert time.monotonic() - t0 < 10


async def test_stream_reports_missing_python_and_backs_off() -> None:
    seen = []
    gen = stream_telemetry(LocalTransport(), "/nonexistent/python3", interval=0.1, max_restarts=1)
    t0 = time.monotonic()
    async for s in gen:
        seen.append(s)
    assert len(seen) == 2
    assert all(s.source == "none" and "could not run" in s.errors[0] for s in seen)
    assert time.monotonic() - t0 >= 0.45  # waited out the 1 s backoff once (jittered: half to all of it, core/backoff.py)


async def test_sample_once_and_host_facts_local(sim_gpu_dir: Path) -> None:
    (sim_gpu_dir / "devices.json").write_text(
        json.dumps(
            {
                "gpu": "x",
                "devices": [
                    {"index": i, "uuid": f"G{i}", "name": "Sim", "total_mib": 4096} for i in range(2)
                ],
            }
        )
    )
    env = {"COCKPIT_SIM_GPU_DIR": str(sim_gpu_dir)}
    s = await sample_once(LocalTransport(), sys.executable, env=env)
    assert s.source == "sim" and len(s.gpus) == 2
    f = await host_facts(LocalTransport(), sys.executable, env=env)
    assert f.host == "local" and f.gpu_count == 2 and f.gpu_mem_total_gib == 4.0
    assert f.gpu_free_gib == (4.0, 4.0)
    assert f.mem_total_gb is not None and f.mem_total_gb > 0


async def test_agent_over_ssh_with_fake_nvidia_smi(ssh_env: SshHome, fake_nvidia_smi: FakeNvidiaSmi) -> None:
    async with SSHTransport("gpu-box-1") as t:
        env = {"PATH": fake_nvidia_smi.path_env}
        samples = []
        gen = stream_telemetry(t, PY, interval=0.2, pids=[4242], env=env)
        async for s in gen:
            samples.append(s)
            # the first samples may come before the first nvidia-smi answered (no GPU reading yet,
            # no error: the poller is not stuck); on a busy machine that takes more than 0.6 s
            if (len(samples) >= 3 and s.gpus) or len(samples) == 100:
                break
        await gen.aclose()
        assert all(s.source == "nvidia-smi" and s.host_label == "gpu-box-1" for s in samples)
        assert samples[-1].gpus, f"no GPU reading in {len(samples)} samples at 0.2 s"
        g0 = samples[-1].gpus[0]
        assert g0.used_gb == pytest.approx(40000 / 1024) and g0.power_w == 312.5
        assert {p.pid: p.belongs_to_run for p in samples[-1].processes} == {4242: True, 5151: False}
        f = await host_facts(t, PY, env=env)
        assert f.gpu_count == 2 and f.gpu_mem_total_gib == pytest.approx(81559 / 1024)
        # The stream's agent was stopped when the consumer let go: only our own command runs now.
        res = await t.run(["pgrep", "-f", "--", "--interval 0.2 --pids 4242"])
        assert (res.returncode, res.stdout) == (1, b""), res


def test_nvml_gateway_never_raises() -> None:
    s = nvml.read_sample("local", [os.getpid()])
    if nvml.available():
        assert s.source == "nvml"
    else:
        assert s.source == "none" and s.errors and s.gpus == ()
        assert nvml.why_unavailable()


async def test_ssh_telemetry_survives_a_dropped_link(ssh_env: SshHome, sim_gpu_dir: Path) -> None:
    (sim_gpu_dir / "devices.json").write_text(
        json.dumps({"gpu": "x", "devices": [{"index": 0, "uuid": "G0", "name": "Sim", "total_mib": 1024}]})
    )
    async with SSHTransport("gpu-box-1") as t:
        kinds: list[str] = []
        gen = stream_telemetry(t, PY, interval=0.1, env={"COCKPIT_SIM_GPU_DIR": str(sim_gpu_dir)})
        async for s in gen:
            kinds.append(s.source)
            if len(kinds) == 2:
                ssh_env.kill_connections()
            if kinds.count("sim") >= 4 and "none" in kinds:
                break
        await gen.aclose()
        assert kinds[:2] == ["sim", "sim"] and "none" in kinds and kinds[-1] == "sim"
        assert t.connects == 2
