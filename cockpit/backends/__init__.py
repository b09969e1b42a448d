"""Server backends. `get_backend("sglang")` is the one way the layers above obtain one."""

from __future__ import annotations

from cockpit.backends.base import Backend


def get_backend(name: str) -> Backend:
    if name == "sglang":
        from cockpit.backends.sglang import SGLangBackend

        return SGLangBackend()
    raise ValueError(f"unknown backend {name!r}; the supported backends are: sglang")
