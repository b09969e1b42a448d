"""Fold events into a RunState: deterministic, in place, no I/O.

The same reducer serves the live supervisor (events as lines arrive), `cockpit diagnose` (a whole
file) and the tests. Phases only move forward (loading → kv_pool → capturing → warmup → ready) until
a crash or a stop; a new `server_args` dump after a run has started means the log now holds a new
run, and the state starts over.

The crash story, assembled from several lines, is told in `crashstory.py`; this module holds the
per-event handlers and the dispatch table.
"""

from __future__ import annotations

from collections import deque

from cockpit.core import events as ev
from cockpit.core.crashstory import (  # the crash story and the shared context
    _MAX_FRAMES,
    _OOM_KILL_EXITS,
    _STOP_EXITS,
    _VAGUE_KINDS,
    SERVING_SEQ,
    _add_decisive,
    _advance,
    _commit_pending,
    _crash,
    _crash_phase,
    _crash_rank,
    _ctx,
    _describe,
    _exit_only_yields,
    _hint_format,
    _oom_evidence,
    _oom_kill_kind,
    _oom_proven,
    _phase_from_frames,
    _rank_label,
    _reset,
    _sigkill_crash,
    _where,
    end_of_input,
)
from cockpit.core.state import (
    ENGINE_WATCHDOG,
    HOST_CACHE_SHORT,
    HOST_CACHE_SMALL,
    KILLED_BY_SIGNAL,
    RunState,
    SeriesPoint,
)

__all__ = ["apply", "apply_all", "end_of_input"]


def _node_rank(args: dict[str, object]) -> object:
    return args.get("node_rank") or 0


def _server_args(state: RunState, e: ev.ServerArgs) -> None:
    old = state.server_args
    if old and _node_rank(old) != _node_rank(e.args):
        # another node of the same multi-node run prints its own dump: node 0's is the one to keep
        if _node_rank(e.args) == 0:
            state.server_args = dict(e.args)
        return
    if old and (state.ranks or state.crash is not None or state.ready_in_log):
        _reset(state)  # the same node started again: this log now holds a new run
    elif state.crash is not None:
        _reset(state)
    state.server_args = dict(e.args)
    _advance(state, "loading", e.ts)


def _dist_begin(state: RunState, e: ev.DistInitBegin) -> None:
    _hint_format(state, e.fmt)
    rm = state.rank(_rank_label(e))
    if e.ts:
        rm.timeline.setdefault("init", e.ts)
    _advance(state, "loading", e.ts)


def _dist_end(state: RunState, e: ev.DistInitEnd) -> None:
    _hint_format(state, e.fmt)
    state.rank(_rank_label(e))
    _advance(state, "loading", e.ts)


def _baseline(state: RunState, e: ev.MemoryBaseline) -> None:
    state.rank(_rank_label(e))


def _device(state: RunState, e: ev.DeviceSeen) -> None:
    state.device = e.device


def _format_seen(state: RunState, e: ev.FormatSeen) -> None:
    _hint_format(state, e.fmt, e.strong)


def _imbalance(state: RunState, e: ev.MemoryImbalance) -> None:
    label = f"{e.rank}: {e.text}" if e.rank else e.text
    if label not in state.log_warnings:
        state.log_warnings.append(label)


def _load_begin(state: RunState, e: ev.WeightLoadBegin) -> None:
    rm = state.rank(_rank_label(e))
    if rm.pre_load_avail_gb is None and e.avail_gb is not None:  # a draft model loads later: P is the first
        rm.pre_load_avail_gb = e.avail_gb
    if e.ts:  # the first load begins the stage, with a figure or without (vLLM prints none)
        rm.timeline.setdefault("weights_begin", e.ts)
    _advance(state, "loading", e.ts)


def _load_end(state: RunState, e: ev.WeightLoadEnd) -> None:
    rm = state.rank(_rank_label(e))
    if rm.after_weights_avail_gb is None:  # a draft model loads later: the target's figures count
        rm.weights_gb = e.weights_gb
        rm.after_weights_avail_gb = e.avail_gb
        if e.ts:
            rm.timeline.setdefault("weights_end", e.ts)
    if all(r.after_weights_avail_gb is not None for r in state.ranks.values() if r.pre_load_avail_gb is not None):
        _advance(state, "kv_pool", e.ts)  # the run has loaded once every rank that began has finished


