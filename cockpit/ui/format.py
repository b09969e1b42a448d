"""Small text helpers shared by widgets: numbers, durations, phase words. Unknown is "?", never 0."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime

from cockpit.face import (
    ENGINE_WATCHDOG,
    HOST_CACHE_SHORT,
    HOST_CACHE_SMALL,
    KILLED_BY_SIGNAL,
    SIGKILL_SENDERS,
    FlagChange,
    RunSnapshot,
    mask_value,
    normalise_flag_name,
    signal_words,
    value_text,
)
from cockpit.face import flag_labels as registered

UNKNOWN = "?"

PHASE_WORDS: dict[str, str] = {
    "loading": "LOADING",
    "kv_pool": "KV POOL",
    "capturing": "CAPTURING",
    "warmup": "WARMUP",
    "ready": "READY",
    "hung": "HUNG",
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



@functools.cache
def flag_labels() -> dict[str, str]:
    """Short names operators use for the flags they touch most ("mfs"): each backend declares its
    own (`EngineWords.flag_labels`); one table over every registered engine."""

    return registered()


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


def sample_age(seconds: float | None) -> str:
    """A telemetry sample's age: `<2s` while the 1 Hz stream is current, then whole seconds, then
    as short_duration. A sample is between 0 and about 1.5 s old when the next snapshot shows it:
    tenths, or even `0s`/`1s`, changed every rank's row on every snapshot (and repainted it) while
    telling the operator nothing about whether the stream is current."""
    if seconds is None or seconds >= 60:
        return short_duration(seconds)
    if seconds < 2:
        return "<2s"
    return f"{int(seconds)}s"


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
    name = normalise_flag_name(flag)
    return flag_labels().get(name, name)


def flag_diff_words(change: FlagChange, *, short: bool = False, full_name: bool = False) -> str:
    """`mfs 0.88 (profile 0.93)`: the run's value first, the profile's in brackets (`short`: the
    run's value alone, `mfs 0.88`, the header's form when the line is too narrow for both)."""

    to, was = mask_value(change.flag, change.to_value), mask_value(change.flag, change.from_value)
    name = "--" + change.flag.lstrip("-") if full_name else flag_short(change.flag)
    if short:
        return f"{name} {value_text(to)}"
    return f"{name} {value_text(to)} (profile {value_text(was)})"


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


def iso_age(iso: str | None, now: float) -> float | None:
    """Seconds from an ISO-8601 UTC time (`2026-11-29T12:00:00Z`) to `now` (epoch), or None."""
    if not iso:
        return None
    try:
        t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return max(0.0, now - t.timestamp())


def log_age(ts: str | None, started_at: str | None, first_ts: str | None, now: float) -> float | None:
    """Seconds from a log time to `now` (epoch), by the wall clock: the log's times are the server's
    local clock, without a zone. The zone is learnt from a time the server logged within minutes of
    the launch (`first_ts`) against the launch's UTC time (`started_at`), rounded to the quarter
    hour zones come in. None when either is missing."""
    t, first, launch_age = log_time(ts), log_time(first_ts), iso_age(started_at, now)
    if t is None or first is None or launch_age is None or not started_at:
        return None
    launch = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    if launch.tzinfo is None:
        launch = launch.replace(tzinfo=UTC)
    quarter = 900.0
    zone = round((first.replace(tzinfo=UTC) - launch).total_seconds() / quarter) * quarter
    return max(0.0, now - (t.replace(tzinfo=UTC).timestamp() - zone))


def seconds_between(a: str | None, b: str | None) -> float | None:
    ta, tb = log_time(a), log_time(b)
    if ta is None or tb is None:
        return None
    return (tb - ta).total_seconds()


# crashes the server's own log explains: after them it kills its process group itself
LOGGED_CRASH_KINDS = frozenset({"cuda_oom", "graph_capture_oom", "kv_pool_exhausted", "init_not_enough_memory",
                                HOST_CACHE_SHORT, HOST_CACHE_SMALL, "warmup_failed", "nccl_timeout", "nccl_error",
                                ENGINE_WATCHDOG, "startup_error", "port_in_use"})


# What SIGKILL (exit 137 / -9) means after each kind of ending: (short, long), one sentence for one
# cause, never against the evidence the dialog shows above it. A kind not listed: the server's own
# cleanup when its log told an error (LOGGED_CRASH_KINDS), else a kill from outside. A new ending kind
# (a signal told by the waiter, say) slots in here with its own words.
SIGKILL_WORDS: dict[str, tuple[str, str]] = {
    "host_oom_killed": ("the kernel's OOM killer", "SIGKILL from the kernel's OOM killer (host memory)"),
    # the crash's own line already names who could have sent it: the exit words only say the signal
    KILLED_BY_SIGNAL: ("killed by signal 9 (SIGKILL) from outside", "killed by signal 9 (SIGKILL) from outside"),
}
_SIGKILL_OWN = ("the server's own cleanup", "SIGKILL from the server's own cleanup after the error above (SIGQUIT, "
                "then its process group killed), not the kernel's OOM killer")
_SIGKILL_OUTSIDE = ("killed by signal 9 (SIGKILL) from outside",
                    f"killed by signal 9 (SIGKILL) from outside; who sent it is not known: {SIGKILL_SENDERS}")


def sigkill_words(kind: str | None, *, short: bool = False) -> str:
    """SIGKILL's one sentence for a crash of this kind (see SIGKILL_WORDS)."""
    words = SIGKILL_WORDS.get(kind or "") or (_SIGKILL_OWN if kind in LOGGED_CRASH_KINDS else _SIGKILL_OUTSIDE)
    return words[0] if short else words[1]


