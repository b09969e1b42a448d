"""One real vLLM server, DP across two nodes over SSH (two_node_kit.py says how)."""

from __future__ import annotations

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
    opt,
    served,
    wait_dead_node,
)

pytestmark = pytest.mark.timeout(1800)


# ---------------------------------------------------------------- DP across two nodes


@pytest.fixture(scope="module")
def dp_run(real_vllm: RealVllm, ssh_home: SshHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cockpit]:
    with served(real_vllm, ssh_home, tmp_path_factory.mktemp("two-node-dp"), "two-node-dp", {"dp": 2}) as ck:
        yield ck


def test_two_node_dp_ready_bench_dead_node_and_down(dp_run: Cockpit) -> None:
    data = dp_run.status()
    assert data["phase"] == "ready" and data["health"] == "200", data
    head, other = argv_of(dp_run, 0), argv_of(dp_run, 1)
    assert opt(head, "--data-parallel-size-local") == opt(other, "--data-parallel-size-local") == "1"
    assert "--data-parallel-start-rank" not in head and opt(other, "--data-parallel-start-rank") == "1"
    assert opt(head, "--data-parallel-address") == opt(other, "--data-parallel-address") == "127.0.0.1"
    assert opt(head, "--data-parallel-rpc-port") == opt(other, "--data-parallel-rpc-port")
    assert "--headless" in other and "--headless" not in head and "--nnodes" not in head
    bench_ok(dp_run)
    port = int(yaml.safe_load(dp_run.profile.read_text())["server"]["port"])
    engine = node_process(dp_run, 1, "EngineCore_DP1")
    t_kill = time.monotonic()
    os.kill(engine, signal.SIGKILL)
    data, took, seen = wait_dead_node(dp_run, port, t_kill)
    assert took <= DEAD_NODE_WITHIN_S, took
    assert seen and seen[-1] == 200, seen
    f = next(f for f in data["findings"] if f["id"] == "node_died")
    assert f["message"].startswith("node 1 (gpu-box-2) died"), f["message"]
    down = dp_run.run("down", str(dp_run.profile), "--timeout", "20", timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    deadline = time.monotonic() + 40
    while alive_of_run(dp_run) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = alive_of_run(dp_run)
    assert not left, [(p, cmdline(p)) for p in left]
