"""The third engine joins the registry with ONE line (`ENTRY`): in-process through
`register_backend` for the duration of each test, and for the `cockpit` subprocesses the tests start
through COCKPIT_EXTRA_BACKENDS (the same line in their environment)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cockpit.backends import register_backend, unregister_backend

ENTRY = "echo=tests.third_engine.backend:EchoBackend"  # the registry line, as the environment carries it


@pytest.fixture(autouse=True)
def echo_registered() -> Iterator[None]:
    register_backend("echo", *ENTRY.split("=", 1)[1].split(":"))
    yield
    unregister_backend("echo")  # the registry is the process's: later tests see the shipped engines only
