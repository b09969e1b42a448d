"""`cockpit check` end to end: real profile files, real local host facts, what-if options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cockpit.backends.base import HostFacts
from cockpit.commands.check import check_profile
from cockpit.core.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"


def cockpit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


def local_copy(tmp_path: Path, name: str, **server: object) -> Path:
    """A bundled profile, moved onto this machine (hosts: local), with some server flags changed."""
    data = yaml.safe_load((PROFILES / name).read_text())
    data["hosts"] = [{"ssh": "local"}]
    data["server"].update(server)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_story_hicache_300_refused(tmp_path: Path) -> None:
    p = local_copy(tmp_path, "kimi-k2.5-tp8.yaml", **{"hicache-size": 300})
    r = cockpit("check", str(p), "--host-mem-gb", "449", "--gpus", "8")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "8 ranks × 300 GB = 2400 GB + 40 GB reserve" in r.stdout
    assert "> 449 GB" in r.stdout
    assert "--hicache-size 300 → 49" in r.stdout
    js = json.loads(cockpit("check", str(p), "--json", "--host-mem-gb", "449", "--gpus", "8").stdout)
    f = js["findings"][0]
    assert f["id"] == "hicache_host_memory" and f["severity"] == "critical"
    assert 45 <= f["changes"][0]["to"] <= 51
    assert js["hosts"][0]["mem_available_gb"] == 449
    # one JSON shape with diagnose/status: the state keys are there (nothing ran yet)
    assert js["phase"] == "unknown" and js["crash"] is None and js["ranks"] == []
    assert js["format"] == "sglang-0.5.9" and js["server_args"]["hicache_size"] == 300


def test_bundled_hicache300_profile(tmp_path: Path) -> None:
    r = cockpit("check", str(PROFILES / "kimi-k2.5-tp8-hicache300.yaml"), "--host-mem-gb", "449")
    assert r.returncode == 1
    assert "8 ranks × 300 GB = 2400 GB + 40 GB reserve" in r.stdout


def test_story_profile_passes(tmp_path: Path) -> None:
    p = local_copy(tmp_path, "kimi-k2.5-tp8.yaml")
    r = cockpit("check", str(p), "--json", "--host-mem-gb", "449", "--gpus", "8", "--gpu-mem-gb", "95")
    assert r.returncode == 0, r.stdout
    js = json.loads(r.stdout)
    assert js["argv"][:3] == ["/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server"]
    assert "--hicache-size" in js["argv"]
    assert [f["id"] for f in js["findings"] if f["id"] != "memory_plan"] == ["hicache_fits"]
    # /models/Kimi-K2.5 is not on this machine: the plan says so, it does not guess (tests/model/test_plan.py plans it)
    plan = next(f for f in js["findings"] if f["id"] == "memory_plan")
    assert plan["severity"] == "info" and "is not a directory" in plan["message"]


def test_local_facts_are_measured(tmp_path: Path) -> None:
    p = local_copy(tmp_path, "llama-3.1-70b-h100-tp8.yaml")
    js = json.loads(cockpit("check", str(p), "--json").stdout)
    host = js["hosts"][0]
    assert host["host"] == "local" and host["mem_available_gb"] > 0


def test_gpu_what_ifs(tmp_path: Path) -> None:
    p = local_copy(tmp_path, "llama-3.1-70b-h100-tp8.yaml")
    r = cockpit("check", str(p), "--json", "--gpus", "4", "--gpu-mem-gb", str(81559 / 1024))
    js = json.loads(r.stdout)
    assert r.returncode == 1
    assert {f["id"] for f in js["findings"]} - {"memory_plan"} == {"gpu_count", "default_mem_fraction"}
    default = next(f for f in js["findings"] if f["id"] == "default_mem_fraction")
    assert default["predicted"]["mem_fraction_static"] == 0.812  # the profile pins 0.5.23


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: x\nserver: {tp: 8}\ncolour: red\n", "colour: unknown key"),
        ("name: x\nserver: {tp: 8}\npolicy: {target-headroom-gb: lots}\n", "policy.target-headroom-gb"),
        ("name: x\nserver: {tp: eight}\n", "server.tp: argument --tp-size: invalid int value: 'eight'"),
        ("name: x\nserver: {no-such-flag: 1}\n", "server.no-such-flag: unrecognized arguments: --no-such-flag"),
        ("name: x\nserver: {served-model-name: --evil}\n", "server"),
        ("name: x\nversion: 0.5.23\nserver: {cuda-graph-max-bs: 8}\n", "server.cuda-graph-max-bs: ambiguous option"),
        ("name: x\nserver: {tp: 8\n", "not valid YAML"),
    ],
)
def test_bad_profiles_exit_2_with_one_line(tmp_path: Path, text: str, needle: str) -> None:
    p = _write(tmp_path, text)
    r = cockpit("check", str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert str(p) in lines[0] and needle in lines[0]


def test_missing_profile_and_bad_what_if(tmp_path: Path) -> None:
    r = cockpit("check", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = cockpit("check", str(PROFILES / "kimi-k2.5-tp8.yaml"), "--host-mem-gb", "-5")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_check_profile_hook_takes_remote_facts() -> None:
    prof = load_profile(PROFILES / "kimi-k2.5-tp8-hicache300.yaml")
    measured = {"gpu-box-1": HostFacts(host="ignored", mem_available_gb=449.0, gpu_count=8, source="agent")}
    findings, facts = check_profile(prof, measured)
    assert facts[0].host == "gpu-box-1" and facts[0].source == "agent"
    assert findings[0].id == "hicache_host_memory"
    findings, facts = check_profile(prof)  # not measured: said so, nothing invented
    assert [f.id for f in findings] == ["host_facts_unknown"] and facts[0].mem_available_gb is None
