"""The echo engine has only the required capabilities (`flags`, `launch`, `logs`): every command
that needs one it lacks says so in one line — "plan unavailable for this engine (Echo)", exit 2, no
traceback — and every command that can do without it does, saying what it left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.backends.base import OPTIONAL, unavailable
from cockpit.errors import BadInput
from cockpit.serving.servermetrics import server_summary
from tests.third_engine.conftest import cockpit

CRASH_LOG = str(Path(__file__).with_name("echo_crash.log"))


def test_the_refusal_names_what_and_the_engine() -> None:
    echo = get_backend("echo")
    said = {g: unavailable(echo, g) for g in OPTIONAL}
    assert all(isinstance(e, BadInput) and e.exit_code == 2 for e in said.values())
    assert str(said["planner"]) == "plan unavailable for this engine (Echo)"
    assert str(said["tuner"]) == "tune unavailable for this engine (Echo)"
    assert str(said["doctor"]) == "advice unavailable for this engine (Echo)"
    assert str(said["metrics"]) == "serving metrics unavailable for this engine (Echo)"


@pytest.mark.parametrize(("args", "said"), [
    (("plan", "echo1"), "plan unavailable for this engine (Echo)"),
    (("plan", "--model-config", ".", "--backend", "echo", "--gpu-mem-gb", "80", "--tp", "1"),
     "plan unavailable for this engine (Echo)"),
    (("tune", "echo1"), "tune unavailable for this engine (Echo)"),
])
def test_a_command_that_needs_a_missing_capability_is_refused_with_exit_2(
        echo_env: tuple[dict[str, str], Path, int], args: tuple[str, ...], said: str) -> None:
    env, root, _ = echo_env
    out = cockpit(env, root, *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"cockpit: error: {said}" in out.stderr and "Traceback" not in out.stderr
    assert not (root / "profiles" / "echo1.tuned.yaml").exists()  # refused before anything was done


def test_diagnose_reads_the_log_and_says_there_is_no_advice(echo_env: tuple[dict[str, str], Path, int]) -> None:
    env, root, _ = echo_env
    out = cockpit(env, root, "diagnose", CRASH_LOG, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["backend"] == "echo" and report["phase"] == "crashed"
    assert [(f["id"], f["severity"]) for f in report["findings"]] == [("advice_unavailable", "info")]
    assert "advice unavailable for this engine (Echo)" in report["findings"][0]["message"]


def test_check_checks_what_it_can_and_names_what_it_cannot(echo_env: tuple[dict[str, str], Path, int]) -> None:
    env, root, _ = echo_env
    out = cockpit(env, root, "check", "echo1", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    found = {f["id"]: f for f in json.loads(out.stdout)["findings"]}
    assert "preflight rules unavailable for this engine (Echo)" in found["preflight_rules_unavailable"]["message"]
    assert found["memory_plan"]["message"] == "memory plan not made: plan unavailable for this engine (Echo)"
    assert {f["severity"] for f in found.values()} == {"info"}


def test_bench_without_the_engines_metrics_says_why_the_server_side_is_missing() -> None:
    said = server_summary(None, None, {}, [], 10.0, None, "serving metrics unavailable for this engine (Echo)")
    assert said == {"available": False, "reason": "serving metrics unavailable for this engine (Echo)"}
