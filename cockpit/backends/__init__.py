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
    "vllm": ("cockpit.backends.vllm", "VLLMBackend"),
}
# name → the engine as its own docs spell it, for messages (no backend import needed to print it)
_DISPLAY: dict[str, str] = {"sglang": "SGLang", "vllm": "vLLM"}


def backend_names() -> tuple[str, ...]:
    """The backends a profile's `backend:` may name."""
    return tuple(_REGISTRY)


def engine_name(name: str) -> str:
    """The engine called `name` as its own docs spell it ("vllm" → "vLLM"); unknown names as given."""
    return _DISPLAY.get(name, name)


def engine_names() -> str:
    """Every engine a backend reads, for a message about all of them: "SGLang or vLLM"."""
    names = [engine_name(n) for n in _REGISTRY]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@functools.cache
def get_backend(name: str) -> Backend:
    """The backend called `name` (one shared instance: backends hold no state)."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; the supported backends are: {', '.join(_REGISTRY)}") from None
    backend: Backend = getattr(importlib.import_module(module), cls)()
    _register_secret_flags(module)
    return backend


def _register_secret_flags(module: str) -> None:
    """The engine's secret flags (`--api-key`), so that masking also covers their abbreviations
    (argparse reads `--api-k` as `--api-key`): every version's table."""
    from cockpit.core.secrets import register_secret_flags

    flags = importlib.import_module(module + ".flags")
    for version in (None, *getattr(flags, "VERSIONS", ())):
        register_secret_flags(o for spec in flags.flag_table(version).values() for o in spec.option_strings)


def load_all_secret_flags() -> None:
    """Every backend's secret flags registered (a reader of the journal masks runs of any engine)."""
    for name in _REGISTRY:
        get_backend(name)


def detect_backend(sample: bytes, default: str = DEFAULT_BACKEND) -> str:
    """Which backend wrote a log, from its opening bytes: the one whose `log_score` (0..1, the
    share of lines that read as its records) is highest; `default` when none scores."""
    best, best_score = default, 0.0
    for name in _REGISTRY:
        score = get_backend(name).log_score(sample)
        if score > best_score:
            best, best_score = name, score
    return best
