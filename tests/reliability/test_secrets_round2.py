"""Issue 27: the API key never in the journal's bench column or any JSON; abbreviated secret flags
are masked as the engine would read them.

A real run of the simulator (SGLang's flag parser: argparse, abbreviations allowed) whose profile
sets the key as `api-k:`, which the engine takes as `--api-key`; a real `cockpit bench` on it.
Then `status`, `status --json`, `bench --json`, `runs`, `runs --json`, `runs show --json` must not
show the key, and no byte of the journal's files may hold it. A bench row written by an older
Cockpit (the key in its flags) is masked as it is read.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import free_port, isolated_env
from tests.reliability.helpers import PY, make_env

KEY = "sk-abbrev-k3y-d0-not-leak-7719"


def _sim_profile(root: Path, sim_dir: Path) -> str:
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "a100-80gb", "--sim-speed", "50", "--sim-traffic", "none",
               "--sim-dir", str(sim_dir)]
    return ("name: abk\nversion: 0.5.9\nhosts:\n  - ssh: local\n"
            f"program: {json.dumps(program)}\nworkdir: {root / 'work'}\nlog: logs/sglang.log\n"
            f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
            "server:\n  model-path: /models/llama-3.1-8b\n  tp: 1\n  mem-fraction-static: 0.85\n"
            f"  port: {free_port()}\n  enable-metrics: true\n  api-k: '{KEY}'\n")


def test_an_abbreviated_key_and_the_bench_result_never_show_the_key(tmp_path: Path, ledger) -> None:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    env = make_env(tmp_path)
    env.env.update(isolated_env(tmp_path, sim_dir, home=Path(env.env["HOME"])))
    env.env["XDG_DATA_HOME"] = str(env.journal.parent)
    env.write_profile("abk", _sim_profile(tmp_path, sim_dir))
    up = env.cockpit("up", "abk", "--wait", "ready", "--timeout", "150")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        run_dir = env.current_run("abk")
        argv = json.loads((run_dir / "argv.json").read_text())
        assert argv[argv.index(KEY) - 1] == "--api-key"  # the engine takes `api-k` as --api-key (the premise)
        ledger.fault("secrets")
        bench = env.cockpit("bench", "abk", "--requests", "4", "--concurrency", "2", "--input-len", "64",
                            "--output-len", "16", "--duration", "30", "--json")
        assert bench.stdout, bench.stderr
        result = json.loads(bench.stdout)
        assert result["flags"]["api-k"] == "***", result["flags"]
        outputs = {"bench --json": bench.stdout + bench.stderr}
        st = json.loads(env.cockpit("status", "abk", "--json").stdout)
        run_id = st["run"]["id"]
        assert st["run"]["flags"]["api-k"] == "***"
        for args in (("status", "abk"), ("status", "abk", "--json"), ("runs",), ("runs", "--json"),
                     ("runs", "show", run_id), ("runs", "show", run_id, "--json")):
            done = env.cockpit(*args)
            outputs[" ".join(args)] = done.stdout + done.stderr
        shown = json.loads(outputs[f"runs show {run_id} --json"].split("\n", 0)[0])
        assert shown["bench"]["flags"]["api-k"] == "***", shown["bench"]
        leaked = {what: text[max(0, text.index(KEY) - 200):text.index(KEY) + 40]
                  for what, text in outputs.items() if KEY in text}
        assert not leaked, f"the key shows in: {leaked}"
        for f in env.journal.iterdir():
            assert KEY.encode() not in f.read_bytes(), f
        ledger.survive("secrets")

        # a bench row written by an older Cockpit, the key in its flags: masked as it is read
        db = env.journal / "journal.sqlite3"
        old = {**result, "flags": {"api-k": KEY, "tp": 1}}
        with sqlite3.connect(db) as con:
            con.execute("UPDATE runs SET bench = ? WHERE id = ?", (json.dumps(old), run_id))
        again = env.cockpit("runs", "show", run_id, "--json")
        assert KEY not in again.stdout and json.loads(again.stdout)["bench"]["flags"]["api-k"] == "***"
        ledger.tried("secrets", 8)
    finally:
        env.cockpit("down", "abk", "--timeout", "5")
