"""SGLang's own engine (0.5.23, CPU path): a pool too small for the context, the restart with the
finding's change, the launcher SIGKILLed, `down`, and a flag SGLang does not have.

One engine story for the module, in order (each SGLang start costs 30–45 s of CPU on an idle 2-core
machine, minutes on a shared one): `--max-total-tokens 64` comes READY with SGLang's own warning and
Cockpit's `kv_pool_below_context` finding proposing a `--context-length` that fits; the run is
restarted with that change through the supervisor's restart (stop → launch with the change, the
path the TUI's restart key takes) and comes READY without the finding; then the launcher is
SIGKILLed (its scheduler and detokenizer are orphaned: SGLang cleans up only from the launcher) and
`cockpit down` leaves none of the run's processes. The unknown flag needs no engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_engine.conftest import RealSglang
from tests.real_engine.lifecycle_kit import (
    PY,
    READY_TIMEOUT_S,
    Cockpit,
    api_port_of,
    cmdline,
    cockpit,
    finding,
    module_engine_lock,
    start_time,
)

pytestmark = pytest.mark.timeout(1800)

RESTART = textwrap.dedent("""
    import asyncio, json, sys
    from cockpit.core.findings import FlagChange
    from cockpit.core.profile import load_profile
    from cockpit.supervisor.supervisor import Supervisor

    async def main() -> None:
        sup = Supervisor(load_profile(sys.argv[1]))
        old = await sup.launch()  # attaches to the live run
        change = FlagChange(**json.loads(sys.argv[2]))
        new = await sup.restart([change], timeout=60)
        await sup.close()  # detach: the new run goes on
        print(json.dumps({"old": old.id, "new": new.id}))

    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def tiny_pool(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cockpit]:
    root = tmp_path_factory.mktemp("sglang-tiny-pool")
    ck = cockpit(root, real_sglang.profile(root, "sgl-tiny-pool", server={"max-total-tokens": 64}))
    with module_engine_lock(real_sglang):
        try:
            up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S),
                        timeout=READY_TIMEOUT_S + 60)
            assert up.returncode == 0, up.stdout + up.stderr
            yield ck
        finally:
            ck.reap()


def test_a_pool_smaller_than_the_context_is_a_finding_with_a_context_length_that_fits(tiny_pool: Cockpit) -> None:
    warned = tiny_pool.run("logs", str(tiny_pool.profile), "--filter", "KV pool holds").stdout
    assert "KV pool holds 64 tokens, fewer than --context-length 4096" in warned, warned
    data = tiny_pool.status()
    assert data["phase"] == "ready" and data["max_total_num_tokens"] == 64 and data["context_len"] == 4096, data
    f = finding(data, "kv_pool_below_context")
    assert f["severity"] == "warning" and "64 tokens" in f["message"] and "4,096" in f["message"], f
    assert f["changes"] == [{"flag": "--context-length", "from": None, "to": 64}], f["changes"]
    text = tiny_pool.run("status", str(tiny_pool.profile)).stdout
    assert "kv_pool_below_context" in text and "--context-length" in text, text


def test_a_restart_with_the_findings_change_comes_ready_without_it(tiny_pool: Cockpit) -> None:
    change = finding(tiny_pool.status(), "kv_pool_below_context")["changes"][0]
    old_pid = tiny_pool.recorded("pid")
    proc = subprocess.run([PY, "-c", RESTART, str(tiny_pool.profile), json.dumps(
        {"flag": change["flag"], "from_value": change["from"], "to_value": change["to"]})],
        env=tiny_pool.env, capture_output=True, text=True, timeout=READY_TIMEOUT_S, cwd=tiny_pool.root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ids["new"] != ids["old"]
    assert start_time(old_pid) is None  # the old launcher is gone
    data, _ = tiny_pool.wait_phase(("ready",), READY_TIMEOUT_S)
    assert data["run"]["id"] == ids["new"], data["run"]
    assert [v for k, v in data["run"]["flags"].items() if "context" in k] == [64], data["run"]["flags"]
    assert data["context_len"] == 64 and data["max_total_num_tokens"] == 64, data
    assert all(f["id"] != "kv_pool_below_context" for f in data["findings"]), data["findings"]
    assert any("context" in d["flag"] for d in data["flag_diff"]), data["flag_diff"]
    # SGLang's own words on the new run's context
    assert "KV pool holds" not in tiny_pool.run("logs", str(tiny_pool.profile), "--filter", "KV pool holds").stdout


def test_a_killed_launcher_is_an_ending_and_down_leaves_none_of_the_runs_processes(tiny_pool: Cockpit) -> None:
    launcher = tiny_pool.recorded("pid")
    tree = tiny_pool.tree()
    words = {pid: " ".join(cmdline(pid)) for pid in tree}
    assert any("sglang::scheduler" in w for w in words.values()) and any(
        "sglang::detokenizer" in w for w in words.values()), words
    os.kill(launcher, signal.SIGKILL)
    data, _ = tiny_pool.wait_phase(("crashed", "stopped"), 120)
    assert data["phase"] == "crashed", data  # nobody asked it to stop
    assert data["ending"]["by"] == "external", data["ending"]
    assert not (tiny_pool.run_dir() / "stopped_by").exists()
    # the launcher's scheduler and detokenizer were orphaned; `down` leaves none of the run's processes
    down = tiny_pool.run("down", str(tiny_pool.profile), "--timeout", "20", timeout=180)
    assert "Traceback" not in down.stderr, down.stderr
    tiny_pool.wait_no_process(60)
    for pid, start in tree.items():  # launcher, scheduler, detokenizer: none alive
        assert start_time(pid) != start, (pid, words.get(pid))
    # a signal, said as one (issue 34 item 5)
    assert data["crash"] is not None and data["crash"]["kind"] != "host_oom_killed", data["crash"]
    assert "killed by signal 9 (SIGKILL)" in json.dumps({"crash": data["crash"], "findings": data["findings"],
                                                          "ending": data["ending"]})


def test_an_unknown_flag_is_refused_before_launch_naming_it(real_sglang: RealSglang, tmp_path: Path) -> None:
    ck = cockpit(tmp_path, real_sglang.profile(tmp_path, "sgl-bad-flag", server={"no-such-flag": 3}))
    up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", "60")
    assert up.returncode == 2, up.stdout + up.stderr
    assert "no-such-flag" in up.stderr and "Traceback" not in up.stderr, up.stderr
    assert not (Path(ck.env["COCKPIT_RUNS_ROOT"]) / "sgl-bad-flag" / "current").exists()
    # nothing listens on the profile's port: nothing was launched
    import socket

    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", api_port_of(ck.profile))) != 0