def _kv(state: RunState, e: ev.KvCacheAllocated) -> None:
    rm = state.rank(_rank_label(e))
    if not e.upper_bound and (rm.kv_gb is None or (rm.kv_tokens is None and e.tokens is not None)):
        rm.kv_tokens = e.tokens
        rm.kv_gb = e.kv_gb
        if e.ts:
            rm.timeline.setdefault("kv_pool", e.ts)
    _advance(state, "kv_pool", e.ts)


def _pool_end(state: RunState, e: ev.MemoryPoolEnd) -> None:
    rm = state.rank(_rank_label(e))
    if rm.avail_before_capture_gb is None and rm.captures_done == 0:
        rm.avail_before_capture_gb = e.avail_gb
    _advance(state, "kv_pool", e.ts)


def _capture_begin(state: RunState, e: ev.GraphCaptureBegin) -> None:
    if e.rank is None and e.avail_gb is None and e.ts is None:
        _advance(state, "capturing", None)  # a progress bar (no rank, no figure): the lifecycle only
        return
    rm = state.rank(_rank_label(e))
    if rm.avail_before_capture_gb is None and e.avail_gb is not None:
        rm.avail_before_capture_gb = e.avail_gb
    if e.avail_gb is not None and "ready" not in rm.timeline:
        if rm.capture_begin_avail_gb is None:
            rm.capture_begin_avail_gb = e.avail_gb
        rm.avail_at_capture_begin_gb = e.avail_gb  # the capture now running: if it fails, this is what it had
    if e.ts:
        rm.timeline.setdefault("capture_begin", e.ts)
    _advance(state, "capturing", e.ts)


def _capture_end(state: RunState, e: ev.GraphCaptureEnd) -> None:
    rm = state.rank(_rank_label(e))
    if "ready" in rm.timeline:
        return  # headroom is what this rank had free when the server declared itself ready
    if e.graph_gb is not None:
        rm.graph_gb = round((rm.graph_gb or 0.0) + e.graph_gb, 4)
    if e.avail_gb is not None:
        rm.avail_after_capture_gb = e.avail_gb
    rm.captures_done += 1
    if e.ts:
        rm.timeline["capture_end"] = e.ts
    _advance(state, "capturing", e.ts)


def _kv_pool_sized(state: RunState, e: ev.KvPoolSized) -> None:
    state.max_total_num_tokens = e.max_total_num_tokens
    state.prefill_chunk_tokens = e.prefill_chunk_tokens
    state.prefill_tokens_cap = e.prefill_tokens_cap
    state.running_requests_cap = e.running_requests_cap
    state.context_len = e.context_len
    state.available_gpu_mem_gb = e.available_gpu_mem_gb
    _advance(state, "kv_pool" if e.sized_before_capture else "warmup", e.ts)


_RANK_FIELDS = ("pre_load_avail_gb", "weights_gb", "kv_gb", "graph_gb", "avail_after_capture_gb", "total_gb")


def _rank_figures(state: RunState, e: ev.RankMemoryFigures) -> None:
    rm = state.rank(_rank_label(e))
    for key, value in e.figures.items():
        if key in _RANK_FIELDS:
            if key == "avail_after_capture_gb" or getattr(rm, key) is None:
                setattr(rm, key, value)
        else:
            rm.figures[key] = value


def _stats(state: RunState, e: ev.ServingStats) -> None:
    """A statistics line covers an interval of mixed batches: it feeds the series and the queue
    figures but names no batch kind (a crash's phase needs the batch itself)."""
    _alive(state, e)
    if e.running_req is not None:
        state.running_requests = e.running_req
    if e.queue_req is not None:
        state.queued_requests = e.queue_req
    if e.preemptions:
        state.retractions += e.preemptions
    if e.gen_throughput or e.prompt_throughput:  # a frozen engine's stats line says 0.0 tokens/s
        state.progress_lines += 1
    if e.ts is not None:
        if e.gen_throughput is not None:
            state.gen_throughput.append(SeriesPoint(e.ts, e.gen_throughput))
        if e.prompt_throughput is not None:
            state.input_throughput.append(SeriesPoint(e.ts, e.prompt_throughput))
        if e.kv_usage is not None:
            state.token_usage.append(SeriesPoint(e.ts, e.kv_usage))


