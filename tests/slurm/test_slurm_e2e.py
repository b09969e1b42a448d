"""`cockpit up/status/logs/down` and the Supervisor on a Slurm profile: the simulator as the job,
the real test cluster, the login node reached through its sshd."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit.core.profile import load_profile
from cockpit.supervisor.api import LogBatch
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.targets.slurm import SlurmJobTarget
from tests.conftest import SshHome, free_port
from tests.slurm.cluster import SlurmCluster

PY = sys.executable


def _profile(root: Path, name: str, *, partition: str | None = None, speed: str = "100",
             sbatch_args: list[str] | None = None) -> Path:
    sim_dir = root / "gpus"
    sim_dir.mkdir(exist_ok=True)
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", speed,
               "--sim-traffic", "steady", "--sim-dir", str(sim_dir)]
    target = {"kind": "slurm", "login": "slurm-login", "nodes": 1, "time": "10:00"}
    if partition:
        target["partition"] = partition
    if sbatch_args:
        target["sbatch-args"] = sbatch_args
    p = root / f"{name}.yaml"
    p.write_text(
        f"name: {name}\nversion: 0.5.9\ntarget: {json.dumps(target)}\nprogram: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n  model-path: /models/Kimi-K2.5\n  trust-remote-code: true\n  tp: 8\n"
        f"  mem-fraction-static: 0.88\n  port: {free_port()}\n"
    )
    (root / "work").mkdir(exist_ok=True)
    return p


def _env(ssh_home: SshHome, root: Path) -> dict[str, str]:
    return {**ssh_home.env, "COCKPIT_RUNS_ROOT": str(root / "runs"), "XDG_DATA_HOME": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"), "COCKPIT_SLURM_POLL_S": "0.5"}


def _cockpit(env: dict[str, str], cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "cockpit", *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def _status(env: dict[str, str], root: Path, profile: Path) -> dict:  # type: ignore[type-arg]
    out = _cockpit(env, root, "status", str(profile), "--json")
    assert out.stdout, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _until(env: dict[str, str], root: Path, profile: Path, cond, timeout: float = 60) -> dict:  # type: ignore[no-untyped-def, type-arg]
    deadline = time.monotonic() + timeout
    while True:
        st = _status(env, root, profile)
        if cond(st) or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def test_up_queued_ready_status_logs_down(slurm_cluster: SlurmCluster, ssh_home: SshHome, tmp_path: Path) -> None:
    env = _env(ssh_home, tmp_path)
    prof = _profile(tmp_path, "slurmsim")
    filler = slurm_cluster.fill()
    try:
        up = _cockpit(env, tmp_path, "up", str(prof), "--wait", "started", "--timeout", "5")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "launched run" in up.stdout and "(submitted Slurm job " in up.stdout, up.stdout
        st = _until(env, tmp_path, prof, lambda s: (s.get("slurm") or {}).get("reason") in ("Resources", "Priority"))
        sl = st["slurm"]
        assert sl["state"] == "PENDING" and sl["job_id"].isdigit(), sl
        assert sl["words"] == f"queued: {sl['reason']}" and sl["nodes"] == [] and sl["time_left"] is None
        assert st["lifecycle"] == "launching" and st["ready"] is False
        job = sl["job_id"]
        text = _cockpit(env, tmp_path, "status", str(prof))
        assert f"Slurm job {job} · queued: {sl['reason']}" in text.stdout, text.stdout
        # a second `up` is refused while the job waits in the queue
        again = _cockpit(env, tmp_path, "up", str(prof))
        assert again.returncode == 1 and f"job {job}" in again.stderr, again.stderr
    finally:
        slurm_cluster.release(filler)

    st = _until(env, tmp_path, prof, lambda s: s.get("ready"), timeout=90)
    assert st["ready"], st
    sl = st["slurm"]
    assert sl["state"] == "RUNNING" and sl["nodes"] == [slurm_cluster.node]
    assert sl["time_left"] is not None and sl["time_left"].startswith("0:0")  # a 10-minute limit
    assert st["phase"] == "ready" and len(st["ranks"]) == 8
    assert st["run"]["hosts"] == ["slurm-login", f"slurm job {job}"]
    assert st["run"]["log_path"].endswith("/node0.log")
    # telemetry: the agent ran as an `srun --overlap` step on the node (simulated GPUs)
    assert sl["telemetry"] is None, sl
    assert any(r["gpu"] and r["gpu"]["used_gb"] for r in st["ranks"]), st["ranks"][0]

    logs = _cockpit(env, tmp_path, "logs", str(prof), "--tail", "3")
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 3, logs.stderr

    follower = subprocess.Popen([PY, "-m", "cockpit", "logs", str(prof), "-f", "--tail", "2"], env=env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert follower.stdout is not None
    first = follower.stdout.readline()  # it attached to the running job: it is following now
    down = _cockpit(env, tmp_path, "down", str(prof), "--timeout", "20")
    # `logs -f` ends when Slurm says the job ended, after the log's last line
    rest, err = follower.communicate(timeout=30)
    out = first + rest
    assert f"cockpit: Slurm: job {job} CANCELLED" in err.decode(), err
    node_log = Path(st["run"]["log_path"]).read_bytes()
    assert out and node_log.endswith(out.splitlines(keepends=True)[-1])
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"Slurm job {job} has left the queue (CANCELLED)" in down.stdout, down.stdout
    assert job not in slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split()
    st = _status(env, tmp_path, prof)
    assert st["slurm"]["state"] == "CANCELLED" and st["phase"] == "stopped" and st["crash"] is None
    runs = _cockpit(env, tmp_path, "runs")
    assert f"(job {job})" in runs.stdout, runs.stdout


def test_rejected_at_submit_says_slurms_words(slurm_cluster: SlurmCluster, ssh_home: SshHome, tmp_path: Path) -> None:
    env = _env(ssh_home, tmp_path)
    prof = _profile(tmp_path, "badpart", partition="nope")
    up = _cockpit(env, tmp_path, "up", str(prof))
    assert up.returncode == 1
    assert "Slurm refused the job: sbatch: error: invalid partition specified: nope" in up.stderr, up.stderr
    assert "Traceback" not in up.stderr


async def test_link_drop_loses_no_line_and_an_outside_scancel_is_a_stop(
        slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    prof = load_profile(_profile(tmp_path, "slurmdrop", speed="200"))
    numbers: list[int] = []
    hosts: set[str] = set()

    def on_logs(b: LogBatch) -> None:
        numbers.extend(ln.number for ln in b.lines)
        hosts.update(ln.host for ln in b.lines)

    sup = Supervisor(prof, on_logs=on_logs)
    assert isinstance(sup.target, SlurmJobTarget)
    await sup.launch()
    runner = asyncio.create_task(sup.run())
    try:
        assert await sup.wait_until(lambda s: s.is_ready(), 90), sup.snapshot().target
        before = len(numbers)
        assert slurm_cluster.kill_login_connections() > 0
        assert await sup.wait_until(lambda s: len(numbers) > before + 50, 30)
        # none lost, none repeated: only Cockpit's own access lines (`?by=cockpit`) are left out
        assert numbers[0] == 1 and numbers == sorted(set(numbers))
        assert hosts == {slurm_cluster.node}  # lines carry the node's name, as GPUs and ranks do

        # restart = the old job cancelled, a new job with the changed flag
        old_job = sup.target.job_id
        info = await sup.restart({"mem-fraction-static": 0.85})
        job = sup.target.job_id
        assert job is not None and job != old_job and info.flags["mem-fraction-static"] == 0.85
        assert (await sup.target.login.query([str(old_job)]))[str(old_job)].state == "CANCELLED"
        numbers.clear()
        assert await sup.wait_until(lambda s: s.is_ready(), 90), sup.snapshot().target
        assert "--mem-fraction-static 0.85" in (Path(info.run_dir) / "batch.sh").read_text()

        slurm_cluster.run("scancel", job)
        assert await sup.wait_until(lambda s: s.lifecycle == "stopped", 30), sup.snapshot().progress
        snap = sup.snapshot()
        assert snap.state.phase == "stopped" and snap.state.crash is None
        assert snap.target is not None and snap.target.state == "CANCELLED"
        assert "cancelled" in snap.progress
        # every line the node wrote was delivered before the end was applied
        log = Path(snap.run.log_path).read_bytes() if snap.run else b""
        own = log.count(b"by=cockpit")
        assert numbers == sorted(set(numbers)) and log.count(b"\n") - own <= len(numbers) <= log.count(b"\n")
    finally:
        await sup.close()
        runner.cancel()
        with_timeout = asyncio.wait_for(asyncio.shield(runner), 5)
        try:
            await with_timeout
        except (asyncio.CancelledError, Exception):
            pass
        from cockpit.transport import close_all

        await close_all()
    assert os.path.exists(tmp_path / "runs" / "slurmdrop")


@pytest.mark.parametrize("by", ["operator", "cockpit"])
async def test_down_while_queued_is_a_clean_stop(slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    """A stop of a queued job: a clean stop, said to be by whoever asked (the operator's `down`,
    cockpit's restart), as on hosts; not Slurm's."""
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    prof = load_profile(_profile(tmp_path, "slurmqueued"))
    filler = slurm_cluster.fill()
    sup = Supervisor(prof)
    try:
        info = await sup.launch()
        assert isinstance(sup.target, SlurmJobTarget) and sup.target.job is not None and sup.target.job.outcome == "queued"
        assert sup.lifecycle == "launching" and sup.snapshot().progress.startswith("queued: ")
        res = await sup.stop(timeout=10, by=by)
        assert res.stopped and res.leftovers == []
        snap = sup.snapshot()
        assert snap.lifecycle == "stopped" and snap.state.phase == "stopped" and snap.state.crash is None
        assert snap.ending is not None and snap.ending["by"] == by, snap.ending
        assert all(n.exited is not None and n.exited.stopped_by == by for n in sup.nodes)
        assert snap.target is not None and snap.target.state == "CANCELLED" and snap.target.nodes == ()
        assert not (Path(info.run_dir) / "node0.log").exists()  # it never ran
        assert await Supervisor(prof).attach() is None  # nothing left to attach to
    finally:
        await sup.close()
        slurm_cluster.release(filler)
        from cockpit.transport import close_all

        await close_all()


async def test_node_fail_is_a_crash_with_slurms_words(slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    prof = load_profile(_profile(tmp_path, "slurmnodefail", speed="20", sbatch_args=["--no-requeue"]))
    sup = Supervisor(prof)
    await sup.launch()
    runner = asyncio.create_task(sup.run())
    try:
        assert await sup.wait_until(lambda s: s.snapshot().state.ranks, 60), sup.snapshot().target
        slurm_cluster.fail_node()
        assert await sup.wait_until(lambda s: s.lifecycle == "failed", 30), sup.snapshot().progress
        snap = sup.snapshot()
        crash = snap.state.crash
        assert snap.state.phase == "crashed" and crash is not None
        assert snap.target is not None and (snap.target.state, snap.target.reason) == ("NODE_FAIL", "NodeDown")
        words = f"Slurm: job {sup.target.job_id} NODE_FAIL: a node of the job failed, reason NodeDown"
        assert crash.message.startswith(words) and any(d.startswith(words) for d in crash.decisive_lines)
        assert snap.progress.startswith(words)
    finally:
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
        from cockpit.transport import close_all

        await close_all()


async def test_time_limit_reached_is_a_stop_with_slurms_words(
        slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real TIMEOUT: slurmctld's own time-limit enforcement ends the job. Its limit is moved to
    a second from now (`scontrol update EndTime=`) instead of waiting out a one-minute limit;
    slurmctld checks limits every 30 s, so this costs up to ~30 s."""
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    prof = load_profile(_profile(tmp_path, "slurmtimeout", speed="200"))
    sup = Supervisor(prof)
    await sup.launch()
    runner = asyncio.create_task(sup.run())
    try:
        assert await sup.wait_until(lambda s: s.is_ready(), 90), sup.snapshot().target
        end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 1))
        slurm_cluster.run("scontrol", "update", f"JobId={sup.target.job_id}", f"EndTime={end}")
        assert await sup.wait_until(lambda s: s.lifecycle == "stopped", 60), sup.snapshot().progress
        snap = sup.snapshot()
        assert snap.state.phase == "stopped" and snap.state.crash is None
        assert snap.target is not None and (snap.target.state, snap.target.reason) == ("TIMEOUT", "TimeLimit")
        assert snap.progress.startswith(f"Slurm: job {sup.target.job_id} TIMEOUT: the job reached its time limit, "
                                        "reason TimeLimit"), snap.progress
    finally:
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
        from cockpit.transport import close_all

        await close_all()
