"""Proof of issue 26's "a third engine is a folder": the echo engine (echo_server.py, its own log
grammar, backend.py) runs the headless lifecycle through the real CLI as subprocesses — `up --wait
ready`, `status --json`, `logs`, a crash told in its own grammar's words, `down` — with nothing of
it in cockpit/ but the registry's hook."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from cockpit.backends import backend_names, get_backend
from cockpit.backends.base import Backend
from tests.third_engine.conftest import cockpit as _cockpit

PY = sys.executable


def test_the_echo_engine_is_a_backend_reached_through_the_registry() -> None:
    assert "echo" in backend_names()
    backend = get_backend("echo")
    assert isinstance(backend, Backend)
    state = backend.logs.read(Path(__file__).with_name("echo_crash.log"))
    assert state.backend == "echo" and state.phase == "crashed"
    assert state.crash is not None and "PANIC signal 15" in state.crash.message


def test_an_unregistered_engine_is_refused_with_exit_2(echo_env: tuple[dict[str, str], Path, int]) -> None:
    env, root, _ = echo_env
    env.pop("COCKPIT_EXTRA_BACKENDS")
    out = _cockpit(env, root, "up", "echo1")
    assert out.returncode == 2, out.stderr
    assert "the supported backends are: sglang, vllm" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("entry", "said"), [
    ("garbage", "'garbage' is not name=package.module:Class"),
    ("Echo Two=tests.third_engine.backend:EchoBackend", "a backend name is lower-case"),
])
def test_a_malformed_registry_line_is_bad_input(echo_env: tuple[dict[str, str], Path, int], entry: str,
                                                said: str) -> None:
    env, root, _ = echo_env
    env["COCKPIT_EXTRA_BACKENDS"] = entry
    out = _cockpit(env, root, "status", "echo1")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"cockpit: error: COCKPIT_EXTRA_BACKENDS: {said}" in out.stderr


def test_a_registered_engine_that_does_not_load_is_bad_input(echo_env: tuple[dict[str, str], Path, int]) -> None:
    env, root, _ = echo_env
    env["COCKPIT_EXTRA_BACKENDS"] = "echo=tests.third_engine.nowhere:EchoBackend"
    out = _cockpit(env, root, "up", "echo1")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "engine 'echo': tests.third_engine.nowhere:EchoBackend does not load" in out.stderr


def test_headless_lifecycle_through_the_cli(echo_env: tuple[dict[str, str], Path, int]) -> None:
    env, root, port = echo_env
    try:
        up = _cockpit(env, root, "up", "echo1", "--wait", "ready", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr

        st = _cockpit(env, root, "status", "echo1", "--json")
        assert st.returncode == 0, st.stdout + st.stderr
        status = json.loads(st.stdout)
        assert status["phase"] == "ready" and status["ready"] is True
        assert status["backend"] == "echo" and status["format"] == "echo-1"
        assert status["server_args"] == {"greeting": "hi", "port": port}
        # no metrics capability: the serving figures say why there are none, never zeros
        assert status["serving"]["note"] == "serving metrics unavailable for this engine (Echo)", status["serving"]

        logs = _cockpit(env, root, "logs", "echo1")
        assert logs.returncode == 0, logs.stderr
        assert f"listening on 127.0.0.1:{port}" in logs.stdout
        pid = int(re.search(r"\|boot pid=(\d+)", logs.stdout)[1])  # type: ignore[index]

        os.kill(pid, signal.SIGTERM)  # from outside: the engine dies in its own words
        deadline = time.monotonic() + 60
        while True:
            status = json.loads(_cockpit(env, root, "status", "echo1", "--json").stdout)
            if status["phase"] == "crashed" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status["phase"] == "crashed", status
        crash = status["crash"]
        assert "PANIC signal 15: terminated from outside" in crash["message"]
        assert crash["exit_code"] == 3
    finally:
        down = _cockpit(env, root, "down", "echo1", "--timeout", "10")
    assert down.returncode == 0, down.stdout + down.stderr
    st = json.loads(_cockpit(env, root, "status", "echo1", "--json").stdout)
    assert st["ready"] is False
