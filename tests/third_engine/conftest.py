"""The third engine joins the registry with ONE line, in-process here and, for the `cockpit`
subprocesses the tests start, through COCKPIT_EXTRA_BACKENDS (the same line in the environment)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cockpit.backends import register_backend

ENTRY = "echo=tests.third_engine.backend:EchoBackend"  # the registry line, as the environment carries it


@pytest.fixture(autouse=True)
def echo_registered() -> Iterator[None]:
    register_backend("echo", "tests.third_engine.backend", "EchoBackend")
    yield