def exit_words(code: int | None, kind: str | None = None, *, short: bool = False) -> str:
    """An exit code in words. 137 (SIGKILL) after a logged CUDA OOM is the server's own cleanup
    (it sends itself SIGQUIT and kills its process group), not the kernel's OOM killer. `short`:
    the header's form, the same facts in fewer words (the crash dialog has the long one)."""
    if code is None:
        return "exit code not known"
    if code in (137, -9):
        return f"exit code {code} ({sigkill_words(kind, short=True)})" if short else \
            f"exit code {code}: {sigkill_words(kind)}"
    if code in (143, -15):
        # with a crash kind the run crashed: nobody stopped it through Cockpit
        return f"exit code {code}: SIGTERM " + ("from outside Cockpit" if kind else "(asked to stop)")

    words = signal_words(code)
    if words is not None:
        return f"exit code {code}: {words}"
    if code < 0 or code > 128:
        sig = -code if code < 0 else code - 128
        return f"exit code {code}: killed by signal {sig}"
    return f"exit code {code}"


_EXITED = re.compile(r"exited with code (-?\d+)")


def exit_code_in(text: str) -> int | None:
    """The exit code in the supervisor's "… exited with code N" words, or None."""
    m = _EXITED.search(text or "")
    return int(m.group(1)) if m else None


def progress_words(progress: str, crash_kind: str | None, *, short: bool = False) -> str:
    """The supervisor's progress line with a bare exit code said in words (137 after a CUDA OOM
    is the server's own cleanup, not the kernel's OOM killer)."""
    code = exit_code_in(progress)
    if code is None:
        return progress
    return _EXITED.sub("exited: " + exit_words(code, crash_kind, short=short), progress, count=1)


def signed_int(n: int) -> str:
    return f"+{n:,}" if n > 0 else f"−{abs(n):,}" if n < 0 else "±0"


def phase_age_in_log(snap: RunSnapshot, now: float) -> float:
    """How long the log says the run has been in its phase (attaching to a run READY for
    hours shows hours, not the seconds since we attached). The log's newest time says it when
    the server keeps logging; an idle server logs nothing (vLLM once READY), so the phase's
    logged time is also read on the wall clock (format.log_age: the server's zone learnt from
    its first start-up milestone against the launch time)."""
    if snap.lifecycle != "running":
        return 0.0
    state = snap.state
    age = seconds_between(state.phase_since, state.last_ts)
    firsts = [t for r in state.ranks.values() for t in (r.timeline.get("init"),) if t]
    if snap.run is not None and firsts:
        wall = log_age(state.phase_since, snap.run.started_at, min(firsts), now)
        if wall is not None and (age is None or wall > age):
            age = wall
        up = iso_age(snap.run.started_at, now)
        if age is not None and up is not None:
            age = min(age, up)  # never in a phase longer than the run has been up
    return age if age is not None and age > 0 else 0.0