def _failed_batch(state: RunState, e: ev.FailedBatch) -> None:
    """The batch a failing server dumped: it names the crash's phase when nothing sharper did."""
    state.last_batch_kind = e.kind
    crash = state.crash or _ctx(state).pending
    if crash is not None and crash.phase in ("serving", "unknown"):
        crash.phase, crash.phase_reason = e.kind, f"the server's dump of the failing batch holds a {e.kind}"


def _phase_evidence(state: RunState, e: ev.PhaseEvidence) -> None:
    c = _ctx(state)
    if c.phase_evidence is None:
        c.phase_evidence = e.phase
    crash = state.crash or c.pending
    if crash is not None and crash.phase == "unknown":
        crash.phase = (state.last_batch_kind or "serving") if e.phase == "serving" else e.phase
        crash.phase_reason = "a line that only " + ("a serving server" if e.phase == "serving" else "start-up") + " prints"


def _host_cache(state: RunState, e: ev.HostCacheAllocating) -> None:
    state.host_cache_gb_per_rank = e.host_gb
    label = _rank_label(e)
    if label not in state.host_cache_allocating_ranks:
        state.host_cache_allocating_ranks.append(label)


def _below_ctx(state: RunState, e: ev.KvPoolBelowContext) -> None:
    text = e.text or f"KV pool holds {e.tokens:,} tokens, fewer than the context length ({e.context_len:,})"
    if text not in state.log_warnings:
        state.log_warnings.append(text)


def _uvicorn(state: RunState, e: ev.UvicornRunning) -> None:
    state.uvicorn_port = e.port
    _advance(state, "warmup", e.ts)


def _ready(state: RunState, e: ev.ServerReady) -> None:
    _alive(state, e)  # (rare: no need to skip the call)
    state.ready_in_log = True
    for rm in state.ranks.values():
        if e.ts:
            rm.timeline.setdefault("ready", e.ts)
    _advance(state, "ready", e.ts)


def _batch(state: RunState, kind: str, e: ev.PrefillBatch | ev.DecodeBatch, series: deque[SeriesPoint],
           throughput: float | None) -> None:
    """A prefill or decode batch line: queue figures, the batch kind (a crash's phase), the series."""
    c = state.reducer_memory or _ctx(state)  # (the hot path: most lines of a busy log are these)
    if c.pending is not None:
        _alive(state, e)
    c.batches += 1
    c.batch_rank = e.rank
    if state.phase == "unknown":
        # the log starts mid-run (an excerpt, a rotated file): batch lines mean it serves. With the
        # startup in view, the ready line decides (the warmup request prints batch lines too).
        _advance(state, "ready", e.ts)
    state.last_batch_kind = kind
    if throughput or kind == "decode":
        state.progress_lines += 1
    if e.running_req is not None:
        state.running_requests = e.running_req
    if e.queue_req is not None:
        state.queued_requests = e.queue_req
    if e.ts is not None:
        if throughput is not None:
            series.append(SeriesPoint(e.ts, throughput))
        if e.token_usage is not None:
            state.token_usage.append(SeriesPoint(e.ts, e.token_usage))


def _prefill(state: RunState, e: ev.PrefillBatch) -> None:
    _batch(state, "prefill", e, state.input_throughput, e.input_throughput)


def _decode(state: RunState, e: ev.DecodeBatch) -> None:
    _batch(state, "decode", e, state.gen_throughput, e.gen_throughput)


def _retract(state: RunState, e: ev.KvRetract) -> None:
    state.retractions += e.n  # requests retracted, summed over every `Retract requests` line
    _retraction(state)


def _decode_retraction(state: RunState, e: ev.DecodeRetraction) -> None:
    if e.retracted is not None:
        state.retractions += e.retracted
    _retraction(state)


def _retraction(state: RunState) -> None:
    """The pool was full during decode and the server retracted requests (it carries on): how often, and
    the token usage the last batch line showed before it (how close to the pool limit)."""
    state.decode_retractions += 1
    if state.token_usage:
        usage = state.token_usage[-1].value
        if state.decode_retraction_usage is None or usage > state.decode_retraction_usage:
            state.decode_retraction_usage = usage


