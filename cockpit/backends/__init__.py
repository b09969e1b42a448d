"""Server backends. `get_backend(name)` is the one way the layers above obtain one."""

from __future__ import annotations

from cockpit.backends.base import Backend

BACKENDS: tuple[str, ...] = ("sglang", "vllm")


def get_backend(name: str) -> Backend:
    if name == "sglang":
        from cockpit.backends.sglang import SGLangBackend

        return SGLangBackend()
    if name == "vllm":
        from cockpit.backends.vllm import VLLMBackend

        return VLLMBackend()
    raise ValueError(f"unknown backend {name!r}; the supported backends are: {', '.join(BACKENDS)}")


def detect_backend(sample: bytes, default: str = "sglang") -> str:
    """Which backend's log this is, from its opening bytes: the backend whose `log_score` (0..1,
    the share of lines that look like its records) is highest; `default` when none scores."""
    best, best_score = default, 0.0
    for name in BACKENDS:
        score_of = getattr(get_backend(name), "log_score", None)
        if score_of is None:
            continue
        score = float(score_of(sample))
        if score > best_score:
            best, best_score = name, score
    return best
