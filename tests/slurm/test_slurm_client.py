"""Submission, state and cancel against the real test cluster, through the login node's sshd."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from cockpit.core.profile import SlurmTarget
from cockpit.remote.login import SlurmLogin, SubmitRejected
from cockpit.slurm.jobstate import SlurmJob
from cockpit.slurm.script import DIST_ADDR, render_batch_script, sbatch_argv
from cockpit.transport.ssh import SSHTransport
from tests.conftest import SshHome
from tests.slurm.cluster import SlurmCluster
from tests.transport.test_ssh import NASTY, PY

ECHO = [PY, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('COCKPIT_X'), os.getcwd()]))"]


@pytest.fixture
async def login(slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path):  # type: ignore[no-untyped-def]
    t = SSHTransport(slurm_cluster.alias)
    yield SlurmLogin(t, runs_root=str(tmp_path / "runs"))
    await t.close()
    slurm_cluster.cancel_all()


async def _submit(login: SlurmLogin, tmp_path: Path, argv: list[str], *, run_id: str = "r1", env=None,  # type: ignore[no-untyped-def]
                  target: dict | None = None, profile: str = "p") -> str:
    tgt = SlurmTarget.model_validate({"kind": "slurm", "login": "slurm-login", **(target or {})})
    script = render_batch_script([argv], env=env or {}, profile=profile, run_id=run_id)
    ans = await login.submit(profile, run_id, workdir=str(tmp_path), script=script,
                             sbatch=sbatch_argv(tgt, job_name=f"cockpit-{profile}"), meta={"x": 1})
    assert ans.get("submitted"), ans
    return str(ans["run"]["job_id"])


async def _until(login: SlurmLogin, job: str, cond, timeout: float = 30) -> SlurmJob:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        j = (await login.query([job]))[job]
        if cond(j) or time.monotonic() > deadline:
            return j
        await asyncio.sleep(0.3)


async def test_hostile_arguments_reach_the_program_unchanged(login: SlurmLogin, tmp_path: Path) -> None:
    nasty_env = "$(touch CANARY) ;x'\""
    job = await _submit(login, tmp_path, [*ECHO, *NASTY, f"at {DIST_ADDR}"], env={"COCKPIT_X": nasty_env})
    j = await _until(login, job, lambda j: j.ended)
    assert j.state == "COMPLETED", j
    assert j.outcome == "stop" and j.exit_code == "0:0" and j.source == "scontrol"
    run = await login.find("p", str(tmp_path))
    assert run is not None and run["job_id"] == job
    out = (Path(run["run_dir"]) / "node0.log").read_text()
    args, env_x, cwd = json.loads(out)
    assert args[:-1] == NASTY
    assert env_x == nasty_env
    assert cwd == str(tmp_path)  # --chdir is the profile's workdir
    assert args[-1].startswith(f"at {j.nodes[0]}:") and args[-1].rsplit(":", 1)[1].isdigit()
    assert (Path(run["run_dir"]) / "nodes").read_text().split() == list(j.nodes)
    assert not list(tmp_path.rglob("CANARY"))


async def test_bad_partition_is_refused_with_slurms_words(login: SlurmLogin, tmp_path: Path) -> None:
    with pytest.raises(SubmitRejected) as err:
        await _submit(login, tmp_path, ECHO, target={"partition": "nope"})
    assert "invalid partition specified: nope" in str(err.value)
    assert await login.find("p", str(tmp_path)) is None  # no current run was recorded


async def test_pending_running_cancelled_and_a_second_submit_refused(
        login: SlurmLogin, slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    filler = slurm_cluster.fill()
    job = await _submit(login, tmp_path, [PY, "-c", "import time; print('up', flush=True); time.sleep(300)"])
    j = await _until(login, job, lambda j: j.reason in ("Resources", "Priority"))
    assert j.state == "PENDING" and j.outcome == "queued"
    assert j.describe() == f"queued: {j.reason}"
    assert j.time_left is None
    # a second cockpit cannot submit while the job is queued
    script = render_batch_script([ECHO], env={}, profile="p", run_id="r2")
    ans = await login.submit("p", "r2", workdir=str(tmp_path), script=script, sbatch=["sbatch", "--parsable"], meta={})
    assert ans.get("refused") == "live" and ans["run"]["job_id"] == job

    slurm_cluster.release(filler)
    j = await _until(login, job, lambda j: j.outcome == "running")
    assert j.state == "RUNNING" and j.nodes == (slurm_cluster.node,)
    assert j.describe() == f"running on {slurm_cluster.node}"

    t0 = time.monotonic()
    res = await login.cancel(job, timeout=30)
    assert res["left_queue"], res
    assert time.monotonic() - t0 < 30
    j = (await login.query([job]))[job]
    assert j.state == "CANCELLED" and j.outcome == "stop"
    assert "cancelled" in j.describe()


async def test_held_job_and_a_failing_program(login: SlurmLogin, slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = await _submit(login, tmp_path, [PY, "-c", "import sys; sys.exit(3)"], target={"sbatch-args": ["--hold"]})
    j = (await login.query([job]))[job]
    assert j.state == "PENDING" and j.describe() == "queued: JobHeldUser"
    slurm_cluster.run("scontrol", "release", job)
    j = await _until(login, job, lambda j: j.ended)
    assert j.state == "FAILED" and j.outcome == "crash", j
    assert j.exit_code == "3:0" and j.exit_status == 3
    assert "exit code 3:0" in j.describe()


async def test_no_accounting_fallback_reads_the_job_completion_record(
        login: SlurmLogin, slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The test cluster has no accounting: sacct refuses, and a job slurmctld has forgotten is
    known from its jobcomp/filetxt record (read here from the cluster's real file)."""
    from cockpit.remote.login import job_from_answer

    job = await _submit(login, tmp_path, [PY, "-c", "import sys; sys.exit(5)"])
    j = await _until(login, job, lambda j: j.ended)
    assert j.state == "FAILED"
    sacct = slurm_cluster.run("sacct", "-j", job, "-X", "-n", "-P", check=False)
    assert sacct.returncode != 0 and "accounting storage is disabled" in sacct.stderr
    deadline = time.monotonic() + 10
    while f"JobId={job} " not in slurm_cluster.jobcomp.read_text() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    record = "\n".join(ln for ln in slurm_cluster.jobcomp.read_text().splitlines() if ln.startswith(f"JobId={job} "))
    forgotten = job_from_answer(job, {"scontrol": "", "scontrol_error": "slurm_load_jobs error: Invalid job id specified",
                                      "sacct": "", "sacct_error": sacct.stderr.strip(), "jobcomp": record})
    assert (forgotten.state, forgotten.outcome, forgotten.exit_code, forgotten.source) == ("FAILED", "crash", "5:0",
                                                                                          "jobcomp")
    assert forgotten.node_list == slurm_cluster.node