def _advice(state: RunState, e: ev.EngineAdvice) -> None:
    # every rank prints the same advice: keep it once, with the first rank that said it
    if len(state.engine_advice) < 16 and not any(a.endswith(e.text) for a in state.engine_advice):
        state.engine_advice.append(_where(e) + e.text)


def _flag_stated(state: RunState, e: ev.FlagStated) -> None:
    state.stated_flags[e.dest] = e.value  # the latest statement is the value in force


def _pool_size(state: RunState, e: ev.PoolSize) -> None:
    if state.max_total_num_tokens is None:
        state.max_total_num_tokens = e.tokens


def _access(state: RunState, e: ev.HttpAccess) -> None:
    if e.method == "POST":  # a request (health checks, metrics and info are GETs)
        c = state.reducer_memory or _ctx(state)
        c.requests += 1
        if c.pending is not None:
            _alive(state, e)


def _seq(state: RunState, e: ev.CollectiveSeq) -> None:
    c = _ctx(state)
    c.max_seq = max(c.max_seq, e.seq)
    crash = state.crash
    if crash is not None and crash.phase == "unknown" and e.seq >= SERVING_SEQ:
        crash.phase, crash.phase_reason = "serving", f"collective sequence number {e.seq:,}: the server had been serving"


def _unparsed(state: RunState, e: ev.Unparsed) -> None:
    state.lines_unparsed += 1


def _alive(state: RunState, e: ev.Event) -> None:
    """The server served after a bare traceback: it was not fatal. Drop it; keep it as a warning
    (a fact from the log)."""
    c = _ctx(state)
    p = c.pending
    if p is None or e.line <= p.line:
        return
    note = f"line {p.line}: {p.message[:160]} (a traceback the server survived)"
    if note not in state.log_warnings and len(state.log_warnings) < 32:
        state.log_warnings.append(note)
    c.pending = None
    c.exc_seen = False
    c.frames = []


def _sched_exc(state: RunState, e: ev.SchedulerException) -> None:
    c = _ctx(state)
    crash = state.crash
    _exit_only_yields(crash)
    if crash is not None and crash.kind not in _VAGUE_KINDS:
        if crash.rank is None and e.rank is not None:
            crash.rank = e.rank  # the signature came first (torch's own log line): the header names the rank
        _add_decisive(crash, _describe(e))  # another rank failing after the first: context only
        return
    c.pending = None  # a header starts the story afresh: the bare traceback before it was context
    c.frames = []
    c.exc_seen = True
    c.exc_rank = e.rank
    if crash is None:
        _crash(state, e, "unknown")
        return
    # the process exit (or a SIGQUIT) was seen first; the exception is the better evidence
    if crash.rank is None:
        crash.rank = _crash_rank(state, e)
    if crash.line == 0:
        crash.line = e.line
        crash.message = _describe(e)
    _add_decisive(crash, _describe(e))


def _tb_start(state: RunState, e: ev.TracebackStart) -> None:
    """A bare `Traceback (most recent call last):`: something raised. Without a header naming the
    process it is a provisional crash (an excerpt is pasted for its traceback; in a whole log the
    server serving afterwards withdraws it). A chained traceback ("During handling of the above
    exception …") keeps the frames already seen."""
    c = _ctx(state)
    if state.crash is None and c.pending is None and e.line - c.frame_line > 8:
        c.frames = []
    c.exc_seen = True
    _crash(state, e, "unknown", "Traceback (most recent call last):", provisional=True)


def _frame(state: RunState, e: ev.TracebackFrame) -> None:
    c = _ctx(state)
    if state.crash is None and c.pending is None and e.line - c.frame_line > 8:
        # a traceback whose header is not in view (an excerpt that starts mid-trace)
        c.frames = []
        c.exc_seen = True
        c.frames.append((e.phase, f"{e.file or ''}:{e.function}"))
        c.frame_line = e.line
        _crash(state, e, "unknown", _describe(e), provisional=True)
        return
    c.frames.append((e.phase, f"{e.file or ''}:{e.function}"))
    c.frame_line = e.line
    if len(c.frames) > _MAX_FRAMES:
        del c.frames[0]
    crash = state.crash or c.pending
    if crash is not None and crash.kind in _VAGUE_KINDS and c.exc_seen:
        crash.phase, crash.phase_reason = _crash_phase(state, crash.kind, e)


