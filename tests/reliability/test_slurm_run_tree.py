"""Issue 27: a Slurm run tree in a shared workdir, prepared by another user, is never trusted.

The real test cluster, the login node through its sshd, a Slurm profile whose workdir is a shared
project directory every user may write. Its run tree lives in the default place,
`<workdir>/.cockpit/runs/<profile>/`. Before Cockpit runs, the other local user `nobody`
(runuser) prepares part of it: the whole tree, a `current` of theirs, a run directory of theirs
with their `job_id` and `meta.json` (their model path, `--trust-remote-code`), a `current` that
is their symbolic link, or their `job_id` in a run directory of ours that was left loose.

Must hold, for each layout: `cockpit up` is refused (exit 1) naming the path and its owner, and
submits nothing (the queue stays empty: no job runs under the operator's account with their
overrides); `cockpit status` names the same path and owner, and never shows their job or text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import SshHome
from tests.reliability._planted import as_other, other_uid, shared_dir
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_slurm_e2e import _cockpit, _env, _profile

THEIR_META = json.dumps({"flags": {"model-path": "/home/nobody/their-model", "trust-remote-code": True},
                         "overrides": {"model-path": "/home/nobody/their-model"}, "nodes": 1, "target": "slurm"})
THEIR_JOB = "777"


def _mkdirs_ours(*dirs: Path, mode: int = 0o700) -> None:
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, mode)


def _their_run(run: Path) -> None:
    as_other("mkdir", "-p", str(run))
    as_other("sh", "-c", 'printf %s "$1" > "$2/job_id"; printf %s "$3" > "$2/meta.json"', "sh", THEIR_JOB, str(run),
             THEIR_META)


def _plant(layout: str, work: Path, profile: str, tmp_path: Path) -> Path:
    """Prepare `layout` as nobody; returns the path the refusal must name."""
    cockpit_dir = work / ".cockpit"
    base = cockpit_dir / "runs" / profile
    if layout == "whole tree":
        as_other("mkdir", "-p", str(base / "R1"))
        _their_run(base / "R1")
        as_other("sh", "-c", 'printf R1 > "$1/current"', "sh", str(base))
        return cockpit_dir
    _mkdirs_ours(cockpit_dir, cockpit_dir / "runs", mode=0o755)  # an older Cockpit's modes
    _mkdirs_ours(base, mode=0o777)  # left loose (an older Cockpit, a umask): others could write in it
    if layout == "their current":
        _their_run(base / "R1")
        as_other("sh", "-c", 'printf R1 > "$1/current"', "sh", str(base))
        return base / "current"
    if layout == "their run dir":
        _their_run(base / "R1")
        (base / "current").write_text("R1")
        os.chmod(base / "current", 0o600)
        return base / "R1"
    if layout == "current is their link":
        ours = tmp_path / "elsewhere"
        ours.write_text("R1")
        _mkdirs_ours(base / "R1")  # ours, private
        as_other("ln", "-s", str(ours), str(base / "current"))
        return base / "current"
    if layout == "their job_id in our run":
        run = base / "R1"
        _mkdirs_ours(run, mode=0o777)
        (base / "current").write_text("R1")
        os.chmod(base / "current", 0o600)
        as_other("sh", "-c", 'printf %s "$1" > "$2/job_id"', "sh", THEIR_JOB, str(run))
        return run / "job_id"
    raise AssertionError(layout)


LAYOUTS = ["whole tree", "their current", "their run dir", "current is their link", "their job_id in our run"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_run_tree_prepared_by_another_user_is_refused(layout: str, slurm_cluster: SlurmCluster,
                                                        ssh_home: SshHome, tmp_path: Path, ledger) -> None:
    with shared_dir() as shared:
        work = shared / "work"
        work.mkdir()
        os.chmod(work, 0o777)  # a shared project directory
        prof = _profile(tmp_path, "treeprof")
        prof.write_text(prof.read_text().replace(f"workdir: {tmp_path / 'work'}", f"workdir: {work}"))
        env = {**_env(ssh_home, tmp_path), "COCKPIT_RUNS_ROOT": ""}  # the default place: <workdir>/.cockpit/runs
        named = _plant(layout, work, "treeprof", tmp_path)
        ledger.fault("files")
        before = set(slurm_cluster.job_ids())
        try:
            up = _cockpit(env, tmp_path, "up", str(prof), "--wait", "started", "--timeout", "10")
            assert up.returncode == 1, up.stdout + up.stderr
            assert str(named) in up.stderr and "Traceback" not in up.stderr, up.stderr
            owner_word = "symbolic link" if layout == "current is their link" else "belongs to nobody"
            assert owner_word in up.stderr, up.stderr
            assert set(slurm_cluster.job_ids()) == before, "a job was submitted from a run tree of another user"
            st = _cockpit(env, tmp_path, "status", str(prof))
            assert st.returncode != 0 and str(named) in st.stderr, st.stdout + st.stderr
            assert THEIR_JOB not in st.stdout and "their-model" not in st.stdout + st.stderr
            assert "Traceback" not in st.stderr
            # what nobody planted is left as it was: Cockpit neither used nor removed it
            assert named.is_symlink() or named.lstat().st_uid in (other_uid(), os.getuid())
            ledger.survive("files")
        finally:
            slurm_cluster.cancel_all()
