"""Issue 40, finding 11 (the wait): `cockpit up --wait started` said "started", exit 0, for a server
that died within its first second (here: at bind, as a server on a bad port does).

`started` is "alive after its first second" (docs/OPERATIONS.md). The log follower that reports an
exit is a program started over the host's transport, and it was often not running yet when that
second ended: a death at 0.3 s went unseen. After the second, the host is now asked whether the
server still runs, and a server that has died is a failed launch (exit 1, its last lines shown).
A real subprocess, the real host program; a server that lives on is still "started".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PY = sys.executable


def _env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xd"), "XDG_CONFIG_HOME": str(tmp_path / "xc"),
            "XDG_CACHE_HOME": str(tmp_path / "xk"), "COCKPIT_RUNS_ROOT": str(tmp_path / "runs"),
            "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _up(tmp_path: Path, name: str, program: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / f"{name}.yaml").write_text(
        f"name: {name}\nhosts: [{{ssh: local}}]\nprogram: {json.dumps([PY, '-c', program])}\n"
        f"workdir: {tmp_path / 'work'}\nlog: logs/{name}.log\nserver: {{}}\n")
    return subprocess.run([PY, "-m", "cockpit", "up", str(tmp_path / f"{name}.yaml"), "--wait", "started"],
                          capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=tmp_path, check=False)


def _down(tmp_path: Path, name: str) -> None:
    subprocess.run([PY, "-m", "cockpit", "down", str(tmp_path / f"{name}.yaml"), "--timeout", "5"],
                   capture_output=True, text=True, timeout=60, env=_env(tmp_path), cwd=tmp_path, check=False)


@pytest.mark.parametrize("after_s", [0.3, 0.9])
def test_a_server_that_dies_within_its_first_second_is_not_started(tmp_path: Path, after_s: float) -> None:
    program = (f"import sys, time; print('binding 0.0.0.0:30000', flush=True); time.sleep({after_s}); "
               "print('OSError: [Errno 98] error while attempting to bind on address: address already in use', "
               "flush=True); sys.exit(1)")
    try:
        r = _up(tmp_path, "dies", program)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "started" not in r.stdout.splitlines()[-1:], r.stdout
        assert "address already in use" in r.stderr, r.stderr  # the failed launch's last lines
    finally:
        _down(tmp_path, "dies")


def test_a_server_that_lives_is_started(tmp_path: Path) -> None:
    try:
        r = _up(tmp_path, "lives", "import time; print('up', flush=True); time.sleep(60)")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().endswith("lives: started"), r.stdout
    finally:
        _down(tmp_path, "lives")
