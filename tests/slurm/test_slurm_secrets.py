"""Issue 18 item 2 on the Slurm target: the login node's other users see no secret.

A real submission through the login node's sshd to the test cluster, with HF_TOKEN in the run's
env, in the default place (<workdir>/.cockpit/runs on the shared filesystem). Meanwhile, as the
other local user `nobody`, `ps` is read over and over: the login-side program (held visible by a
`python` that waits 1 s before it starts) and the job's processes must never show the token. Then
the run's directories are 0700 and every file in them 0600 — the batch script (it exports the
env), Slurm's batch.log, the node logs and `nodes` the job wrote — and `nobody` cannot read them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cockpit.core.profile import SlurmTarget
from cockpit.remote.login import SlurmLogin
from cockpit.slurm.script import render_batch_script, sbatch_argv
from cockpit.transport.ssh import SSHTransport
from tests.conftest import SshHome
from tests.slurm.cluster import SlurmCluster
from tests.transport.test_ssh import PY

TOKEN = "hf_slurm_t0ken_d0_not_leak_7731"


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=30)


class _PsWatch(threading.Thread):
    """`ps -eww` as nobody, again and again, until stopped: every line that shows `needle` (the
    secret) and every line that shows `marker` (proof the login-side program was in view)."""

    def __init__(self, needle: str, marker: str) -> None:
        super().__init__(daemon=True)
        self.needle, self.marker = needle, marker
        self.leaks: list[str] = []
        self.seen: list[str] = []
        self.rounds = 0
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            ps = _as_nobody("ps", "-eww", "-o", "pid,args", "--no-headers")
            if ps.returncode != 0:
                self.errors.append(ps.stderr)
                return
            self.rounds += 1
            lines = ps.stdout.splitlines()
            self.leaks += [ln for ln in lines if self.needle in ln]
            self.seen += [ln for ln in lines if self.marker in ln]
            time.sleep(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


async def test_login_side_and_job_keep_the_env_private(slurm_cluster: SlurmCluster, ssh_env: SshHome,
                                                        tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test switches to the user nobody: run it as root (CI does)")
    os.chmod(tmp_path, 0o755)  # nobody may walk into the workdir: only the run's own modes protect it
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    os.chmod(work, 0o755)
    (work / ".cockpit").mkdir(mode=0o755)  # left loose by an older cockpit: tightened, not trusted
    os.chmod(work / ".cockpit", 0o755)
    slow_py = tmp_path / "slow-python3"  # the login node's python, seen by `ps` for a second
    slow_py.write_text(f"#!/bin/sh\nsleep 1\nexec {PY} \"$@\"\n")
    os.chmod(slow_py, 0o755)

    t = SSHTransport(slurm_cluster.alias)
    slow = SlurmLogin(t, python=str(slow_py), runs_root="")  # "": the default place, in the workdir
    fast = SlurmLogin(t, python=PY, runs_root="")
    watch = _PsWatch(TOKEN, str(slow_py))
    watch.start()
    try:
        tgt = SlurmTarget.model_validate({"kind": "slurm", "login": slurm_cluster.alias, "time": "5:00"})
        program = [PY, "-c", "import time; print('serving', flush=True); time.sleep(2)"]
        script = render_batch_script([program], env={"HF_TOKEN": TOKEN}, profile="sec", run_id="r1")
        ans = await slow.submit("sec", "r1", workdir=str(work), script=script,
                                sbatch=sbatch_argv(tgt, job_name="cockpit-sec"), meta={})
        assert ans.get("submitted"), ans
        job = str(ans["run"]["job_id"])
        deadline = time.monotonic() + 60
        while True:  # nobody keeps reading ps while the job runs with the token in its env
            j = (await fast.query([job]))[job]
            if j.ended or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert j.state == "COMPLETED", j
        found = await slow.find("sec", str(work))  # a second login-side call in view
        assert found is not None and found["job_id"] == job
    finally:
        watch.stop()
        await t.close()
        slurm_cluster.cancel_all()

    assert not watch.errors, watch.errors
    assert watch.rounds >= 10, watch.rounds
    assert watch.seen, f"ps never showed the login-side program in {watch.rounds} rounds: the check proves nothing"
    assert not watch.leaks, f"HF_TOKEN readable by nobody in {len(watch.leaks)} ps lines: {sorted({ln[:160] for ln in watch.leaks})}"
    assert all(ln.rstrip().endswith(" -") for ln in watch.seen), watch.seen  # argv ends at "-": nothing after

    # directories 0700 (the operator's workdir stays as it was), files 0600, nobody reads none
    run_dir = Path(found["run_dir"])
    assert run_dir == work / ".cockpit" / "runs" / "sec" / "r1"
    assert _mode(work) == 0o755
    for d in (work / ".cockpit", work / ".cockpit" / "runs", run_dir.parent, run_dir):
        assert _mode(d) == 0o700, (d, oct(_mode(d)))
    files = {f.name: _mode(f) for f in [*run_dir.iterdir(), *run_dir.parent.iterdir()] if f.is_file()}
    for name in ("batch.sh", "batch.log", "node0.log", "nodes", "meta.json", "sbatch_argv.json", "job_id",
                 "submitted_at", "current", ".lock"):
        assert name in files, (name, sorted(files))
    assert {n: oct(m) for n, m in files.items() if m != 0o600} == {}
    assert f"export HF_TOKEN={TOKEN}" in (run_dir / "batch.sh").read_text()  # the owner's copy
    assert (run_dir / "node0.log").read_text() == "serving\n"
    assert (run_dir / "nodes").read_text().split() == [slurm_cluster.node]
    for f in ("batch.sh", "node0.log"):
        denied = _as_nobody("cat", str(run_dir / f))
        assert denied.returncode != 0 and TOKEN not in denied.stdout and "serving" not in denied.stdout
    assert json.loads((run_dir / "sbatch_argv.json").read_text())[-1] == str(run_dir / "batch.sh")
