"""Issue 40, finding 7: secrets inside a JSON-valued flag never leave the run directory.

A real run of the vLLM simulator whose profile sets `kv-transfer-config` as a YAML mapping (the
JSON text vLLM takes) holding a Redis URL with a password, a cloud secret key under a secret-looking
name two levels down, and a token as a URL's user; `--set` adds an S3 URL with a key in its query.
The flag's name is not secret, so masking by name alone let all of them through. Then `status`,
`status --json`, `runs`, `runs --json`, `runs show --json` must not show any of them, and no byte of
the journal's files (the SQLite file, its WAL) may hold one. The server itself got them (the
premise): the run directory keeps the real values, 0600, as a restart needs.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cockpit.core.secrets import without_masked
from tests.conftest import free_port, isolated_env
from tests.reliability.helpers import PY, make_env

REDIS_PW = "r3dis-pw-d0-not-leak-6121"
CLOUD_KEY = "wJalrXUtnFEMI-cloud-k3y-d0-not-leak-0093"
URL_TOKEN = "ghp_url-us3r-t0ken-d0-not-leak-7345"
QUERY_KEY = "s3-qu3ry-k3y-d0-not-leak-2281"
SECRETS = (REDIS_PW, CLOUD_KEY, URL_TOKEN, QUERY_KEY)


def _profile(root: Path, sim_dir: Path) -> str:
    program = [PY, "-m", "cockpit", "sim", "--sim-backend", "vllm", "--sim-gpu", "h100", "--sim-speed", "200",
               "--sim-traffic", "none", "--sim-dir", str(sim_dir), "serve"]
    return ("name: kvj\nbackend: vllm\nversion: 0.33.0\nhosts:\n  - ssh: local\n"
            f"program: {json.dumps(program)}\nworkdir: {root / 'work'}\nlog: logs/vllm.log\n"
            f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
            "server:\n  model: Qwen/Qwen3-32B\n  tensor-parallel-size: 2\n  gpu-memory-utilization: 0.9\n"
            f"  port: {free_port()}\n"
            "  kv-transfer-config:\n    kv_connector: LMCacheConnectorV1\n    kv_role: kv_both\n"
            "    kv_connector_extra_config:\n"
            f"      remote_url: 'redis://cache:{REDIS_PW}@redis.internal:6379/0'\n"
            f"      mirrors: ['https://{URL_TOKEN}@git.internal/kv', 'lm://plain.internal:65432']\n"
            f"      cloud: {{region: eu-west-1, aws_secret_access_key: '{CLOUD_KEY}'}}\n")


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_secrets_inside_a_json_flag_never_show(tmp_path: Path) -> None:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    env = make_env(tmp_path)
    env.env.update(isolated_env(tmp_path, sim_dir, home=Path(env.env["HOME"])))
    env.env["XDG_DATA_HOME"] = str(env.journal.parent)
    env.write_profile("kvj", _profile(tmp_path, sim_dir))
    lora = f"s3://models/adapter?region=eu&X-Amz-Security-Token={QUERY_KEY}"
    up = env.cockpit("up", "kvj", "--set", f"served-model-name={lora}", "--wait", "ready", "--timeout", "150")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert not _leaks(up.stdout + up.stderr)
        run_dir = env.current_run("kvj")
        argv = json.loads((run_dir / "argv.json").read_text())
        sent = json.loads(argv[argv.index("--kv-transfer-config") + 1])  # the premise: the engine got them
        assert REDIS_PW in sent["kv_connector_extra_config"]["remote_url"]
        assert sent["kv_connector_extra_config"]["cloud"]["aws_secret_access_key"] == CLOUD_KEY

        st = env.cockpit("status", "kvj", "--json")
        data = json.loads(st.stdout)
        run_id = data["run"]["id"]
        shown = json.loads(data["run"]["flags"]["kv-transfer-config"])  # still JSON, masked inside
        extra = shown["kv_connector_extra_config"]
        assert extra["remote_url"] == "redis://cache:***@redis.internal:6379/0", extra
        assert extra["mirrors"] == ["https://***@git.internal/kv", "lm://plain.internal:65432"], extra
        assert extra["cloud"] == {"region": "eu-west-1", "aws_secret_access_key": "***"}, extra
        assert shown["kv_role"] == "kv_both"  # what is not secret stays readable
        assert data["run"]["flags"]["served-model-name"].endswith("X-Amz-Security-Token=***")
        outputs = {"status --json": st.stdout + st.stderr}
        for args in (("status", "kvj"), ("runs",), ("runs", "--json"), ("runs", "show", run_id),
                     ("runs", "show", run_id, "--json")):
            done = env.cockpit(*args)
            outputs[" ".join(args)] = done.stdout + done.stderr
        leaked = {what: _leaks(text) for what, text in outputs.items() if _leaks(text)}
        assert not leaked, f"shown by: {leaked}"
        files = [f for f in env.journal.iterdir() if f.is_file()]
        assert any(f.name.endswith(".sqlite3") for f in files), files
        for f in files:
            raw = f.read_bytes()
            assert not [s for s in SECRETS if s.encode() in raw], f
        with sqlite3.connect(env.journal / "journal.sqlite3") as con:
            (flags,) = con.execute("SELECT flags FROM runs WHERE id = ?", (run_id,)).fetchone()
        assert "redis://cache:***@" in flags  # the journal row is the masked copy, not an empty one
        # relaunching this run from the history screen: a flag masked inside is dropped (the
        # profile's real value applies), never launched with `***` in it
        again = without_masked(json.loads(flags))
        assert "kv-transfer-config" not in again and "served-model-name" not in again
        assert again["tensor-parallel-size"] == 2
    finally:
        env.cockpit("down", "kvj", "--timeout", "5")
