"""Issue 40, finding 12: a HiCache host pool no larger than the device KV pool.

SGLang 0.5.9 sizes each rank's host pool as `--hicache-ratio` × that rank's device pool (or
`--hicache-size` GB ÷ bytes per token), one page added, and asserts it is larger
(sglang/srt/mem_cache/memory_pool_host.py, HostKVCache.__init__: `The host memory should be larger
than the device memory with the current protocol`), after the weights have loaded; 0.5.23 only
warns (`… is smaller than the device pool …; L2 cache effectiveness is reduced`). Before: the gate
passed `--hicache-ratio 0.5`, and the crash was `crash_unclassified`.

Now the gate, once the memory plan knows the device pool, refuses it (0.5.9; a warning on 0.5.23)
with the arithmetic and the change; the assertion in a log is diagnosed as its own kind with the
same advice. The plan runs on a synthesized Llama-3.1-8B checkpoint and a simulated A100.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]


def cockpit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xd"), "XDG_CONFIG_HOME": str(tmp_path / "xc"),
           "XDG_CACHE_HOME": str(tmp_path / "xk"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path, check=False)


def test_the_assertion_is_diagnosed_with_its_kind_and_advice(tmp_path: Path) -> None:
    log = DATA / "sglang-0.5.9-llama70b-hicache-smaller-than-device.log"
    r = cockpit(tmp_path, "diagnose", str(log), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    js = json.loads(r.stdout)
    assert js["crash"]["kind"] == "host_cache_smaller_than_device", js["crash"]
    assert js["crash"]["phase"] == "startup" and js["crash"]["rank"] == "TP0"
    f = js["findings"][0]
    assert f["id"] == "hicache_smaller_than_device" and f["severity"] == "critical", f
    assert f["changes"] == [{"flag": "--hicache-ratio", "from": 0.5, "to": 2.0}], f["changes"]
    # the arithmetic with the log's own device pool: ⌊0.5 × 1,244,811⌋ = 622,405, + one page = 622,406
    assert "622,406" in f["message"] and "1,244,811" in f["message"], f["message"]
    text = cockpit(tmp_path, "diagnose", str(log)).stdout
    assert "crash_unclassified" not in text and "hicache_smaller_than_device" in text


def _profile(tmp_path: Path, version: str, hicache: str) -> Path:
    from cockpit.sim.gpus import write_devices
    from cockpit.sim.presets import GPUS
    from tests.data.models import synth

    model = tmp_path / "Llama-3.1-8B"
    if not model.exists():
        synth.write_checkpoint(model, synth.load_config("llama-3.1-8b"), shards=2, index=True)
    sim = tmp_path / "gpus"
    write_devices(sim, GPUS["a100-80gb"], 1)
    p = tmp_path / f"h-{version}.yaml"
    p.write_text(f"name: h\nhosts: [{{ssh: local}}]\nversion: {version}\nenv: {{COCKPIT_SIM_GPU_DIR: '{sim}'}}\n"
                 f"server:\n  model-path: {model}\n  tp: 1\n  mem-fraction-static: 0.85\n"
                 f"  enable-hierarchical-cache: true\n  {hicache}\n")
    return p


def _check(tmp_path: Path, p: Path) -> tuple[int, dict[str, dict], dict]:
    r = cockpit(tmp_path, "check", str(p), "--json", "--host-mem-gb", "2000")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    js = json.loads(r.stdout)
    return r.returncode, {f["id"]: f for f in js["findings"]}, js


def test_the_gate_refuses_a_ratio_below_one_with_the_arithmetic(tmp_path: Path) -> None:
    rc, found, _js = _check(tmp_path, _profile(tmp_path, "0.5.9", "hicache-ratio: 0.5"))
    plan = found["memory_plan"]
    device = plan["predicted"]["max_total_num_tokens"]  # the plan's device pool per rank
    f = found.get("hicache_smaller_than_device")
    assert f is not None and f["severity"] == "critical" and rc == 1, found
    host = (int(device * 0.5) // 1 + 1) * 1
    assert f"{host:,}" in f["arithmetic"] and f"{device:,}" in f["arithmetic"] and "⌊0.5 ×" in f["arithmetic"], f
    assert f["changes"] == [{"flag": "--hicache-ratio", "from": 0.5, "to": 2.0}]
    # the change applied: no such finding
    _rc, found2, _ = _check(tmp_path, _profile(tmp_path, "0.5.9", "hicache-ratio: 2.0"))
    assert "hicache_smaller_than_device" not in found2 and "memory_plan" in found2


def test_the_gate_refuses_a_size_below_the_device_pool_and_names_the_least_that_fits(tmp_path: Path) -> None:
    _rc, found, _js = _check(tmp_path, _profile(tmp_path, "0.5.9", "hicache-size: 1"))
    f = found.get("hicache_smaller_than_device")
    assert f is not None and f["severity"] == "critical", found
    assert "10⁹" in f["arithmetic"], f["arithmetic"]
    (change,) = f["changes"]
    assert change["flag"] == "--hicache-size" and change["from"] == 1 and change["to"] > 1
    _rc, found2, _ = _check(tmp_path, _profile(tmp_path, "0.5.9", f"hicache-size: {change['to']}"))
    assert "hicache_smaller_than_device" not in found2  # the advised size is large enough
    _rc, found3, _ = _check(tmp_path, _profile(tmp_path, "0.5.9", f"hicache-size: {change['to'] - 1}"))
    assert "hicache_smaller_than_device" in found3  # and the least that is


@pytest.mark.parametrize("hicache", ["hicache-ratio: 0.5"])
def test_on_0_5_23_it_is_a_warning(tmp_path: Path, hicache: str) -> None:
    _rc, found, _js = _check(tmp_path, _profile(tmp_path, "0.5.23", hicache))
    f = found.get("hicache_smaller_than_device")
    assert f is not None and f["severity"] == "warning" and "L2" in f["message"], found
