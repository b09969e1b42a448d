"""Small text helpers shared by widgets: numbers, durations, phase words. Unknown is "?", never 0."""

from __future__ import annotations

from datetime import datetime

from cockpit.core.findings import FlagChange, value_text

UNKNOWN = "?"

PHASE_WORDS: dict[str, str] = {
    "loading": "LOADING",
    "kv_pool": "KV POOL",
    "capturing": "CAPTURING",
    "warmup": "WARMUP",
    "ready": "READY",
    "crashed": "CRASHED",
    "stopped": "STOPPED",
    "unknown": "STARTING",
}

# Supervisor lifecycles that override the server's phase on screen.
LIFECYCLE_WORDS: dict[str, str] = {
    "stopping": "STOPPING",
    "waiting_gpu_release": "STOPPING",
    "preflight": "PREFLIGHT",
    "launching": "LAUNCHING",
}

# Short names operators use for the flags they touch most.
FLAG_SHORT: dict[str, str] = {
    "mem-fraction-static": "mfs",
    "hicache-size": "hicache",
    "cuda-graph-max-bs": "graph bs",
    "chunked-prefill-size": "chunked prefill",
    "max-running-requests": "max running",
}


def gb(value: float | None, digits: int = 2) -> str:
    return UNKNOWN if value is None else f"{value:.{digits}f}"


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "--:--:--"
    s = max(0, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def short_duration(seconds: float | None) -> str:
    """`0.4s`, `12s`, `3m05s`, `2h10m`."""
    if seconds is None:
        return UNKNOWN
    if seconds < 0:
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"
    return f"{int(seconds) // 3600}h{int(seconds) % 3600 // 60:02d}m"


def phase_word(phase: str, lifecycle: str = "running") -> str:
    """The phase as the header shows it; a stop or restart in progress wins over the log's phase."""
    if lifecycle in ("stopping", "waiting_gpu_release"):
        return "STOPPING"
    if lifecycle in ("preflight", "launching") and phase in ("unknown", "stopped", "crashed"):
        return LIFECYCLE_WORDS[lifecycle]
    if lifecycle == "stopped" and phase != "crashed":
        return "STOPPED"
    return PHASE_WORDS.get(phase, phase.upper())


def flag_short(flag: str) -> str:
    name = flag.lstrip("-").replace("_", "-")
    return FLAG_SHORT.get(name, name)


def flag_diff_words(change: FlagChange) -> str:
    """`mfs 0.88 (profile 0.93)`: the run's value first, the profile's in brackets."""
    return f"{flag_short(change.flag)} {value_text(change.to_value)} (profile {value_text(change.from_value)})"


_TS_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f")


def log_time(ts: str | None) -> datetime | None:
    """A log timestamp as SGLang prints it (`2026-11-29 11:55:58`), or None."""
    if not ts:
        return None
    text = ts.strip().strip("[]")
    for fmt in _TS_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def seconds_between(a: str | None, b: str | None) -> float | None:
    ta, tb = log_time(a), log_time(b)
    if ta is None or tb is None:
        return None
    return (tb - ta).total_seconds()


def signed_int(n: int) -> str:
    return f"+{n:,}" if n > 0 else f"−{abs(n):,}" if n < 0 else "±0"


