"""The Slurm test cluster itself: reachable through the login sshd, runs jobs."""

from __future__ import annotations

import subprocess

from tests.conftest import SshHome
from tests.slurm.cluster import SlurmCluster


def test_login_node_submits_and_srun_prefixes(slurm_cluster: SlurmCluster, ssh_home: SshHome) -> None:
    argv = ssh_home.ssh_argv(slurm_cluster.alias, "srun", "-l", "-N1", "-n1", "echo", "hi")
    out = subprocess.run(argv, env=ssh_home.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0: hi"
