"""Every Slurm job state mapped: recorded answers for the states the test cluster cannot produce
(tests/data/slurm/README.md says which), the parsers, durations, and the batch script's quoting."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cockpit.core.profile import ProfileError, SlurmTarget, parse_profile
from cockpit.remote.login import job_from_answer
from cockpit.slurm.jobstate import from_sacct, from_scontrol, parse_duration, parse_kv
from cockpit.slurm.script import DIST_ADDR, quote_argv, render_batch_script, sbatch_argv
from tests.transport.test_ssh import NASTY

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _sc(name: str):  # type: ignore[no-untyped-def]
    job = from_scontrol((DATA / name).read_text())
    assert job is not None
    return job


@pytest.mark.parametrize(("name", "state", "outcome", "words", "exit_status"), [
    ("scontrol-timeout.txt", "TIMEOUT", "stop", "reached its time limit, reason TimeLimit, exit code 0:15", 143),
    ("scontrol-node-fail.txt", "NODE_FAIL", "crash", "a node of the job failed, reason NodeDown, exit code 0:0", 0),
    ("scontrol-oom.txt", "OUT_OF_MEMORY", "crash", "out of host memory", 253),
    ("scontrol-preempted.txt", "PREEMPTED", "stop", "preempted by a higher-priority job, exit code 0:15", 143),
])
def test_end_states_from_scontrol(name: str, state: str, outcome: str, words: str, exit_status: int) -> None:
    job = _sc(name)
    assert (job.job_id, job.state, job.outcome, job.ended) == ("7", state, outcome, True)
    assert job.describe().startswith(f"Slurm: job 7 {state}: ")
    assert words in job.describe()
    assert job.exit_status == exit_status
    assert job.time_left is None
    assert job.to_json()["state"] == state


def test_running_and_held_records() -> None:
    run = _sc("scontrol-running.txt")
    assert (run.state, run.outcome, run.node_list, run.time_left) == ("RUNNING", "running", "vm", "0:00:19")
    assert run.describe() == "running on vm"
    held = _sc("scontrol-held.txt")
    assert (held.state, held.reason, held.node_list, held.time_left) == ("PENDING", "JobHeldUser", "", None)
    assert held.describe() == "queued: JobHeldUser"
    assert held.to_json() == {"job_id": "2", "state": "PENDING", "reason": "JobHeldUser", "nodes": [],
                              "time_left": None, "exit_code": "0:0", "source": "scontrol"}


@pytest.mark.parametrize(("name", "state", "outcome", "reason"), [
    ("sacct-cancelled.txt", "CANCELLED", "stop", ""),
    ("sacct-timeout.txt", "TIMEOUT", "stop", "TimeLimit"),
    ("sacct-pending.txt", "PENDING", "queued", "Priority"),
    ("sacct-node-fail.txt", "NODE_FAIL", "crash", "NodeDown"),
    ("sacct-oom.txt", "OUT_OF_MEMORY", "crash", "OutOfMemory"),
    ("sacct-preempted.txt", "PREEMPTED", "stop", ""),
])
def test_states_from_sacct(name: str, state: str, outcome: str, reason: str) -> None:
    text = (DATA / name).read_text()
    jid = text.split("|")[0]
    job = from_sacct(text, jid)
    assert job is not None and (job.state, job.outcome, job.reason, job.source) == (state, outcome, reason, "sacct")
    assert job_from_answer(jid, {"scontrol": "", "sacct": text}).state == state
    if state == "PENDING":
        assert job.node_list == "" and job.describe() == "queued: Priority"
    if state == "CANCELLED":
        assert job.extra["StateDetail"] == "CANCELLED by 0"


def test_unknown_job_says_why() -> None:
    job = job_from_answer("99", {"scontrol": "", "scontrol_error": "slurm_load_jobs error: Invalid job id specified",
                                 "sacct": "", "sacct_error": "Slurm accounting storage is disabled",
                                 "jobcomp": "", "jobcomp_error": ""})
    assert job.state == "UNKNOWN" and job.outcome == "unknown"
    assert "Invalid job id specified; Slurm accounting storage is disabled" in job.reason


def test_kv_values_with_spaces() -> None:
    kv = parse_kv("JobId=3 JobState=PENDING Reason=ReqNodeNotAvail, UnavailableNodes:gpu[01-02] Dependency=(null)")
    assert kv["Reason"] == "ReqNodeNotAvail, UnavailableNodes:gpu[01-02]"
    assert kv["Dependency"] == "(null)"


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("05:10", 310), ("1:00:00", 3600), ("2-12", 216000), ("1-00:30", 88200),
    ("1-02:03:04", 93784), ("UNLIMITED", None), ("", None), ("1h", None),
])
def test_durations(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


def test_target_validation_names_the_key() -> None:
    ok = parse_profile({"name": "x", "target": {"kind": "slurm", "login": "login1", "nodes": 2, "time": "4:00:00",
                                                "gpus-per-node": 8, "sbatch-args": ["--exclusive"]}})
    assert ok.target is not None and len(ok.hosts) == 2
    cases = [
        ({"kind": "slurm", "login": "-oProxyCommand=x"}, "target.login"),
        ({"kind": "slurm", "login": "a", "time": "1h"}, "target.time"),
        ({"kind": "slurm", "login": "a", "partition": "gpu; rm"}, "target.partition"),
        ({"kind": "slurm", "login": "a", "nodes": 0}, "target.nodes"),
        ({"kind": "slurm", "login": "a", "sbatch-args": ["--output=/tmp/x"]}, "target.sbatch-args"),
        ({"kind": "slurm", "login": "a", "sbatch-args": ["-N4"]}, "target.sbatch-args"),
        ({"kind": "slurm", "login": "a", "sbatch-args": ["exclusive"]}, "target.sbatch-args"),
        ({"kind": "slurm", "login": "a", "sbatch-args": ["--comment=a\nb"]}, "target.sbatch-args"),
        ({"kind": "slurm", "login": "a", "gres": "gpu:8"}, "target.gres"),
    ]
    for target, key in cases:
        with pytest.raises(ProfileError) as err:
            parse_profile({"name": "x", "target": target}, "p.yaml")
        assert err.value.key == key, (target, err.value)
    with pytest.raises(ProfileError, match="no hosts"):
        parse_profile({"name": "x", "hosts": [{"ssh": "a"}], "target": {"kind": "slurm", "login": "a"}})


def test_sbatch_argv_is_one_element_per_option() -> None:
    t = SlurmTarget.model_validate({"kind": "slurm", "login": "l", "partition": "gpu", "account": "ml", "qos": "high",
                                    "time": "4:00:00", "nodes": 2, "gpus-per-node": 8,
                                    "sbatch-args": ["--exclusive", "--constraint=h100&ib"]})
    assert sbatch_argv(t, job_name="cockpit-x") == [
        "sbatch", "--parsable", "--job-name=cockpit-x", "--nodes=2", "--ntasks-per-node=1", "--partition=gpu",
        "--account=ml", "--qos=high", "--time=4:00:00", "--gpus-per-node=8", "--exclusive", "--constraint=h100&ib"]


def test_script_quotes_every_value_for_bash(tmp_path: Path) -> None:
    """bash itself reads the rendered words back: each hostile value is one unchanged argument."""
    words = quote_argv([*NASTY, f"--dist-init-addr={DIST_ADDR}"])
    probe = ("COCKPIT_HEAD=gpu01; COCKPIT_DIST_PORT=20042; "
             f"python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' {words}")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(out.stdout) == [*NASTY, "--dist-init-addr=gpu01:20042"]
    assert not (tmp_path / "CANARY").exists()


def test_two_node_script_has_one_step_per_node() -> None:
    script = render_batch_script([["python3", "-m", "sglang.launch_server", "--node-rank", "0"],
                                  ["python3", "-m", "sglang.launch_server", "--node-rank", "1"]],
                                 env={"NCCL_DEBUG": "WARN"}, profile="kimi", run_id="r1")
    steps = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    assert len(steps) == 2
    assert '--nodelist="${COCKPIT_NODES[1]}"' in steps[1] and 'node1.log"' in steps[1]
    assert "export NCCL_DEBUG=WARN" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_bundled_two_node_profile_renders_one_step_per_node() -> None:
    from cockpit.backends import get_backend
    from cockpit.core.profile import load_profile

    prof = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "slurm-two-node-tp16.yaml")
    assert prof.target is not None and len(prof.hosts) == 2
    argvs = get_backend(prof.backend).launch.node_argvs(prof, None, DIST_ADDR)
    script = render_batch_script(argvs, env=dict(prof.env), profile=prof.name, run_id="r1")
    steps = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    assert len(steps) == 2
    for k, step in enumerate(steps):
        assert f"--node-rank {k}" in step and "--nnodes 2" in step
        assert '--dist-init-addr "${COCKPIT_HEAD}":"${COCKPIT_DIST_PORT}"' in step
        assert step.split(" -- ", 1)[1].startswith("/shared/envs/sglang/bin/python -m sglang.launch_server")
    assert sbatch_argv(prof.target, job_name="cockpit-x")[3:] == [
        "--nodes=2", "--ntasks-per-node=1", "--partition=gpu", "--account=ml-serving", "--time=12:00:00",
        "--gpus-per-node=8", "--exclusive"]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_telemetry_step_argv_shares_the_allocation() -> None:
    from cockpit.slurm.steps import SrunStepTransport
    from cockpit.transport.local import LocalTransport

    t = SrunStepTransport(LocalTransport(), "42", "gpu07", gpus_per_node=8)
    assert t._argv(["python3", "-", "{}"]) == [
        "srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=gpu07", "--gpus-per-node=8",
        "--quiet", "--job-name=cockpit-telemetry-gpu07", "--", "python3", "-", "{}"]
    assert "--gpus-per-node=8" not in SrunStepTransport(LocalTransport(), "42", "gpu07")._argv(["x"])
