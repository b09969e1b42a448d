"""Target.process_tree on a Slurm run: the simulator as the job on the real test cluster, the login
node reached through its sshd; the job's processes are listed on its node from inside the
allocation (an `srun --overlap` step), checked against Slurm's own list of the step's pids, and a
job that is queued or has ended says why it has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.core.profile import load_profile
from cockpit.supervisor.stacks import collect
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.targets.slurm import SlurmJobTarget
from tests.conftest import SshHome
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_slurm_e2e import _env, _profile
from tests.supervisor.test_target_tree import _until_ranks


def _step_pids(cluster: SlurmCluster, job: str, server_pid: int | None) -> set[int]:
    """Slurm's own word: `scontrol listpids` of the job, run on the node (this machine), for the
    step that holds the server. Not `J.0` by number: a telemetry step started by the supervisor
    can take step 0 before the batch script's srun does (seen on a busy machine)."""
    out = cluster.run("scontrol", "listpids", job).stdout
    steps: dict[str, set[int]] = {}
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[0].isdigit():
            steps.setdefault(cols[2], set()).add(int(cols[0]))
    return next((pids for pids in steps.values() if server_pid in pids), set())


async def test_slurm_target_lists_the_jobs_processes_on_its_node(
        slurm_cluster: SlurmCluster, ssh_env: SshHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in _env(ssh_env, tmp_path).items():
        if k.startswith(("COCKPIT_", "XDG_")):
            monkeypatch.setenv(k, v)
    sup = Supervisor(load_profile(_profile(tmp_path, "slurmtree")))
    assert isinstance(sup.target, SlurmJobTarget)
    filler = slurm_cluster.fill()
    try:
        try:
            await sup.launch()
            job = sup.target.job_id
            # queued: no processes anywhere yet, and the reason is Slurm's
            [queued] = await sup.target.process_tree()
            assert queued.processes == () and queued.error is not None
            assert f"Slurm job {job} is not running (queued: " in queued.error, queued.error
        finally:
            slurm_cluster.release(filler)

        [tree] = await _until_ranks(sup, 8)
        assert tree.error is None, tree.error
        assert tree.node == slurm_cluster.node  # the job's node, not the login node
        ranks = [p for p in tree.processes if p.name.startswith("sglang::sched")]
        assert len(ranks) == 8, [p.name for p in tree.processes]
        server = next(p for p in tree.processes if p.pid == tree.server_pid)
        assert server.cmdline[1:4] == ("-m", "cockpit", "sim")
        assert all(p.ppid == server.pid for p in ranks)
        # the server step's processes and nothing else: not the batch script, not its srun, not
        # the telemetry steps nor the step that listed them
        assert {p.pid for p in tree.processes} == _step_pids(slurm_cluster, str(job), tree.server_pid)

        # the stacks go through the same tree, on the node
        dump = await collect(sup)
        scheds = [p for p in dump["processes"] if p["role"] == "scheduler"]
        assert len(scheds) == 8 and all(p["node"] == slurm_cluster.node for p in scheds), dump["node_errors"]

        res = await sup.stop(timeout=10)
        assert res.stopped
        [ended] = await sup.target.process_tree()
        assert ended.processes == () and ended.error is not None
        assert f"Slurm job {job} is not running (Slurm: job {job} CANCELLED" in ended.error, ended.error
    finally:
        await sup.close()
        from cockpit.transport import close_all

        await close_all()
