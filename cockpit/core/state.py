"""RunState: what is known about one run, built by applying parsed events in order.

This module is the hub every layer reads: the backend parser produces events, `RunState.apply`
folds them in (deterministic, no I/O, no asyncio), diagnosis reads the state, the supervisor
publishes copies of it to the UI and the CLI. Field names are the operator's words and match the
JSON contract in DESIGN.md (`to_json`).
"""

from __future__ import annotations

import copy
import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from cockpit.core.engines import DEFAULT_ENGINE
from cockpit.core.ranks import rank_sort_key
from cockpit.core.secrets import mask_mapping

# Phase words, identical in JSON, the journal and (upper-cased) on screen.
# `hung`: ready, but work is outstanding and nothing has moved for the window (core/hang.py)
Phase = Literal["loading", "kv_pool", "capturing", "warmup", "ready", "hung", "crashed", "stopped", "unknown"]
PHASES: tuple[str, ...] = get_args(Phase)

# the two kinds whose names (fixed by DESIGN.md's JSON) are one engine's words: named once here
HOST_CACHE_SHORT: Final = "hicache_host_memory"  # the host cache could not get its host memory
HOST_CACHE_SMALL: Final = "host_cache_smaller_than_device"  # the engine refused a host cache no larger than its device pool
ENGINE_WATCHDOG: Final = "watchdog_timeout"  # the engine's own watchdog fired (a forward pass hung)
# a process of the server was SIGKILLed and nothing shows memory pressure: the sender is not known
# (an operator, a job scheduler at its time limit, a supervisor, or the OOM killer, unproven)
KILLED_BY_SIGNAL: Final = "killed_by_signal"
CRASH_KINDS: tuple[str, ...] = (
    "cuda_oom",
    "graph_capture_oom",
    "kv_pool_exhausted",
    "init_not_enough_memory",
    HOST_CACHE_SHORT,
    HOST_CACHE_SMALL,
    "host_oom_killed",  # SIGKILL with evidence of the OOM killer (Crash.oom_evidence says which)
    KILLED_BY_SIGNAL,
    "nccl_timeout",  # a collective timed out
    "nccl_error",  # NCCL failed otherwise (e.g. "unhandled system error" at init)
    ENGINE_WATCHDOG,
    "warmup_failed",
    "port_in_use",
    "startup_error",  # a Python import/usage/config error before serving
    "unknown",  # a crash is proven, its cause isn't
)
# `unknown`: nothing in the log proves the phase (Crash.phase_reason says what was missing)
CrashPhase = Literal["startup", "graph_capture", "prefill", "decode", "serving", "unknown"]
CRASH_PHASES: tuple[str, ...] = get_args(CrashPhase)

# Bounded series: about an hour of decode lines at SGLang's default log interval.
SERIES_MAX_POINTS = 4096


