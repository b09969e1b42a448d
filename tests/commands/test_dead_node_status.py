"""`cockpit status` names a dead node at once though the head cannot answer (issue 38): two
simulated nodes on loopback hosts through real sshd, the head's server stopped (SIGSTOP: its
/health and the hang probe go unanswered, as vLLM's DP head leaves the probe of a run whose node
died), node 1 SIGKILLed. Without reading node 1's record during the head's look, `status` waited
out the hang window (67 s seen on a real two-node DP run) and said `hung`; it must say node 1 died
within seconds of node 1's exit."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from cockpit.core.hang import hang_after_s
from tests.commands.test_cli_ops import _make_env
from tests.commands.test_restart_two_nodes import NODE_DIRS, _ready_on_both


def test_status_names_the_dead_node_without_waiting_out_a_silent_heads_hang_window(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1", "gpu-box-2"], base_env={**os.environ, **ssh_home.env}, tp=16,
                    traffic="none", model="/models/Llama-3.1-70B-Instruct", mfs=0.4)
    head_pgid = None
    try:
        up = env.cockpit("up", "simtest", "--wait", "started", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = _ready_on_both(env)["run"]["id"]
        head_pgid, node1_pgid = (int((env.runs_dir(d) / run_id / "pgid").read_text()) for d in NODE_DIRS)
        os.killpg(head_pgid, signal.SIGSTOP)  # the head answers nothing from here on
        # status first, node 1's death while it looks at the silent head (a real node takes seconds
        # to end after its engine died: the look has begun by then)
        status = env.popen("status", "simtest", "--json")
        time.sleep(3.0)
        os.killpg(node1_pgid, signal.SIGKILL)
        t_kill = time.monotonic()
        out, err = status.communicate(timeout=180)
        took = time.monotonic() - t_kill
        data = json.loads(out)
        died = [f for f in data["findings"] if f["id"] == "node_died"]
        assert died and "node 1 (gpu-box-2) died" in died[0]["message"], (data["phase"], data["findings"], err[-500:])
        window = hang_after_s("sglang", None)
        assert took < min(20.0, window / 2), (took, window)  # named, not the hang window waited out
    finally:
        if head_pgid is not None:
            os.killpg(head_pgid, signal.SIGCONT)
        env.cockpit("down", "simtest", "--timeout", "10")
