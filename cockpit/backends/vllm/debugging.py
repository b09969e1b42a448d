"""vLLM's debug relaunch: the common NCCL/PyTorch settings (backends/debugenv.py) and vLLM's own
debug logging, `VLLM_LOGGING_LEVEL=DEBUG` (vllm/envs.py; vLLM has no watchdog to tune)."""

from __future__ import annotations

from typing import Any

from cockpit.backends.debugenv import COMMON_DEBUG_ENV


def debug_settings() -> tuple[dict[str, str], dict[str, Any]]:
    """(environment, server flags) a debug run adds."""
    return {**COMMON_DEBUG_ENV, "VLLM_LOGGING_LEVEL": "DEBUG"}, {}
