"""`cockpit restart` of one server across two nodes (issue 38), on the simulator through real sshd
on loopback (gpu-box-1 and gpu-box-2 are this machine, as in tests/test_cli_ops.py's two-node run).

A change the gate refuses (a per-rank HiCache size larger than the machine's RAM) leaves both nodes'
servers as they were: the same pids, alive, the same run. A sane change stops the server of every
node (each old pid and its process group gone), then launches the gate's argv on every node: a new
pid on each, the changed flag in each node's argv, each with its own --node-rank, READY again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.commands.test_cli_ops import Env, _alive, _make_env
from tests.commands.test_restart_cli import host_ram_beyond_gb

NODE_DIRS = ("simtest", "simtest.node1")  # node k > 0 keeps its runs under <profile>.node<k>


def _pids(env: Env, run_id: str) -> list[int]:
    return [int((env.runs_dir(d) / run_id / "pid").read_text()) for d in NODE_DIRS]


def _argvs(env: Env, run_id: str) -> list[list[str]]:
    return [json.loads((env.runs_dir(d) / run_id / "argv.json").read_text()) for d in NODE_DIRS]


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _status(env: Env) -> dict:  # type: ignore[type-arg]
    st = env.cockpit("status", "simtest", "--json")
    assert st.stdout, st.stderr
    return dict(json.loads(st.stdout))


def _ready_on_both(env: Env, timeout: float = 90) -> dict:  # type: ignore[type-arg]
    """status once READY with all 16 ranks captured (node 1's log names TP8-15 a little later)."""
    deadline = time.monotonic() + timeout
    data: dict = {}  # type: ignore[type-arg]
    while time.monotonic() < deadline:
        data = _status(env)
        captured = [r for r in data["ranks"] if r["avail_after_capture_gb"] is not None]
        if data["phase"] == "ready" and len(captured) >= 16:
            return data
        time.sleep(0.5)
    raise AssertionError(f"not READY on both nodes: {data.get('phase')}, ranks {[r['rank'] for r in data.get('ranks', [])]}")


def test_restart_of_a_two_node_run_goes_through_the_gate_on_every_node(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1", "gpu-box-2"], base_env={**os.environ, **ssh_home.env}, tp=16,
                    traffic="none", model="/models/Llama-3.1-70B-Instruct", mfs=0.4)
    try:
        up = env.cockpit("up", "simtest", "--wait", "started", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
        before = _ready_on_both(env)
        run_id = before["run"]["id"]
        pids = _pids(env, run_id)
        assert all(_alive(p) for p in pids), pids

        # refused: nothing stopped on either node
        size = host_ram_beyond_gb()
        refused = env.cockpit("restart", "simtest", "--set", "enable-hierarchical-cache=true",
                              "--set", f"hicache-size={size}", "--wait", "ready", "--timeout", "60")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "hicache_host_memory" in refused.stderr and "nothing was stopped" in refused.stderr, refused.stderr
        assert all(_alive(p) for p in pids), pids
        after = _status(env)
        assert after["run"]["id"] == run_id and after["phase"] == "ready"
        assert _pids(env, run_id) == pids
        for d in NODE_DIRS:  # no second run launched on any node
            assert [p.name for p in env.runs_dir(d).iterdir() if p.is_dir()] == [run_id], d

        # a sane change: every node stopped, then every node launched with the gate's argv
        pgids = [int((env.runs_dir(d) / run_id / "pgid").read_text()) for d in NODE_DIRS]
        sane = env.cockpit("restart", "simtest", "--set", "mem-fraction-static=0.38", "--wait", "started",
                           "--timeout", "60", "--json")
        assert sane.returncode == 0, sane.stdout + sane.stderr
        res = json.loads(sane.stdout)
        assert res["restart"] == {"refused": False, "from_run": run_id, "findings": []}
        new_id = res["run"]["id"]
        assert new_id != run_id and res["run"]["hosts"] == ["gpu-box-1", "gpu-box-2"]
        for pid, pgid in zip(pids, pgids, strict=True):
            assert not _alive(pid) and _group_gone(pgid), (pid, pgid)
        new_pids = _pids(env, new_id)
        assert not set(new_pids) & set(pids) and all(_alive(p) for p in new_pids), (pids, new_pids)
        for rank, (argv, pid) in enumerate(zip(_argvs(env, new_id), new_pids, strict=True)):
            # what runs is what the gate built for that node: the change, this node's rank
            assert argv[argv.index("--mem-fraction-static") + 1] == "0.38", argv
            assert argv[argv.index("--node-rank") + 1] == str(rank) and argv[argv.index("--nnodes") + 1] == "2"
            running = _cmdline(pid)
            assert running[running.index("--mem-fraction-static") + 1] == "0.38", running
        now = _ready_on_both(env)
        assert now["run"]["id"] == new_id and now["server_args"]["mem_fraction_static"] == 0.38
        runs = {r["id"]: r for r in json.loads(env.cockpit("runs", "--json", check=True).stdout)}
        assert runs[run_id]["outcome"] == "stopped" and runs[new_id]["flags"]["mem-fraction-static"] == 0.38
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")
