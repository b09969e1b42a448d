"""Issue 40, finding 11: out-of-range numbers pass the gate.

`tp: -1`, `port: 99999`, `hicache-size: -5`, `hicache-ratio: .nan` were launched (the engine dies
of them minutes later, or, for the port, at bind). Each numeric flag of the engines' tables has
bounds beside it (`BOUNDS` in cockpit/backends/<engine>/flags.py, from the engine's own constraints
where it states them: vLLM's pydantic `Field(ge=…, gt=…, le=…)`, SGLang's `check_server_args`),
and no number is NaN or infinite. A value outside them is bad input: exit 2 from `check`, `plan`
and `up`, naming the flag, the value and the allowed range, before anything is measured or
launched. A port the host cannot listen on for another reason than a listener is not said to be
"in use".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SGL = "name: b\nversion: 0.5.9\nhosts: [{ssh: local}]\nserver:\n  model-path: /m\n  enable-hierarchical-cache: true\n"
VLLM = "name: v\nbackend: vllm\nversion: 0.33.0\nhosts: [{ssh: local}]\nserver:\n  model: org/m\n"


def cockpit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xd"), "XDG_CONFIG_HOME": str(tmp_path / "xc"),
           "XDG_CACHE_HOME": str(tmp_path / "xk"), "COCKPIT_RUNS_ROOT": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=90,
                          env=env, cwd=tmp_path, check=False)


# (profile head, the flag's YAML line, the flag as named, the value as named, the range's words)
CASES = {
    "tp -1": (SGL, "tp: -1", "--tp-size", "-1", "at least 1"),
    "port 99999": (SGL, "port: 99999", "--port", "99999", "1 to 65535"),
    "hicache-size -5": (SGL, "hicache-size: -5", "--hicache-size", "-5", "at least 0"),
    "hicache-ratio nan": (SGL, "hicache-ratio: .nan", "--hicache-ratio", "nan", "above 0"),
    "mem-fraction-static 1.5": (SGL, "mem-fraction-static: 1.5", "--mem-fraction-static", "1.5", "above 0 and at most 1"),
    "vllm tp 0": (VLLM, "tensor-parallel-size: 0", "--tensor-parallel-size", "0", "at least 1"),
    "vllm util inf": (VLLM, "gpu-memory-utilization: .inf", "--gpu-memory-utilization", "inf", "above 0 and at most 1"),
    "vllm port 0": (VLLM, "port: 0", "--port", "0", "1 to 65535"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_out_of_range_is_bad_input_naming_flag_value_and_range(tmp_path: Path, case: str) -> None:
    head, line, flag, value, words = CASES[case]
    p = tmp_path / "p.yaml"
    p.write_text(head + f"  {line}\n")
    r = cockpit(tmp_path, "check", str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and f"{flag} {value}" in r.stderr and words in r.stderr, r.stderr
    assert str(p) in r.stderr  # where it came from


def test_set_and_up_refuse_out_of_range_before_anything_runs(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(SGL)
    plan = cockpit(tmp_path, "plan", str(p), "--set", "hicache-ratio=nan")
    assert plan.returncode == 2 and "--set hicache-ratio" in plan.stderr and "--hicache-ratio nan" in plan.stderr, plan.stderr
    up = cockpit(tmp_path, "up", str(p), "--set", "port=99999", "--wait", "started")
    assert up.returncode == 2 and "--port 99999" in up.stderr and "1 to 65535" in up.stderr, up.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("pid"))  # nothing launched


def test_values_the_engines_take_still_pass(tmp_path: Path) -> None:
    """The edges and the engines' special values: SGLang's `chunked-prefill-size: -1` (no
    chunking), port 65535, mem-fraction-static 1 is the rule's (a critical finding, exit 1), not
    bad input; vLLM's `max-model-len: -1` (the model's own)."""
    p = tmp_path / "p.yaml"
    p.write_text(SGL + "  chunked-prefill-size: -1\n  port: 65535\n  hicache-ratio: 2.5\n  hicache-size: 0\n  tp: 1\n")
    r = cockpit(tmp_path, "check", str(p))
    assert r.returncode in (0, 1), r.stdout + r.stderr
    v = tmp_path / "v.yaml"
    v.write_text(VLLM + "  max-model-len: -1\n  gpu-memory-utilization: 1.0\n  port: 1\n")
    r = cockpit(tmp_path, "check", str(v))
    assert r.returncode in (0, 1), r.stdout + r.stderr


def test_a_port_that_cannot_be_bound_is_not_said_to_be_in_use(tmp_path: Path) -> None:
    """An address this host does not have (TEST-NET-3): the server would die at bind with
    "Cannot assign requested address"; the finding says that, not "in use"."""
    p = tmp_path / "p.yaml"
    p.write_text(SGL.replace("/m", str(tmp_path)) + "  host: 203.0.113.7\n  port: 30000\n")
    r = cockpit(tmp_path, "check", str(p), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    import json

    ids = {f["id"]: f for f in json.loads(r.stdout)["findings"]}
    assert "port_in_use" not in ids and "port_unusable" in ids, ids
    assert "203.0.113.7:30000" in ids["port_unusable"]["message"] and "assign" in ids["port_unusable"]["message"]


# numeric flags left without bounds, and why (any other numeric flag must have one)
UNBOUNDED = {
    "chunked_prefill_size": "SGLang: any value ≤ 0 turns chunking off (scheduler.py)",
    "random_seed": "any integer seeds",
    "seed": "any integer seeds",
    "log_requests_level": "its choices bound it (0-3)",
}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_numeric_flag_has_bounds(engine: str) -> None:
    import importlib

    m = importlib.import_module(f"cockpit.backends.{engine}.flags")
    specs = {d: spec for v in m.VERSIONS for d, spec in m.flag_table(v).items()}
    assert set(m.BOUNDS) <= set(specs), set(m.BOUNDS) - set(specs)  # no bound for a flag that does not exist
    numeric = {d for d, spec in specs.items() if spec.type not in ("bool", "str", "json", "str_list")}
    assert numeric - set(m.BOUNDS) - set(UNBOUNDED) == set()
