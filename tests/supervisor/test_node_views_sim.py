"""The nodes a two-node run's snapshot carries (RunSnapshot.nodes, issue 38), from the simulator on
two loopback "hosts" through real sshd: both alive once READY, the ranks view's rows grouped by node
as the supervisor's rank → GPU map places them, and node 1 `died` on its own line once its server is
SIGKILLed, while node 0 stays alive (the head may still answer /health)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from cockpit.core.profile import load_profile
from cockpit.supervisor.supervisor import Supervisor
from cockpit.transport import close_all
from cockpit.ui.widgets.rankbars import NodeHeading, node_heading_parts, rank_rows
from tests.commands.test_cli_ops import _make_env


async def test_a_two_node_run_names_its_nodes_and_the_one_that_died(ssh_env, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = _make_env(tmp_path, ["gpu-box-1", "gpu-box-2"], base_env={**os.environ, **ssh_env.env}, tp=16,
                    traffic="none", model="/models/Llama-3.1-70B-Instruct", mfs=0.4)
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "COCKPIT_RUNS_ROOT", "COCKPIT_SIM_GPU_DIR"):
        monkeypatch.setenv(key, env.env[key])
    sup = Supervisor(load_profile(env.profile))
    runner: asyncio.Task[None] | None = None
    try:
        assert [n.state for n in sup.snapshot().nodes] == ["not running", "not running"]
        await sup.launch()
        runner = asyncio.create_task(sup.run())
        placed = await sup.wait_until(lambda s: s.snapshot().state.phase == "ready" and len(s.rank_gpu()) == 16, 90)
        snap = sup.snapshot()
        assert placed, (snap.state.phase, sorted(snap.rank_gpu))
        assert [(n.index, n.host, n.state) for n in snap.nodes] == [(0, "gpu-box-1", "alive"), (1, "gpu-box-2", "alive")]
        rows = rank_rows(snap)
        heads = [i for i, r in enumerate(rows) if isinstance(r, NodeHeading)]
        assert heads == [0, 9], rows
        assert rows[1:9] == [f"TP{i}" for i in range(8)] and rows[10:] == [f"TP{i}" for i in range(8, 16)]
        assert node_heading_parts(rows[9])[:4] == ["node 1", "gpu-box-2", "headless", "alive"]  # type: ignore[arg-type]

        record = sup.nodes[1].record
        assert record is not None and record.pgid is not None
        os.killpg(record.pgid, signal.SIGKILL)  # node 1's server and ranks, nothing said first
        assert await sup.wait_until(lambda s: s.snapshot().nodes[1].state == "died", 30)
        snap = sup.snapshot()
        assert snap.nodes[0].state == "alive"
        assert any(f.id == "node_died" for f in snap.findings)
        heading = rank_rows(snap)[9]
        assert isinstance(heading, NodeHeading)
        assert " · ".join(node_heading_parts(heading)) == "node 1 · gpu-box-2 · headless · died"
    finally:
        await sup.stop(timeout=5)
        await sup.close()
        if runner is not None:
            await runner
        await close_all()
