"""Issue 34, item 5: a SIGKILL is an OOM kill only with evidence. The host program's waiter reads
the cgroup's oom_kill counter at the start and at the end of a run, and memory near its limit on
its poll; real processes killed by a real SIGKILL, a test-written cgroup tree (COCKPIT_CGROUP_ROOT)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cockpit.remote.host import HostOps
from cockpit.remote.programs.oomwatch import CGROUP_ROOT_ENV, _cgroup_dirs
from cockpit.transport.local import LocalTransport

SLEEPER = "import time; print('up', flush=True); time.sleep(600)"
EVENTS = "low 0\nhigh 0\nmax 0\noom {n}\noom_kill {n}\noom_group_kill 0\n"


def _cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, limit: int = 64 << 30, used: int = 1 << 30) -> Path:
    """The server's cgroup directory as the waiter will find it, under a test-written root."""
    monkeypatch.setenv(CGROUP_ROOT_ENV, str(tmp_path / "cg"))
    own = Path(_cgroup_dirs(os.getpid())[0])  # the server runs in the test's own cgroup
    own.mkdir(parents=True, exist_ok=True)
    (own / "memory.events").write_text(EVENTS.format(n=0))
    (own / "memory.max").write_text(f"{limit}\n")
    (own / "memory.current").write_text(f"{used}\n")
    return own


async def _killed_run(tmp_path: Path, before_kill=None):  # type: ignore[no-untyped-def]
    ops = HostOps(LocalTransport(), runs_root=str(tmp_path / "runs"))
    res = await ops.launch("k", "r1", [sys.executable, "-c", SLEEPER], env={}, cwd=str(tmp_path), log="k.log")
    assert res.get("launched"), res
    pid = res["run"]["pid"]
    deadline = time.monotonic() + 20
    while "up" not in (tmp_path / "k.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    if before_kill is not None:
        before_kill()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = await ops.find("k")
        if found is not None and found["exit_code"] is not None:
            return found
        time.sleep(0.1)
    raise AssertionError("the waiter never recorded the exit")


async def test_a_sigkill_with_the_counter_still_is_no_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cgroup(tmp_path, monkeypatch)
    found = await _killed_run(tmp_path)
    assert found["exit_code"] == 128 + signal.SIGKILL
    assert found["oom_evidence"] is None


async def test_the_oom_kill_counter_rising_is_the_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = _cgroup(tmp_path, monkeypatch)
    found = await _killed_run(tmp_path, lambda: (own / "memory.events").write_text(EVENTS.format(n=1)))
    assert found["exit_code"] == 128 + signal.SIGKILL
    assert "oom_kill counter rose from 0 to 1" in found["oom_evidence"], found["oom_evidence"]
    assert str(own / "memory.events") in found["oom_evidence"]


async def test_memory_at_its_limit_just_before_is_the_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cgroup(tmp_path, monkeypatch, limit=1 << 30, used=(1 << 30) - (10 << 20))  # 10 MiB of 1 GiB left
    found = await _killed_run(tmp_path)
    assert "memory was at its limit just before the end: 0.01 GiB of 1.00 GiB available" in found["oom_evidence"]


# ---- the whole way: the simulator's SGLang 0.5.23, a scheduler SIGKILLed, the supervisor's verdict

def _sim_profile(tmp_path: Path) -> Path:
    from tests.conftest import free_port

    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    program = [sys.executable, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", "200",
               "--sim-traffic", "steady", "--sim-dir", str(sim_dir), "--sim-version", "0.5.23"]
    p = tmp_path / "kill.yaml"
    p.write_text(
        "name: killtest\nversion: 0.5.23\nhosts: [{ssh: local}]\n"
        f"program: {program!r}\n".replace("'", '"')
        + f"workdir: {tmp_path / 'work'}\nlog: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n  model-path: /models/Llama-3.1-8B-Instruct\n  tp: 1\n  mem-fraction-static: 0.85\n"
        f"  port: {free_port()}\n"
    )
    return p


def _schedulers(server_pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.find("(") + 1: stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        if int(rest[1]) == server_pid and comm.startswith("sglang::schedul"):
            out.append(int(d))
    return out


async def _scheduler_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before_kill=None):  # type: ignore[no-untyped-def]
    from cockpit.core.profile import load_profile
    from cockpit.supervisor.supervisor import Supervisor

    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    sup = Supervisor(load_profile(_sim_profile(tmp_path)))
    try:
        info = await sup.launch()
        import asyncio

        runner = asyncio.create_task(sup.run())
        assert await sup.wait_until(lambda s: s.is_ready(), 90), sup.snapshot().state.phase
        assert info.pid is not None
        scheds = _schedulers(info.pid)
        assert len(scheds) == 1, scheds
        if before_kill is not None:
            before_kill()
        os.kill(scheds[0], signal.SIGKILL)
        # crashed, and the server's exit (with what its waiter saw) folded in
        assert await sup.wait_until(lambda s: s.state_phase == "crashed" and s.nodes[0].exited is not None, 30)
        snap = sup.snapshot()
        await sup.close()
        await runner
        return snap
    finally:
        await sup.stop(timeout=3, kill_leftovers=False)
        await sup.close()


async def test_a_hand_killed_scheduler_is_killed_by_signal_not_an_oom(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _cgroup(tmp_path, monkeypatch)
    snap = await _scheduler_killed(tmp_path, monkeypatch)
    crash = snap.state.crash
    assert crash is not None and crash.kind == "killed_by_signal" and crash.oom_evidence is None, crash
    assert "Subprocess scheduler_0" in crash.message
    f = next(f for f in snap.findings if f.id == "killed_by_signal")
    assert "killed by signal 9 (SIGKILL)" in f.message and "Who sent it is not known" in f.message
    assert "Slurm" in f.message and "OOM killer" in f.message
    assert not f.changes and not f.alternatives  # no memory advice for an unproven OOM
    assert not any(x.id in ("host_oom_killed", "hicache_host_memory") for x in snap.findings)


async def test_a_scheduler_killed_while_the_cgroup_counts_an_oom_kill_is_host_oom_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = _cgroup(tmp_path, monkeypatch)
    snap = await _scheduler_killed(tmp_path, monkeypatch,
                                   lambda: (own / "memory.events").write_text(EVENTS.format(n=1)))
    crash = snap.state.crash
    assert crash is not None and crash.kind == "host_oom_killed", crash
    assert crash.oom_evidence is not None and "oom_kill counter rose from 0 to 1" in crash.oom_evidence
    f = next(f for f in snap.findings if f.id == "host_oom_killed")
    assert "killed by signal 9 (SIGKILL)" in f.message and "by the kernel's OOM killer" in f.message