@dataclass
class RankMemory:
    """One GPU rank's memory story, all in GiB as SGLang prints it ("GB" in its log is GiB)."""

    rank: str  # as printed in the log prefix: "TP3", "DP1 TP3", "PP1 TP0"; "TP0" for a single GPU
    pre_load_avail_gb: float | None = None  # P: `Load weight begin. avail mem=`
    weights_gb: float | None = None  # W: `Load weight end. … mem usage=`
    after_weights_avail_gb: float | None = None  # A: `Load weight end. … avail mem=`
    kv_tokens: int | None = None  # `KV Cache is allocated. #tokens:`
    kv_gb: float | None = None  # K+V size, or the MLA `KV size`
    avail_before_capture_gb: float | None = None  # `Memory pool end. avail mem=` (or first capture begin)
    graph_gb: float | None = None  # sum of every graph capture's `mem usage` (0.5.23 captures two)
    avail_after_capture_gb: float | None = None  # last `avail mem=` before ready: the OOM headroom
    captures_done: int = 0
    capture_begin_avail_gb: float | None = None  # `avail mem=` of the first `Capture … begin` line
    total_gb: float | None = None  # the GPU's total memory, where the log prints it
    # backend-specific per-rank figures as the log printed them (GiB), by the backend's own names
    figures: dict[str, float] = field(default_factory=dict)
    # free memory at the start of the most recent capture (0.5.23 captures prefill, then decode
    # graphs: an OOM in the second is sized from what it started with, not from the first's start)
    avail_at_capture_begin_gb: float | None = None
    # startup timeline: milestone name -> timestamp text as logged ("init", "weights_begin",
    # "weights_end", "kv_pool", "capture_begin", "capture_end", "ready")
    timeline: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pre_load_avail_gb": self.pre_load_avail_gb,
            "weights_gb": self.weights_gb,
            "after_weights_avail_gb": self.after_weights_avail_gb,
            "kv_tokens": self.kv_tokens,
            "kv_gb": self.kv_gb,
            "avail_before_capture_gb": self.avail_before_capture_gb,
            "capture_begin_avail_gb": self.capture_begin_avail_gb,
            "last_capture_begin_avail_gb": self.avail_at_capture_begin_gb,
            "graph_gb": self.graph_gb,
            "avail_after_capture_gb": self.avail_after_capture_gb,
            "total_gb": self.total_gb,
            "figures": dict(self.figures),
            "timeline": dict(self.timeline),
        }


@dataclass
class Crash:
    kind: str  # one of CRASH_KINDS
    phase: str  # one of CRASH_PHASES
    rank: str | None  # the rank that hit the exception, None when only the main process spoke
    line: int  # 1-based line number of the decisive line
    message: str  # the decisive line's text (the OOM line, not the whole traceback)
    decisive_lines: list[str] = field(default_factory=list)  # a few lines an operator must read
    exit_code: int | None = None
    phase_reason: str = ""  # the evidence for `phase` (or, for `unknown`, what was missing)
    # what proves the OOM killer sent a SIGKILL: a kernel/Slurm OOM line of the log, the cgroup's
    # memory.events oom_kill counter rising during the run, memory at its limit just before the end
    oom_evidence: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "phase_reason": self.phase_reason,
            "rank": self.rank,
            "line": self.line,
            "message": self.message,
            "decisive_lines": list(self.decisive_lines),
            "exit_code": self.exit_code,
            "oom_evidence": self.oom_evidence,
        }


@dataclass
class SeriesPoint:
    ts: str  # timestamp text as logged
    value: float