async def test_telemetry_step_refused_says_not_measured_with_sruns_words(
        login: SlurmLogin, slurm_cluster: SlurmCluster) -> None:
    """An `srun --overlap` step the cluster refuses (here: a job that does not exist) leaves the
    GPUs unmeasured, with srun's reason."""
    from cockpit.core.profile import Host
    from cockpit.remote.host import HostOps
    from cockpit.slurm.steps import SrunStepTransport
    from cockpit.supervisor.nodes import Node
    from cockpit.supervisor.targets.slurm import _StepWatch

    step = SrunStepTransport(login.transport, "999999", slurm_cluster.node)
    node = Node(0, Host(ssh=slurm_cluster.node), step, HostOps(step), key="p", log_file="node0.log")
    watch = _StepWatch([node], interval=1.0, sim_dir=None, changed=lambda: None)
    await watch.once()
    assert watch.note is not None and watch.note.startswith(f"not measured on {slurm_cluster.node}: ")
    assert "999999" in watch.note or "Invalid job id" in watch.note, watch.note
    assert watch.gpus == {}


async def test_preempted_for_real(login: SlurmLogin, slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    sleeper = [PY, "-c", "import time; time.sleep(300)"]
    job = await _submit(login, tmp_path, sleeper, run_id="pre", target={"sbatch-args": [
        f"--cpus-per-task={slurm_cluster.cpus}", "--no-requeue"]})
    await _until(login, job, lambda j: j.outcome == "running")
    slurm_cluster.run("sbatch", "--parsable", "-p", "urgent", "-o", "/dev/null", "--wrap", "sleep 1")
    j = await _until(login, job, lambda j: j.ended)
    # SIGTERM ends the batch script (143:0) or, without one, the job (0:15): 128+15 either way
    assert (j.state, j.outcome, j.exit_status) == ("PREEMPTED", "stop", 143), j
    assert j.describe().startswith(f"Slurm: job {job} PREEMPTED: the job was preempted by a higher-priority job")
