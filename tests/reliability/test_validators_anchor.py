"""Issue 27: validators anchored with `$` (which also matches before a trailing newline) and
sbatch options written as abbreviations.

- Every validator of a profile value refuses the value with a trailing "\\n" (a profile name
  "x\\n" used to pass and broke the Slurm batch script's comment line), through the real CLI
  (`cockpit check`, exit 2, naming the key) and through load_profile for each field.
- `sbatch-args` items that sbatch reads as an option Cockpit sets itself are refused, however
  they are written: a prefix of the long name (`--arr=0-99` is `--array=0-99`, a 100-copy job
  array), or a short option inside a bundle (`-Ha0-99`). Whether sbatch really reads them so is
  checked against the real sbatch of the test cluster (`--test-only` is itself reserved, so the
  check submits held jobs and reads back what slurmctld made of them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cockpit.core.profile import ProfileError, load_profile
from tests.reliability.helpers import make_env

NL_CASES = [
    ("name", "name: \"nl\\n\"\n"),
    ("hosts", "name: nl\nhosts: [{ssh: \"gpu-box\\n\"}]\n"),
    ("version", "name: nl\nversion: \"0.5.9\\n\"\n"),
    ("env", "name: nl\nenv: {\"HF_HOME\\n\": /x}\n"),
    ("server", "name: nl\nserver: {\"tp\\n\": 2}\n"),
    ("target", "name: nl\ntarget: {kind: slurm, login: \"login\\n\"}\n"),
    ("target", "name: nl\ntarget: {kind: slurm, login: l, partition: \"gpu\\n\"}\n"),
    ("target", "name: nl\ntarget: {kind: slurm, login: l, account: \"acct\\n\"}\n"),
    ("target", "name: nl\ntarget: {kind: slurm, login: l, qos: \"high\\n\"}\n"),
    ("target", "name: nl\ntarget: {kind: slurm, login: l, time: \"4:00:00\\n\"}\n"),
]


@pytest.mark.parametrize(("key", "text"), NL_CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(NL_CASES)])
def test_a_trailing_newline_is_refused_by_every_validator(key: str, text: str, tmp_path: Path, ledger) -> None:
    path = tmp_path / "nl.yaml"
    path.write_text(text)
    ledger.tried("profiles")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert re.split(r"[.[]", err.value.key)[0] == key, err.value
    # the same value without the newline is accepted: the newline alone is what is refused
    path.write_text(text.replace("\\n", ""))
    load_profile(path)
    ledger.fault("profiles")
    ledger.survive("profiles")


def test_a_profile_name_with_a_newline_is_exit_2_from_the_cli(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    path = env.write_profile("nl", 'name: "nl\\n"\ntarget: {kind: slurm, login: local}\nserver: {model-path: /m}\n')
    done = env.cockpit("check", str(path))
    ledger.tried("profiles")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and str(path) in done.stderr and "name" in done.stderr, done.stderr
    ledger.fault("profiles")
    ledger.survive("profiles")


# (item, the reserved option sbatch reads it as)
ABBREVIATED = [
    ("--arr=0-99", "--array"), ("--a=0-99", "--array"), ("--out=/tmp/x", "--output"), ("--err=/tmp/x", "--error"),
    ("--ch=/", "--chdir"), ("--job=evil", "--job-name"), ("--node=4", "--nodes"), ("--wra=id", "--wrap"),
    ("--par", "--parsable"), ("--test", "--test-only"), ("--wai", "--wait"),
    ("-Ha0-99", "-a"), ("-vo/tmp/x", "-o"), ("-kN4", "-N"), ("-HJevil", "-J"), ("-D/", "-D"), ("-W", "-W"),
]
ALLOWED = ["--exclusive", "--mem=10G", "--gres=gpu:1", "--nodelist=n1", "--no-requeue", "--constraint=a100",
           "-pdebug-a", "-vvv", "-Cgpu", "--mail-type=END", "--export=ALL", "--requeue"]


def _target(args: list[str]) -> str:
    return "name: sb\ntarget: {kind: slurm, login: l, sbatch-args: " + json.dumps(args) + "}\n"


@pytest.mark.parametrize(("item", "reserved"), ABBREVIATED)
def test_reserved_sbatch_options_are_refused_as_abbreviations(item: str, reserved: str, tmp_path: Path,
                                                               ledger) -> None:
    path = tmp_path / "sb.yaml"
    path.write_text(_target([item]))
    ledger.tried("profiles")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert err.value.key == "target.sbatch-args" and reserved in str(err.value), err.value
    ledger.fault("profiles")
    ledger.survive("profiles")


def test_other_sbatch_options_pass(tmp_path: Path) -> None:
    path = tmp_path / "sb.yaml"
    path.write_text(_target(ALLOWED))
    assert load_profile(path).target.sbatch_args == ALLOWED  # type: ignore[union-attr]


def test_sbatch_reads_the_refused_abbreviations_as_the_reserved_options(slurm_cluster, tmp_path: Path) -> None:
    """The premise, on the real sbatch: held jobs submitted with the abbreviations come out as
    a job array / with the job name / output path that the abbreviation set."""
    out = tmp_path / "o.log"
    ids: list[str] = []
    try:
        for extra in (["--arr=0-3"], ["--job=abbrev-name"], [f"--out={out}"], ["-Ha0-2"]):
            done = slurm_cluster.run("sbatch", "--parsable", "--hold", *extra, "--wrap", "true", check=False)
            assert done.returncode == 0, (extra, done.stderr)
            ids.append(done.stdout.strip().split(";")[0])
        shown = [slurm_cluster.run("scontrol", "show", "job", "-o", j).stdout for j in ids]
        assert "ArrayTaskId=0-3" in shown[0] or "ArrayJobId=" in shown[0], shown[0]
        assert "JobName=abbrev-name" in shown[1], shown[1]
        assert f"StdOut={out}" in shown[2], shown[2]
        assert "ArrayJobId=" in shown[3], shown[3]
    finally:
        if ids:
            slurm_cluster.run("scancel", *ids, check=False)
