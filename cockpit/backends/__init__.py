"""Server backends. `get_backend(profile.backend)` is the one way the layers above obtain one.

A new engine adds its package under `cockpit/backends/<name>/` and one entry in `_REGISTRY`
(docs/ARCHITECTURE.md, "Adding a backend"). Only this module and the simulator import a backend
package directly (`lint-imports` enforces it).
"""

from __future__ import annotations

import functools
import importlib

from cockpit.backends.base import Backend

DEFAULT_BACKEND = "sglang"  # a profile without `backend:`

# name → (module, class): imported on first use, so `cockpit --help` loads no backend
_REGISTRY: dict[str, tuple[str, str]] = {
    "sglang": ("cockpit.backends.sglang", "SGLangBackend"),
}


def backend_names() -> tuple[str, ...]:
    """The backends a profile's `backend:` may name."""
    return tuple(_REGISTRY)


@functools.cache
def get_backend(name: str) -> Backend:
    """The backend called `name` (one shared instance: backends hold no state)."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; the supported backends are: {', '.join(_REGISTRY)}") from None
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
