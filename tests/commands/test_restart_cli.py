"""`cockpit restart` through the real CLI on the simulator (issue 37 item 1, issue 40 finding 1).

A HiCache size this host cannot hold (1 rank × N GB > the RAM available, N above the machine's
total) is refused with the per-rank arithmetic `cockpit up` prints, and the live run is untouched:
the same pid, still READY. A sane change restarts it to READY under a new pid that runs the changed
flag. No live run, and a flag the server refuses, are said (exit 1, exit 2) with nothing launched.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.commands.test_cli_ops import Env, _alive, _make_env


def host_ram_beyond_gb() -> int:
    """A per-rank HiCache size larger than this machine's whole RAM (so refused on any host)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return math.ceil(int(line.split()[1]) * 1024 / 1e9) + 50
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[Env]:
    e = _make_env(tmp_path, ["local"], tp=1, model="/models/Llama-3.1-8B-Instruct")
    yield e
    e.cockpit("down", "simtest", "--timeout", "3")


def _status(env: Env) -> dict:  # type: ignore[type-arg]
    st = env.cockpit("status", "simtest", "--json")
    return dict(json.loads(st.stdout))


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def test_restart_refused_by_the_gate_leaves_the_run_untouched_then_a_sane_change_restarts(one_rank: Env) -> None:
    env = one_rank
    nothing = env.cockpit("restart", "simtest")
    assert nothing.returncode == 1, nothing.stdout + nothing.stderr
    assert "no live run to restart" in nothing.stderr and "cockpit up simtest" in nothing.stderr
    assert not env.runs_dir("simtest").exists() or not (env.runs_dir("simtest") / "current").exists()

    up = env.cockpit("up", "simtest", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    before = _status(env)
    assert before["phase"] == "ready" and before["health"] == "200"
    pid, run_id = before["run"]["pid"], before["run"]["id"]

    size = host_ram_beyond_gb()
    refused = env.cockpit("restart", "simtest", "--set", "enable-hierarchical-cache=true",
                          "--set", f"hicache-size={size}", "--wait", "ready", "--timeout", "60")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    err = refused.stderr
    # the words `up` says, with the per-rank arithmetic
    assert "refused before restart:" in err and "hicache_host_memory" in err, err
    assert re.search(rf"1 ranks? × {size} GB = {size} GB \+ .* > [\d.]+ GB available", err), err
    assert "--hicache-size is GB per rank" in err, err
    assert f"nothing was stopped: run {run_id} (pid {pid}" in err, err
    up_says = env.cockpit("up", "simtest", "--set", "enable-hierarchical-cache=true", "--set", f"hicache-size={size}")
    assert up_says.returncode == 1
    assert re.search(r"hicache_host_memory: local: --hicache-size is GB per rank, not a total: 1 ranks? × \d+ GB", up_says.stderr)
    # untouched: the same process, still serving, no second run directory
    assert _alive(pid)
    after = _status(env)
    assert after["run"]["pid"] == pid and after["run"]["id"] == run_id
    assert after["phase"] == "ready" and after["health"] == "200"
    assert len([d for d in env.runs_dir("simtest").iterdir() if d.is_dir()]) == 1

    # --json on a refusal: the untouched run's status in up's shape, with why
    as_json = env.cockpit("restart", "simtest", "--set", "enable-hierarchical-cache=true",
                          "--set", f"hicache-size={size}", "--json")
    assert as_json.returncode == 1
    out = json.loads(as_json.stdout)
    assert out["restart"]["refused"] is True and out["restart"]["from_run"] == run_id
    assert out["restart"]["findings"][0]["id"] == "hicache_host_memory"
    assert out["run"]["pid"] == pid and out["phase"] == "ready"

    # bad input: exit 2, the run untouched
    bad = env.cockpit("restart", "simtest", "--set", "chunked-prefill-size=lots")
    assert bad.returncode == 2 and "chunked-prefill-size" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert _alive(pid)

    # a sane change: stop, the old processes gone, GPUs released, the gate's argv launched, READY
    sane = env.cockpit("restart", "simtest", "--set", "mem-fraction-static=0.85", "--wait", "ready",
                       "--timeout", "90", "--json")
    assert sane.returncode == 0, sane.stdout + sane.stderr
    res = json.loads(sane.stdout)
    assert res["ready"] is True and res["phase"] == "ready" and res["waited"] == "ready"
    assert res["restart"] == {"refused": False, "from_run": run_id, "findings": []}
    new_pid = res["run"]["pid"]
    assert new_pid != pid and res["run"]["id"] != run_id
    assert not _alive(pid)
    argv = _cmdline(new_pid)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85", argv
    assert "stopping run" in sane.stderr and "launched run" in sane.stderr
    now = _status(env)
    assert now["run"]["pid"] == new_pid and now["phase"] == "ready"
    runs = json.loads(env.cockpit("runs", "--json", check=True).stdout)
    by_id = {r["id"]: r for r in runs}
    assert by_id[run_id]["outcome"] == "stopped" and by_id[res["run"]["id"]]["flags"]["mem-fraction-static"] == 0.85
