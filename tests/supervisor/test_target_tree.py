"""Target.process_tree on the hosts target: the simulator's run (a server and its eight scheduler
ranks) launched over a real sshd on loopback, listed by the host program from the run's own record
(its session and recorded tree), nothing found by name; and what it says once the run has ended."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from cockpit.core.profile import load_profile
from cockpit.remote.hostresults import NodeTree, StackRequest
from cockpit.supervisor.stacks import collect
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.targets.hosts import HostsTarget
from tests.commands.test_cli_ops import _pids_of_session, _profile_text
from tests.conftest import SshHome, free_port


async def _until_ranks(sup: Supervisor, n: int, timeout: float = 90) -> list[NodeTree]:
    """The tree once it holds the server's n ranks (they start after the server)."""
    deadline = time.monotonic() + timeout
    while True:
        trees = await sup.target.process_tree()
        ranks = [p for t in trees for p in t.processes if p.name.startswith("sglang::sched")]
        if len(ranks) >= n or time.monotonic() > deadline:
            return trees
        await asyncio.sleep(0.5)


async def test_hosts_target_lists_the_runs_processes_over_ssh(ssh_env: SshHome, tmp_path: Path,
                                                               monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for k, v in {"COCKPIT_RUNS_ROOT": tmp_path / "runs", "XDG_DATA_HOME": tmp_path / "data",
                 "XDG_CONFIG_HOME": tmp_path / "config", "XDG_CACHE_HOME": tmp_path / "cache"}.items():
        monkeypatch.setenv(k, str(v))
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    (tmp_path / "work").mkdir()
    path = tmp_path / "treetest.yaml"
    path.write_text(_profile_text("treetest", ["gpu-box-1"], tmp_path, sim_dir, free_port(), traffic="none"))
    sup = Supervisor(load_profile(path))
    assert isinstance(sup.target, HostsTarget)
    try:
        info = await sup.launch()
        [tree] = await _until_ranks(sup, 8)
        assert tree.node == "gpu-box-1" and tree.error is None, tree.error
        assert info.pid is not None and tree.server_pid == info.pid
        ranks = [p for p in tree.processes if p.name.startswith("sglang::sched")]
        assert len(ranks) == 8 and all(p.ppid == info.pid and p.state for p in ranks), ranks
        # exactly the run's session, less its waiter (the host program's own process): the sshd
        # runs on this machine, so /proc here is the host's
        waiter = next(p.ppid for p in tree.processes if p.pid == info.pid)
        assert {p.pid for p in tree.processes} == set(_pids_of_session(os.getsid(info.pid))) - {waiter}
        assert os.getpid() not in {p.pid for p in tree.processes}
        server = next(p for p in tree.processes if p.pid == info.pid)
        assert server.cmdline[1:4] == ("-m", "cockpit", "sim")

        # the stacks go through the same tree (no py-spy beside this interpreter: each process says so)
        dump = await collect(sup)
        scheds = [p for p in dump["processes"] if p["role"] == "scheduler"]
        assert len(scheds) == 8 and {p["pid"] for p in scheds} == {p.pid for p in ranks}
        assert dump["node_errors"] == {} and all(p["node"] == "gpu-box-1" for p in scheds)
        assert all(p["error"] == "py-spy not found on this host" for p in scheds) or all(p["threads"] for p in scheds)

        res = await sup.stop(timeout=10)
        assert res.stopped
        [after] = await sup.target.process_tree(StackRequest())
        assert after.processes == () and after.error is not None
        assert f"run {info.id} has no live process on this host: it has ended" in after.error, after.error
    finally:
        await sup.close()
        from cockpit.transport import close_all

        await close_all()