@dataclass
class RunState:
    """Everything the log (and the supervisor) told us about one run."""

    backend: str = DEFAULT_ENGINE
    # the flag (dest) of the engine's memory setting, as its backend declares it (EngineWords.memory_flag)
    memory_flag: str | None = None
    format: str | None = None  # "sglang-0.5.9" / "sglang-0.5.23"; None until detected
    phase: str = "unknown"  # one of PHASES
    phase_since: str | None = None  # timestamp text of the line that entered the phase
    last_ts: str | None = None  # timestamp of the newest record seen
    lines_seen: int = 0
    server_args: dict[str, Any] = field(default_factory=dict)  # snake_case keys as SGLang prints them
    max_total_num_tokens: int | None = None
    prefill_chunk_tokens: int | None = None  # the engine's chunk of a long prompt, as its log printed it
    prefill_tokens_cap: int | None = None  # tokens one prefill batch may hold
    running_requests_cap: int | None = None  # requests that may run at once
    context_len: int | None = None
    available_gpu_mem_gb: float | None = None  # TP0's `available_gpu_mem=` on the max_total_num_tokens line
    ranks: dict[str, RankMemory] = field(default_factory=dict)  # insertion order = first seen
    host_cache_gb_per_rank: float | None = None  # decimal GB, from `Allocating …`
    host_cache_allocating_ranks: list[str] = field(default_factory=list)
    ready_in_log: bool = False  # `The server is fired up and ready to roll!`
    shutdown_asked_line: int | None = None  # the first line where the server said it was asked to stop
    device: str | None = None  # "cpu" when the log proves a CPU engine; None: GPU or not said
    uvicorn_port: int | None = None
    crash: Crash | None = None
    # warnings that are facts from the log, not findings (imbalance warning text, KV < context)
    log_warnings: list[str] = field(default_factory=list)
    retractions: int = 0
    # `Decode out of memory happened` (SGLang retracts requests and carries on): how often, and the
    # highest token usage seen by a batch line at or before one (how close to the pool limit)
    decode_retractions: int = 0
    decode_retraction_usage: float | None = None
    # flags whose value a message states outside the server_args dump (a decisive line's
    # `--mem-fraction-static=0.88`): snake_case keys, as in server_args
    stated_flags: dict[str, Any] = field(default_factory=dict)
    # SGLang's own advice lines, quoted as printed ("Raise --mem-fraction-static above 0.91 …")
    engine_advice: list[str] = field(default_factory=list)
    lines_recognised: int = 0  # lines the backend's grammar recognised as its server's log
    lines_unparsed: int = 0  # recognised lines whose figures did not parse or were impossible (skipped)
    gen_throughput: deque[SeriesPoint] = field(default_factory=lambda: deque(maxlen=SERIES_MAX_POINTS))
    input_throughput: deque[SeriesPoint] = field(default_factory=lambda: deque(maxlen=SERIES_MAX_POINTS))
    token_usage: deque[SeriesPoint] = field(default_factory=lambda: deque(maxlen=SERIES_MAX_POINTS))
    running_requests: int | None = None
    queued_requests: int | None = None
    last_batch_kind: str | None = None  # "prefill" / "decode": which batch ran last (crash phase)
    # batch/statistics lines that showed tokens moving (the hang watch's log evidence)
    progress_lines: int = 0
    # while `phase` is `hung`: what the hang watch saw (core/hang.py HangWatch.verdict)
    hang: dict[str, Any] | None = None
    # what the reducer remembers between events (traceback frames since an exception); not published
    reducer_memory: Any = field(default=None, repr=False, compare=False)

    # ---- derived values (never stored twice) ----
    def rank(self, name: str) -> RankMemory:
        """The rank's record, created on first mention."""
        rm = self.ranks.get(name)
        if rm is None:
            rm = self.ranks[name] = RankMemory(rank=name)
        return rm

    @property
    def min_pre_load_avail_gb(self) -> float | None:
        """P: the minimum over ranks of free memory before weights load."""
        vals = [r.pre_load_avail_gb for r in self.ranks.values() if r.pre_load_avail_gb is not None]
        return min(vals) if vals else None

    @property
    def min_headroom_gb(self) -> float | None:
        """The worst rank's free memory after the last graph capture."""
        vals = [r.avail_after_capture_gb for r in self.ranks.values() if r.avail_after_capture_gb is not None]
        return min(vals) if vals else None

    @property
    def worst_rank(self) -> str | None:
        best: tuple[float, str] | None = None
        for r in self.ranks.values():
            if r.avail_after_capture_gb is not None and (best is None or r.avail_after_capture_gb < best[0]):
                best = (r.avail_after_capture_gb, r.rank)
        return best[1] if best else None

    @property
    def memory_setting(self) -> tuple[str, float] | None:
        """(flag, value) of the engine's memory setting as the log showed it (the server's dump,
        else a message that stated it); None when the log did not say, or the engine has none."""
        flag = self.memory_flag
        if flag is None:
            return None
        v = self.server_args.get(flag)
        if v is None:
            v = self.stated_flags.get(flag)
        return (flag, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def peak_gen_throughput(self) -> float | None:
        return max((p.value for p in self.gen_throughput), default=None)

    def copy(self) -> RunState:
        """An independent copy, safe to hand to another thread or the UI."""
        # The series hold up to SERIES_MAX_POINTS points each, and a point is never changed once
        # appended: copy the deques, share the points. Deep-copying every point cost ~200 ms per
        # snapshot once the series were full (hours of serving), at 1-10 snapshots a second.
        series = (self.gen_throughput, self.input_throughput, self.token_usage)
        try:
            # A pickle round trip is about twice as fast as deepcopy (the supervisor copies the
            # state for every snapshot: 1.5 a second on an idle server, more when busy)
            return _copy_by_pickle(self, series)
        except Exception:  # something pickle cannot carry and deepcopy can: the slower way
            memo: dict[int, Any] = {id(d): deque(d, maxlen=d.maxlen) for d in series}
            return copy.deepcopy(self, memo)

    def to_json(self) -> dict[str, Any]:
        """The shape DESIGN.md fixes for `diagnose`, `check` and `status` (findings added by callers)."""
        return {
            "backend": self.backend,
            "format": self.format,
            "phase": self.phase,
            "phase_since": self.phase_since,
            "server_args": mask_mapping(self.server_args),  # SGLang's dump holds its api_key
            "max_total_num_tokens": self.max_total_num_tokens,
            "context_len": self.context_len,
            "prefill_chunk_tokens": self.prefill_chunk_tokens,
            "chunked_prefill_size": self.prefill_chunk_tokens,  # the key before issue 26 (an alias)
            "available_gpu_mem_gb": self.available_gpu_mem_gb,
            "min_headroom_gb": self.min_headroom_gb,
            "ready_in_log": self.ready_in_log,
            "host_cache_gb_per_rank": self.host_cache_gb_per_rank,
            # the same figure under the key it had before issue 26 (kept for scripts that read it)
            "hicache_host_gb_per_rank": self.host_cache_gb_per_rank,
            "memory_setting": _setting_json(self.memory_setting),
            "ranks": [r.to_json() for r in sorted(self.ranks.values(), key=lambda r: rank_sort_key(r.rank))],
            "crash": self.crash.to_json() if self.crash else None,
            # DESIGN.md's shape: {"since", "evidence"} while `hung`, else null
            "hung": {"since": self.phase_since, "evidence": dict(self.hang)} if self.hang else None,
            "peak_gen_throughput": self.peak_gen_throughput,
            "retractions": self.retractions,
            "decode_retractions": self.decode_retractions,
            "engine_advice": list(self.engine_advice),
            "lines_unparsed": self.lines_unparsed,
        }


def _setting_json(setting: tuple[str, float] | None) -> dict[str, Any] | None:
    """`memory_setting` in status/diagnose JSON: {"flag": "mem_fraction_static", "value": 0.88} or null."""
    return None if setting is None else {"flag": setting[0], "value": setting[1]}


def _copy_by_pickle(state: RunState, series: tuple[deque[SeriesPoint], ...]) -> RunState:
    """`state` through pickle, each of `series` replaced by a new deque holding the same points."""
    import io

    out_cls, in_cls, protocol = _series_picklers()
    by_id = {id(d): d for d in series}
    buf = io.BytesIO()
    out_cls(buf, protocol, by_id).dump(state)
    buf.seek(0)
    copied = in_cls(buf, by_id).load()
    assert isinstance(copied, RunState)
    return copied


@functools.cache
def _series_picklers() -> tuple[Any, Any, int]:
    """The pickler that leaves the series out by reference and the unpickler that puts a new deque
    of the same points in their place (made once: pickle is imported only when a state is copied)."""
    import pickle

    class SeriesOut(pickle.Pickler):
        def __init__(self, buf: Any, protocol: int, by_id: dict[int, deque[SeriesPoint]]) -> None:
            super().__init__(buf, protocol)
            self.by_id = by_id

        def persistent_id(self, obj: Any) -> int | None:
            return id(obj) if type(obj) is deque and id(obj) in self.by_id else None

    class SeriesIn(pickle.Unpickler):
        def __init__(self, buf: Any, by_id: dict[int, deque[SeriesPoint]]) -> None:
            super().__init__(buf)
            self.by_id = by_id

        def persistent_load(self, pid: Any) -> Any:
            d = self.by_id[pid]
            return deque(d, maxlen=d.maxlen)

    return SeriesOut, SeriesIn, pickle.HIGHEST_PROTOCOL
