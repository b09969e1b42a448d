"""The third engine joins the registry with ONE line (`ENTRY`): in-process through
`register_backend` for the duration of each test, and for the `cockpit` subprocesses the tests start
through COCKPIT_EXTRA_BACKENDS (the same line in their environment)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.backends import register_backend, unregister_backend
from tests.conftest import free_port, isolated_env
from tests.third_engine.backend import SERVER

ENTRY = "echo=tests.third_engine.backend:EchoBackend"  # the registry line, as the environment carries it
PY = sys.executable


@pytest.fixture(autouse=True)
def echo_registered() -> Iterator[None]:
    register_backend("echo", *ENTRY.split("=", 1)[1].split(":"))
    yield
    unregister_backend("echo")  # the registry is the process's: later tests see the shipped engines only


def cockpit(env: dict[str, str], root: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """The real CLI as a subprocess, in the echo engine's environment."""
    return subprocess.run([PY, "-m", "cockpit", *args], env=env, cwd=root, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def echo_env(tmp_path: Path) -> tuple[dict[str, str], Path, int]:
    """(environment, root, port) of an isolated installation with the profile `echo1` of the echo engine."""
    (tmp_path / "gpus").mkdir()
    (tmp_path / "profiles").mkdir()
    port = free_port()
    (tmp_path / "profiles" / "echo1.yaml").write_text(
        "name: echo1\n"
        "backend: echo\n"
        "hosts:\n  - ssh: local\n"
        f"program: {json.dumps([PY, SERVER])}\n"
        f"workdir: {tmp_path / 'work'}\n"
        "log: logs/echo.log\n"
        "server:\n"
        f"  port: {port}\n"
        "  greeting: hi\n"
    )
    env = isolated_env(tmp_path, tmp_path / "gpus")
    env["COCKPIT_EXTRA_BACKENDS"] = ENTRY
    return env, tmp_path, port