# Exceptions that, before the server serves, mean the launch itself was wrong (an import, a path,
# an argument), not a resource: `startup_error`.
_STARTUP_EXC = ("ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError", "FileNotFoundError",
                "NotImplementedError", "ArgumentError", "ArgumentTypeError", "HFValidationError",
                "RepositoryNotFoundError", "OSError", "ValueError", "TypeError", "KeyError", "AttributeError")
_NOT_STARTUP_ERRORS = ("NCCL", "nccl", "CUDA", "cuda", "distributed", "store", "timeout", "memory")


def _exc_line(state: RunState, e: ev.ExceptionLine) -> None:
    c = _ctx(state)
    if state.crash is None and c.pending is None:
        if not (c.frames and e.line - c.frame_line <= 4):
            return  # an error-looking line outside a traceback proves nothing by itself
        # the end of a bare traceback: the text proves something died, not yet that the server did
        _crash(state, e, "unknown", f"{e.exc_type}: {e.text}", provisional=True)
    crash = state.crash or c.pending
    if c.exc_seen:
        _exit_only_yields(crash)
    if crash is not None and crash.kind in _VAGUE_KINDS and c.exc_seen and not (crash is state.crash and c.death_said):
        # the line that ends the traceback says what went wrong, even when no rule classifies it
        # (not after a death its watcher told: that traceback is the death's consequence)
        crash.message = f"{e.exc_type}: {e.text}"
        crash.line = e.line
        crash.phase, crash.phase_reason = _crash_phase(state, crash.kind, e)
        short = e.exc_type.rpartition(".")[2]
        if crash.phase == "startup" and short in _STARTUP_EXC and not any(w in e.text for w in _NOT_STARTUP_ERRORS):
            crash.kind = "startup_error"
        _add_decisive(crash, _describe(e))


def _cuda_oom(state: RunState, e: ev.CudaOom) -> None:
    c = _ctx(state)
    phase = _phase_from_frames(c.frames) if c.exc_seen or c.frames else None
    life = c.phase_before if state.phase == "crashed" else state.phase  # a crash's later lines still need it
    if phase in (None, "startup") and life == "capturing" and not state.ready_in_log:
        # after a capture began and before it ended: the start-up frames above (the scheduler's
        # constructor runs the capture) do not make it another start-up OOM (issue 35)
        phase = "graph_capture"
    kind = "graph_capture_oom" if phase == "graph_capture" else "cuda_oom"
    _crash(state, e, kind, e.text.strip())


def _graph_failed(state: RunState, e: ev.GraphCaptureFailed) -> None:
    _crash(state, e, "graph_capture_oom" if "out of memory" in e.text.lower() else "unknown", e.text.strip())
    if state.crash is not None and state.crash.kind == "unknown":
        state.crash.phase, state.crash.phase_reason = "graph_capture", "the server says the graph capture failed"


def _kv_exhausted(state: RunState, e: ev.KvPoolExhausted) -> None:
    _crash(state, e, "kv_pool_exhausted", e.text.strip())


def _not_enough(state: RunState, e: ev.NotEnoughMemory) -> None:
    if e.setting is not None and state.memory_flag is not None:
        state.stated_flags.setdefault(state.memory_flag, e.setting)
    _crash(state, e, "init_not_enough_memory", e.text.strip())


def _host_mem(state: RunState, e: ev.HostCacheShortOfMemory) -> None:
    _crash(state, e, HOST_CACHE_SHORT, e.text.strip())


# a scheduler ending by SIGTERM after the server said a stop was asked (SGLang's `SIGTERM received.
# … Draining requests and shutting down...`) is that stop, not a crash; so is the launcher's SIGQUIT
# clean-up after it
_STOP_SIGNAL_EXIT = -15


def _stop_after_asked(state: RunState) -> bool:
    return state.shutdown_asked_line is not None and state.crash is None


def _host_cache_small(state: RunState, e: ev.HostCacheSmallerThanDevice) -> None:
    _crash(state, e, HOST_CACHE_SMALL, e.text.strip())


