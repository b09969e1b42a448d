"""What the two-node tests share (test_two_node_tp.py, test_two_node_dp.py): one REAL vLLM server (its CPU build) across two nodes, launched, followed, benched and stopped by
Cockpit over SSH: node 0 is `gpu-box-1` (the session's sshd) at 127.0.0.1, node 1 is `gpu-box-2`
(the second sshd) at 127.0.0.2 — two loopback addresses of this machine standing in for two hosts,
each node's engine bound to its own core (VLLM_CPU_OMP_THREADS_BIND, from the host's own `env:`).

Both of vLLM's ways across nodes (../shared/reference/vllm.md §12): TP over `--nnodes/--node-rank/
--master-addr/--master-port` with node 1 `--headless`, and DP over `--data-parallel-size-local/
--data-parallel-address/--data-parallel-rpc-port/--data-parallel-start-rank` with node 1 headless.
Cockpit derives every one of those flags per node; the profile names only the hosts and `tp`/`dp`.

What operators fear, reproduced: a SIGKILLed worker on node 1 leaves the head's `/health` at 200
(it logs nothing until a request needs node 1) — Cockpit names node 1 dead within 30 s anyway, from
node 1's own process tree and log. One server per way, shared by the module's tests; the engine
lock holds the machine for the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import SshHome, free_port
from tests.real_engine.conftest import RealVllm
from tests.real_engine.lifecycle_kit import (
    FAST,
    READY_TIMEOUT_S,
    Cockpit,
    cmdline,
    cockpit,
    module_engine_lock,
)

DEAD_NODE_WITHIN_S = 30


def profile(real_vllm: RealVllm, root: Path, name: str, server: dict[str, Any]) -> Path:
    doc = {
        "name": name, "backend": "vllm", "version": real_vllm.version,
        "hosts": [
            {"ssh": "gpu-box-1", "address": "127.0.0.1", "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}},
            {"ssh": "gpu-box-2", "address": "127.0.0.2", "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}},
        ],
        "python": str(real_vllm.python),
        "program": [str(real_vllm.vllm), "serve"],
        "workdir": str(root / "work"), "log": "logs/vllm.log",
        "env": real_vllm.env(),
        "server": {"model": str(real_vllm.tiny), "port": free_port(), "host": "127.0.0.1",
                   "dtype": "bfloat16", "max-model-len": 512, **FAST, **server},
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@contextlib.contextmanager
def served(real_vllm: RealVllm, ssh_home: SshHome, root: Path, name: str, server: dict[str, Any]) -> Iterator[Cockpit]:
    """A two-node server of `server`'s flags up to READY, held under the engine lock, and whatever
    either node left (a failed start-up too) stopped after."""
    ck = cockpit(root, profile(real_vllm, root, name, server), base_env={**os.environ, **ssh_home.env})
    with module_engine_lock(real_vllm):
        try:
            up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S),
                        timeout=READY_TIMEOUT_S + 90)
            assert up.returncode == 0, up.stdout + up.stderr
            yield ck
        finally:
            reap(ck)


def node_run_dir(ck: Cockpit, node: int) -> Path:
    key = ck.name if node == 0 else f"{ck.name}.node{node}"
    pdir = Path(ck.env["COCKPIT_RUNS_ROOT"]) / key
    return pdir / (pdir / "current").read_text().strip()


def node_tree(ck: Cockpit, node: int) -> dict[int, int]:
    path = node_run_dir(ck, node) / "tree"
    if not path.exists():
        return {}
    return {int(a): int(b) for a, b in (ln.split() for ln in path.read_text().splitlines() if ln.strip())}


def node_process(ck: Cockpit, node: int, word: str, timeout: float = 60) -> int:
    """The pid of node `node`'s own process whose title holds `word`, among the pids that node's
    run recorded (never looked up across the machine by name)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in node_tree(ck, node):
            if word in " ".join(cmdline(pid)):
                return pid
        time.sleep(0.5)
    raise AssertionError(f"no {word} in node {node}'s recorded tree {node_tree(ck, node)}")


def alive_of_run(ck: Cockpit) -> list[int]:
    """Processes of either node's run still alive: each node's recorded tree (same start time) and
    its recorded session."""
    from tests.real_engine.lifecycle_kit import session, start_time

    out: list[int] = []
    for node in (0, 1):
        d = node_run_dir(ck, node)
        out += [pid for pid, start in node_tree(ck, node).items() if start_time(pid) == start]
        sid, waiter = int((d / "sid").read_text()), int((d / "waiter_pid").read_text())
        out += [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != waiter and session(int(n)) == sid]
    return sorted(set(out))


def reap(ck: Cockpit) -> None:
    """`down`, then SIGKILL to what either node's run still holds (by recorded pid and session)."""
    ck.run("down", str(ck.profile), "--timeout", "5", timeout=90)
    with contextlib.suppress(OSError):
        for pid in alive_of_run(ck):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return int(resp.status)
    except Exception as exc:
        return getattr(exc, "code", 0) or 0


def argv_of(ck: Cockpit, node: int) -> list[str]:
    argv: list[str] = json.loads((node_run_dir(ck, node) / "argv.json").read_text())
    return argv


def opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def wait_dead_node(ck: Cockpit, port: int, t_kill: float) -> tuple[dict[str, Any], float, list[int]]:
    """Poll `status --json` until it names node 1 dead; the head's /health each time beside it."""
    seen: list[int] = []
    data: dict[str, Any] = {}
    calls: list[str] = []  # each status call: when it started after the kill, how long it took, what it said
    while time.monotonic() - t_kill < DEAD_NODE_WITHIN_S + 30:
        t0 = time.monotonic()
        data = ck.status()
        calls.append(f"+{t0 - t_kill:.1f}s {time.monotonic() - t0:.1f}s {data.get('phase')}/{data.get('lifecycle')}")
        seen.append(health(port))
        if any(f["id"] == "node_died" for f in data["findings"]):
            return data, time.monotonic() - t_kill, seen
        time.sleep(1)
    raise AssertionError(f"node 1's death not named: phase {data.get('phase')}, "
                         f"{[(f['id'], f['message'][:100]) for f in data.get('findings', [])]}; "
                         f"status calls {calls}; /health {seen}; node 1's record: "
                         f"{sorted(p.name for p in node_run_dir(ck, 1).iterdir())}")


def bench_ok(ck: Cockpit) -> dict[str, Any]:
    out = ck.run("bench", str(ck.profile), "--requests", "6", "--concurrency", "2", "--input-len", "32",
                 "--output-len", "16", "--duration", "240", "--json", timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    r: dict[str, Any] = json.loads(out.stdout)
    assert r["requests"] == 6 and r["errors"] == 0, r["error_kinds"]
    return r


