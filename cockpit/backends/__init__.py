"""Server backends. `get_backend(profile.backend)` is the one way the layers above obtain one.

A new engine adds its package under `cockpit/backends/<name>/` and one entry in `_REGISTRY`
(docs/ARCHITECTURE.md, "Adding an engine"). Only this module and the simulator import a backend
package directly (`lint-imports` enforces it).

An engine that lives outside this package (a site's own, the tests' third engine) joins with
`register_backend(name, module, cls)`, or, for a `cockpit` process started elsewhere, with the
environment variable COCKPIT_EXTRA_BACKENDS="name=package.module:Class[,…]" read on first use.
"""

from __future__ import annotations

import functools
import os

from cockpit.core.engines import DEFAULT_ENGINE

TYPE_CHECKING = False  # not `typing`'s: `cockpit --help` reads the registry's names, nothing more
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from cockpit.backends.base import Backend, EngineWords

DEFAULT_BACKEND = DEFAULT_ENGINE  # a profile without `backend:` (the core names it: cockpit.core.engines)

# name → (module, class): imported on first use, so `cockpit --help` loads no backend
_REGISTRY: dict[str, tuple[str, str]] = {
    "sglang": ("cockpit.backends.sglang", "SGLangBackend"),
    "vllm": ("cockpit.backends.vllm", "VLLMBackend"),
}
# name → the engine as its own docs spell it, for messages (no backend import needed to print it)
_DISPLAY: dict[str, str] = {"sglang": "SGLang", "vllm": "vLLM"}
EXTRA_ENV = "COCKPIT_EXTRA_BACKENDS"
_EXTRA: set[str] = set()  # the names COCKPIT_EXTRA_BACKENDS added (their import errors are bad input)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def register_backend(name: str, module: str, cls: str, display: str | None = None) -> None:
    """One more engine: `module`'s class `cls` implements `Backend` (imported on first use).
    A name already registered is replaced (a test may register its engine twice)."""
    if not name or not set(name) <= _NAME_CHARS:
        raise ValueError(f"a backend name is lower-case letters, digits, '-' or '_', not {name!r}")
    _REGISTRY[name] = (module, cls)
    _DISPLAY[name] = display or name
    get_backend.cache_clear()
    _register_names()


def unregister_backend(name: str) -> None:
    """Forget an engine `register_backend` added (a test's, when it is done); unknown names are ignored."""
    _REGISTRY.pop(name, None)
    _DISPLAY.pop(name, None)
    get_backend.cache_clear()
    _register_names()


def _register_extra(spec: str) -> None:
    """COCKPIT_EXTRA_BACKENDS' entries: `name=package.module:Class`, comma-separated. A malformed
    entry is bad input (exit 2), said when the registry is first imported."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, target = item.partition("=")
        module, colon, cls = target.partition(":")
        try:
            if not (sep and colon and module and cls):
                raise ValueError(f"{item!r} is not name=package.module:Class")
            register_backend(name.strip(), module.strip(), cls.strip())
        except ValueError as exc:
            from cockpit.errors import BadInput

            raise BadInput(f"{EXTRA_ENV}: {exc}") from None
        _EXTRA.add(name.strip())


def _register_names() -> None:
    """The core checks a profile's `backend:` against these names (it cannot import this package)."""
    from cockpit.core.engines import set_engine_names

    set_engine_names(tuple(_REGISTRY))


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
    import importlib  # here: `cockpit --help` reads the names only

    try:
        backend: Backend = getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as exc:
        if name not in _EXTRA:
            raise
        from cockpit.errors import BadInput

        raise BadInput(f"{EXTRA_ENV}: engine {name!r}: {module}:{cls} does not load ({exc})") from None
    _register_secret_flags(module, getattr(backend, "secret_flags", None))
    _register_predicted_words(backend)
    return backend


def _register_predicted_words(backend: Backend) -> None:
    """The engine's own predicted-effect keys (`max_model_len`, `hicache_size`) in words, so every
    view that prints a finding of this engine says them with their unit."""
    from cockpit.core.findings import register_predicted_words

    register_predicted_words(backend.words().predicted_words)


def engine_words(name: str) -> EngineWords:
    """What the UI and the CLI say about the engine called `name` (its flag labels, memory flag,
    default port, demo profile, rank axes)."""
    return get_backend(name).words()


def words_of(name: str | None) -> EngineWords:
    """`engine_words(name)`, or an engine that declares nothing for a name no backend has (a
    journal's run of an engine this installation does not know): no labels, no flags."""
    if name is None or name not in _REGISTRY:
        from cockpit.backends.base import EngineWords

        return EngineWords(display=name or "unknown engine")
    return engine_words(name)


def host_cache_gb_per_rank(name: str | None, flags: Mapping[str, Any]) -> float | None:
    """The host cache's size per rank (GB) the flags set (`EngineWords.host_cache_flags`: on, and
    a size), or None: off, no size given, or an engine without one."""
    words = words_of(name)
    if name is None or words.host_cache_flags is None:
        return None
    switch, size = words.host_cache_flags
    backend = get_backend(name)
    if not backend.flags.value(flags, switch):
        return None
    v = backend.flags.value(flags, size)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def flag_labels() -> dict[str, str]:
    """Every registered engine's short flag labels ("mem-fraction-static" -> "mfs"), one table."""
    out: dict[str, str] = {}
    for name in _REGISTRY:
        out.update(engine_words(name).flag_labels)
    return out


def _register_secret_flags(module: str, declared: Iterable[str] | None = None) -> None:
    """The engine's secret flags (`--api-key`), so that masking also covers their abbreviations
    (argparse reads `--api-k` as `--api-key`): as the backend declares them, else every version's table."""
    from cockpit.core.secrets import register_secret_flags

    if declared is not None:
        register_secret_flags(declared)
        return

    import importlib

    try:
        flags = importlib.import_module(module + ".flags")
    except ModuleNotFoundError as e:
        if e.name != module + ".flags":
            raise
        return  # an engine without a `flags` module has no secret flags
    for version in (None, *getattr(flags, "VERSIONS", ())):
        register_secret_flags(o for spec in flags.flag_table(version).values() for o in spec.option_strings)


def load_all_secret_flags() -> None:
    """Every backend's secret flags registered (a reader of the journal masks runs of any engine)."""
    for name in _REGISTRY:
        get_backend(name)


def detect_backend(sample: bytes, default: str = DEFAULT_BACKEND) -> str:
    """Which backend wrote a log, from its opening bytes: the one whose `logs.score` (0..1, the
    share of lines that read as its records) is highest, its start-up's own marks (`startup_marked`)
    counting above any share; `default` when none scores."""
    best, best_score = default, 0.0
    for name in _REGISTRY:
        logs = get_backend(name).logs
        score = logs.score(sample)
        marked = getattr(logs, "startup_marked", None)  # a backend of another package may have none
        if score > 0 and marked is not None and marked(sample):
            score += 1.0  # its own start-up is in the opening: above any mere share of lines
        if score > best_score:
            best, best_score = name, score
    return best


_register_extra(os.environ.get(EXTRA_ENV, ""))
_register_names()