def _rank_dead(state: RunState, e: ev.RankDead) -> None:
    if e.exit_code == _STOP_SIGNAL_EXIT and _stop_after_asked(state):
        return
    first = state.crash is None and _ctx(state).pending is None
    if e.exit_code in _OOM_KILL_EXITS:
        _sigkill_crash(state, e, e.text.strip())
    else:
        _crash(state, e, "unknown", e.text.strip())
    if first and state.crash is not None and state.crash.line == e.line:
        _ctx(state).death_said = True
    if state.crash is not None and state.crash.exit_code is None and e.exit_code is not None:
        state.crash.exit_code = e.exit_code


def _exit_code(state: RunState, e: ev.ExitCode) -> None:
    _commit_pending(state)
    crash = state.crash
    if crash is None:
        return
    if crash.exit_code is None:
        crash.exit_code = e.exit_code
    if e.exit_code in _OOM_KILL_EXITS and crash.kind in _VAGUE_KINDS:
        crash.kind = _oom_kill_kind(state)
        if crash.kind != KILLED_BY_SIGNAL:
            crash.oom_evidence = crash.oom_evidence or _oom_evidence(state)
    _add_decisive(crash, _describe(e))


def _nccl(state: RunState, e: ev.NcclTimeout) -> None:
    _crash(state, e, "nccl_timeout", e.text.strip())


def _nccl_error(state: RunState, e: ev.NcclError) -> None:
    _crash(state, e, "nccl_error", e.text.strip())


def _startup_error(state: RunState, e: ev.StartupError) -> None:
    _crash(state, e, "startup_error", e.text.strip())


def _watchdog(state: RunState, e: ev.EngineWatchdogFired) -> None:
    _crash(state, e, ENGINE_WATCHDOG, e.text.strip())


def _warmup(state: RunState, e: ev.WarmupFailed) -> None:
    _crash(state, e, "warmup_failed", e.text.strip())


def _port(state: RunState, e: ev.PortInUse) -> None:
    _crash(state, e, "port_in_use", e.text.strip())


def _sigquit(state: RunState, e: ev.SigquitReceived) -> None:
    if _stop_after_asked(state) and _ctx(state).pending is None:
        return
    _crash(state, e, "unknown", e.text.strip())


def _shutdown_asked(state: RunState, e: ev.ShutdownAsked) -> None:
    if state.shutdown_asked_line is None:
        state.shutdown_asked_line = e.line


def _killed(state: RunState, e: ev.Killed) -> None:
    # the shell's `Killed` after the server's own error is its cleanup's SIGKILL: context only
    if state.crash is None and _ctx(state).pending is None:
        _sigkill_crash(state, e, e.text)
    else:
        _crash(state, e, "unknown", e.text)
    if state.crash is not None and state.crash.exit_code is None:
        state.crash.exit_code = 137  # the shell's `Killed` means SIGKILL


def _oom_line(state: RunState, e: ev.OomKillLine) -> None:
    """A kernel/Slurm OOM line: the evidence a SIGKILL told before or after it needs. Alone (no
    death seen yet) it is not yet a crash of this server: the OOM killer may have chosen another
    process; the server's own death (a dead rank, its exit) comes next and is read with it."""
    c = _ctx(state)
    if c.oom_line is None:
        c.oom_line = e.text
    if state.crash is not None:
        _oom_proven(state, e)
        _add_decisive(state.crash, _describe(e))


def _exited(state: RunState, e: ev.ProcessExited) -> None:
    # a stop exit code is a stop only when somebody stopped it (or the caller cannot tell)
    stop = e.exit_code in _STOP_EXITS and e.stopped is not False
    # a stop's own SIGKILL after its timeout is the stop's, not a kill from outside
    stop = stop or (e.stopped is True and e.exit_code in _OOM_KILL_EXITS and state.crash is None)
    if not stop:
        _commit_pending(state)  # the process died after that traceback: it was the end
    if state.crash is not None:
        if state.crash.exit_code is None:
            state.crash.exit_code = e.exit_code
        if e.oom_evidence:  # vLLM's API server exits 0 after its SIGKILLed worker: the kill was told above
            _oom_proven(state, e, e.oom_evidence)
        _add_decisive(state.crash, _describe(e, brief=True))  # the crash is told above: the signal named only
        return
    if stop:
        state.phase = "stopped"
        state.phase_since = e.ts or state.last_ts
        return
    if e.exit_code in _OOM_KILL_EXITS:
        _sigkill_crash(state, e, None, e.oom_evidence)
    elif e.exit_code in _STOP_EXITS:
        # exit 0 / SIGTERM and nobody stopped it: the server ended by itself (its engine died, an
        # external `kill`): a crash, said so
        _crash(state, e, "unknown", f"the server ended unexpectedly (exit code {e.exit_code}"
                                    f"{', SIGTERM from outside' if e.exit_code in (143, -15) else ''}): "
                                    "nobody stopped it through Cockpit")
    else:
        _crash(state, e, "unknown")
    if state.crash is not None:
        state.crash.exit_code = e.exit_code


