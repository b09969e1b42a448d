"""One real vLLM server, TP across two nodes over SSH (two_node_kit.py says how)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.conftest import SshHome
from tests.real_engine.conftest import RealVllm
from tests.real_engine.lifecycle_kit import Cockpit, cmdline
from tests.real_engine.two_node_kit import (
    DEAD_NODE_WITHIN_S,
    alive_of_run,
    argv_of,
    bench_ok,
    node_process,
    node_run_dir,
    opt,
    served,
    wait_dead_node,
)

pytestmark = pytest.mark.timeout(1800)


# ---------------------------------------------------------------- TP across two nodes


@pytest.fixture(scope="module")
def tp_run(real_vllm: RealVllm, ssh_home: SshHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cockpit]:
    with served(real_vllm, ssh_home, tmp_path_factory.mktemp("two-node-tp"), "two-node-tp", {"tp": 2}) as ck:
        yield ck


def test_two_node_tp_ready_with_derived_flags_and_bench(tp_run: Cockpit) -> None:
    data = tp_run.status()
    assert data["phase"] == "ready" and data["health"] == "200", data
    assert data["run"]["hosts"] == ["gpu-box-1", "gpu-box-2"]
    head, other = argv_of(tp_run, 0), argv_of(tp_run, 1)
    assert opt(head, "--nnodes") == opt(other, "--nnodes") == "2"
    assert (opt(head, "--node-rank"), opt(other, "--node-rank")) == ("0", "1")
    assert "--headless" in other and "--headless" not in head
    # the rendezvous is node 0's address as the profile names it, one port for both
    assert opt(head, "--master-addr") == opt(other, "--master-addr") == "127.0.0.1"
    assert opt(head, "--master-port") == opt(other, "--master-port")
    env1 = json.loads((node_run_dir(tp_run, 1) / "env.json").read_text())
    assert env1["VLLM_HOST_IP"] == "127.0.0.2" and env1["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    # each node's processes are its own: the head's engine and TP0, node 1's TP1
    node_process(tp_run, 0, "Worker_TP0")
    node_process(tp_run, 1, "Worker_TP1")
    bench_ok(tp_run)


def test_two_node_tp_dead_node_named_while_head_health_200(tp_run: Cockpit) -> None:
    port = int(yaml.safe_load(tp_run.profile.read_text())["server"]["port"])
    worker = node_process(tp_run, 1, "Worker_TP1")
    t_kill = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    data, took, seen = wait_dead_node(tp_run, port, t_kill)
    assert took <= DEAD_NODE_WITHIN_S, took
    # the head still says it is healthy: nobody sent it a request that needs node 1
    assert seen and seen[-1] == 200, seen
    f = next(f for f in data["findings"] if f["id"] == "node_died")
    assert f["severity"] == "critical"
    assert f["message"].startswith("node 1 (gpu-box-2) died"), f["message"]
    # its last decisive line, as node 1 printed it (vLLM prints the worker's exit code as -9, or as
    # None when it had not reaped the worker yet: both seen here)
    assert "Worker proc VllmWorker-1 died unexpectedly (exit code: " in f["message"], f["message"]
    assert data["phase"] in ("crashed", "degraded"), data["phase"]


def test_two_node_tp_down_leaves_nothing_on_either_node(tp_run: Cockpit) -> None:
    down = tp_run.run("down", str(tp_run.profile), "--timeout", "20", timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    deadline = time.monotonic() + 40
    while alive_of_run(tp_run) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = alive_of_run(tp_run)
    assert not left, [(p, cmdline(p)) for p in left]


