"""Placeholders for kernels a plain Llama on SGLang's CPU engine never calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn


def _placeholder(name: str, needed_by: str) -> Callable[..., NoReturn]:
    def missing(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not in Cockpit's test stand-in for sgl_kernel: only {needed_by} calls it, "
            "and the real-engine tests serve a plain Llama (tests/real_engine/sgl_kernel_cpu/README.md)")
    missing.__name__ = missing.__qualname__ = name
    return missing


def speculative_only(name: str) -> Callable[..., NoReturn]:
    return _placeholder(name, "speculative decoding")


def linear_attention_only(name: str) -> Callable[..., NoReturn]:
    return _placeholder(name, "linear-attention (Mamba / gated delta net) models")
