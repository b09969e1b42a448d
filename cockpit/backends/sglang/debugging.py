"""SGLang's debug relaunch: the common NCCL/PyTorch settings (backends/debugenv.py), SGLang's
debug logging (`--log-level debug`) and its scheduler watchdog brought down from 300 s to 120 s:
on a hang the watchdog dumps every thread's stack into the log and ends the server, so a debug run
leaves its evidence in minutes."""

from __future__ import annotations

from typing import Any

from cockpit.backends.debugenv import COMMON_DEBUG_ENV

WATCHDOG_DEBUG_S = 120


def debug_settings() -> tuple[dict[str, str], dict[str, Any]]:
    """(environment, server flags) a debug run adds."""
    return dict(COMMON_DEBUG_ENV), {"log-level": "debug", "watchdog-timeout": WATCHDOG_DEBUG_S}