def _hung(state: RunState, e: ev.HangSeen) -> None:
    """Only a ready run can hang (a start-up that stalls is told by its own phase clock)."""
    if state.phase in ("ready", "hung"):
        if state.phase != "hung":
            state.phase = "hung"
            state.phase_since = e.ts or state.last_ts
        state.hang = dict(e.evidence)


def _unhung(state: RunState, e: ev.HangCleared) -> None:
    state.hang = None
    if state.phase == "hung":
        state.phase = "ready"
        state.phase_since = e.ts or state.last_ts


_HANDLERS: dict[type, object] = {
    ev.HangSeen: _hung,
    ev.HangCleared: _unhung,
    ev.RankMemoryFigures: _rank_figures,
    ev.ServingStats: _stats,
    ev.FailedBatch: _failed_batch,
    ev.PhaseEvidence: _phase_evidence,
    ev.ServerArgs: _server_args,
    ev.DistInitBegin: _dist_begin,
    ev.DistInitEnd: _dist_end,
    ev.MemoryBaseline: _baseline,
    ev.MemoryImbalance: _imbalance,
    ev.WeightLoadBegin: _load_begin,
    ev.WeightLoadEnd: _load_end,
    ev.KvCacheAllocated: _kv,
    ev.MemoryPoolEnd: _pool_end,
    ev.GraphCaptureBegin: _capture_begin,
    ev.GraphCaptureEnd: _capture_end,
    ev.KvPoolSized: _kv_pool_sized,
    ev.HostCacheAllocating: _host_cache,
    ev.KvPoolBelowContext: _below_ctx,
    ev.UvicornRunning: _uvicorn,
    ev.ServerReady: _ready,
    ev.HttpAccess: _access,
    ev.PrefillBatch: _prefill,
    ev.DecodeBatch: _decode,
    ev.KvRetract: _retract,
    ev.DecodeRetraction: _decode_retraction,
    ev.EngineAdvice: _advice,
    ev.PoolSize: _pool_size,
    ev.FormatSeen: _format_seen,
    ev.DeviceSeen: _device,
    ev.FlagStated: _flag_stated,
    ev.CollectiveSeq: _seq,
    ev.Unparsed: _unparsed,
    ev.SchedulerException: _sched_exc,
    ev.TracebackStart: _tb_start,
    ev.TracebackFrame: _frame,
    ev.ExceptionLine: _exc_line,
    ev.CudaOom: _cuda_oom,
    ev.GraphCaptureFailed: _graph_failed,
    ev.KvPoolExhausted: _kv_exhausted,
    ev.NotEnoughMemory: _not_enough,
    ev.HostCacheShortOfMemory: _host_mem,
    ev.HostCacheSmallerThanDevice: _host_cache_small,
    ev.RankDead: _rank_dead,
    ev.ExitCode: _exit_code,
    ev.NcclTimeout: _nccl,
    ev.NcclError: _nccl_error,
    ev.StartupError: _startup_error,
    ev.EngineWatchdogFired: _watchdog,
    ev.WarmupFailed: _warmup,
    ev.PortInUse: _port,
    ev.SigquitReceived: _sigquit,
    ev.Killed: _killed,
    ev.OomKillLine: _oom_line,
    ev.ShutdownAsked: _shutdown_asked,
    ev.ProcessExited: _exited,
}


def apply(state: RunState, event: ev.Event) -> None:
    """Fold one event into `state` (in place)."""
    if event.line > state.lines_seen:
        state.lines_seen = event.line
    if event.ts is not None:
        state.last_ts = event.ts
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(state, event)  # type: ignore[operator]


def apply_all(state: RunState, events: list[ev.Event]) -> RunState:
    for e in events:
        apply(state, e)
    return state
