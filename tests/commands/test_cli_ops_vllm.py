"""`cockpit up/status/logs/down` driving a vLLM profile on the vLLM simulator, locally and through
a real sshd on loopback (the SGLang counterparts are in tests/commands/test_cli_ops.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port

PY = sys.executable


@dataclass
class Env:
    root: Path
    env: dict[str, str]
    port: int

    def cockpit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cockpit", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)


def _make_env(tmp_path: Path, host: str, base_env: dict[str, str] | None = None, util: float = 0.92,
              traffic: str = "none") -> Env:
    root = tmp_path
    sim_dir = root / "gpus"
    sim_dir.mkdir()
    port = free_port()
    (root / "profiles").mkdir()
    program = [PY, "-m", "cockpit", "sim", "--sim-backend", "vllm", "--sim-gpu", "h100", "--sim-speed", "200",
               "--sim-traffic", traffic, "--sim-dir", str(sim_dir), "serve"]
    (root / "profiles" / "vsim.yaml").write_text(
        "name: vsim\nbackend: vllm\nversion: 0.33.0\n"
        f"hosts:\n  - ssh: {host}\n"
        f"program: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\nlog: logs/vllm.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n  model: Qwen/Qwen3-32B\n  tensor-parallel-size: 2\n"
        f"  gpu-memory-utilization: {util}\n  port: {port}\n"
    )
    env = dict(base_env or os.environ)
    if base_env is None:
        (root / "home").mkdir()
        env["HOME"] = str(root / "home")
    env.update({
        "XDG_CONFIG_HOME": str(root / "xdg-config"), "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"), "COCKPIT_RUNS_ROOT": str(root / "runs"),
        "COCKPIT_SIM_GPU_DIR": str(sim_dir), "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    })
    env.pop("SSH_AUTH_SOCK", None)
    return Env(root, env, port)


def _scenario(env: Env) -> None:
    up = env.cockpit("up", "vsim", "--set", "gpu-memory-utilization=0.95", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "READY" in up.stdout

    st = env.cockpit("status", "vsim", "--json")
    assert st.returncode in (0, 1), st.stderr
    data = json.loads(st.stdout)
    assert data["phase"] == "ready" and data["health"] == "200"
    assert data["backend"] == "vllm" and data["format"] == "vllm-0.33.0"
    assert {"flag": "--gpu-memory-utilization", "to": 0.95}.items() <= data["flag_diff"][0].items()
    ranks = {r["rank"]: r for r in data["ranks"]}
    assert set(ranks) == {"TP0", "TP1"}
    for r in ranks.values():
        assert r["weights_gb"] == 30.59 and r["kv_gb"] and r["avail_after_capture_gb"] > 5.0
        assert r["gpu"]["used_gb"] is not None and r["gpu"]["used_gb"] > 60, r  # the agent saw the worker's memory
    assert data["max_total_num_tokens"] > 300_000

    logs = env.cockpit("logs", "vsim", "--filter", "Model loading took|KV cache size")
    assert logs.returncode == 0, logs.stderr
    assert "(Worker_TP1 pid=" in logs.stdout and "GPU KV cache size:" in logs.stdout
    assert len(env.cockpit("logs", "vsim", "--tail", "3").stdout.splitlines()) == 3
    tp1 = env.cockpit("logs", "vsim", "--filter", "Model loading took", "--rank", "1").stdout.splitlines()
    assert tp1 and all(ln.startswith("(Worker_TP1 pid=") for ln in tp1), tp1
    # the memory preset in vLLM's words (the backend's presets, not SGLang's "avail mem")
    mem = env.cockpit("logs", "vsim", "--filter", "memory")
    assert mem.returncode == 0, mem.stderr
    assert "Available KV cache memory:" in mem.stdout and "Model loading took" in mem.stdout
    assert "CUDA graph pool memory:" in mem.stdout and "Avg prompt throughput" not in mem.stdout

    down = env.cockpit("down", "vsim", "--timeout", "10")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped" in down.stdout
    assert json.loads(env.cockpit("status", "vsim", "--json").stdout)["phase"] == "stopped"


def test_up_status_logs_down_vllm_local(tmp_path: Path) -> None:
    env = _make_env(tmp_path, "local")
    try:
        _scenario(env)
        runs = json.loads(env.cockpit("runs", "--json").stdout)
        assert runs[0]["outcome"] == "stopped" and runs[0]["flags"]["gpu-memory-utilization"] == 0.95
    finally:
        env.cockpit("down", "vsim", "--timeout", "3")


def test_up_status_logs_down_vllm_over_ssh(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, "gpu-box-1", base_env={**os.environ, **ssh_home.env})
    try:
        _scenario(env)
    finally:
        env.cockpit("down", "vsim", "--timeout", "3")


def test_up_reports_a_vllm_startup_crash_with_vllm_advice(tmp_path: Path) -> None:
    env = _make_env(tmp_path, "local", util=0.42)  # Qwen3-32B's 30.6 GiB per GPU leave no KV cache at 0.42
    try:
        up = env.cockpit("up", "vsim", "--wait", "ready", "--timeout", "60")
        assert up.returncode == 1, up.stdout + up.stderr
        assert "init_not_enough_memory" in up.stderr
        assert "--gpu-memory-utilization 0.42 →" in up.stderr and "mem-fraction" not in up.stderr
        data = json.loads(env.cockpit("status", "vsim", "--json").stdout)
        assert data["crash"]["kind"] == "init_not_enough_memory"
    finally:
        env.cockpit("down", "vsim", "--timeout", "3")


def test_api_key_reaches_vllm_through_its_environment_not_argv(tmp_path: Path) -> None:
    """vLLM reads VLLM_API_KEY when --api-key is absent: a launch hands the key over there, so no
    process list shows it (SGLang has no such variable and keeps it in argv, tests/reliability)."""
    import urllib.error
    import urllib.request

    key = "sk-vllm-k3y-n0t-in-argv-7719"
    env = _make_env(tmp_path, "local")
    prof = env.root / "profiles" / "vsim.yaml"
    prof.write_text(prof.read_text() + f"  api-key: '{key}'\n")
    try:
        up = env.cockpit("up", "vsim", "--wait", "ready", "--timeout", "90")
        assert up.returncode == 0, up.stdout + up.stderr
        ps = subprocess.run(["ps", "-eww", "-o", "pid,args", "--no-headers"], capture_output=True, text=True, check=True)
        assert key not in ps.stdout
        assert any("vllm" in ln and str(env.port) in ln for ln in ps.stdout.splitlines())  # the server is in the list
        body = json.dumps({"model": "Qwen/Qwen3-32B", "prompt": "hi", "max_tokens": 2}).encode()
        url = f"http://127.0.0.1:{env.port}/v1/completions"

        def post(headers: dict[str, str]) -> int:
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)

        assert post({}) == 401  # the server holds the key: it came through its environment
        assert post({"Authorization": f"Bearer {key}"}) == 200
        st = env.cockpit("status", "vsim", "--json")
        assert key not in st.stdout and json.loads(st.stdout)["run"]["flags"]["api-key"] == "***"
    finally:
        env.cockpit("down", "vsim", "--timeout", "5")
