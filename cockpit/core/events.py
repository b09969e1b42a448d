"""Typed events: one per meaningful server log line (or supervisor observation).

A backend's log parser turns text into these; `cockpit.core.reducer.apply` folds them into a
`RunState`. Every event carries where it came from: `line` (1-based line number in the log; 0 when
no log line stands behind it), `ts` (the record's timestamp text as logged, None for unprefixed
lines such as traceback text) and `rank` (the rank label as printed, e.g. "TP3" or "DP1 TP3";
None for the main process and for unprefixed lines).

Sizes keep the server's own units: "GB" in SGLang's GPU memory lines is GiB, the HiCache host
sizes are decimal GB. Unknown values are None, never 0.
"""

from __future__ import annotations

from operator import attrgetter
from types import MemberDescriptorType
from typing import Any, TypeVar, dataclass_transform

_C = TypeVar("_C", bound=type)


@dataclass_transform(frozen_default=True)
def _event(cls: _C) -> _C:
    """What `@dataclass(frozen=True, slots=True)` gave these classes — the constructor (positional
    or keyword, defaults), `==`, `hash`, `repr`, immutability, `__slots__`, pickling and copying —
    for a fraction of its cost: building ~40 classes through `dataclasses` took ~30 ms of every
    `cockpit diagnose` start-up (it generates and compiles six methods per class and builds each
    class twice). Here only `__init__` is generated per class; the rest is shared (`_EventBase`)."""
    ns = dict(cls.__dict__)
    inherited: tuple[str, ...] = getattr(cls, "__event_fields__", ())
    own = [f for f in ns.get("__annotations__", {}) if f not in inherited]
    fields = (*inherited, *own)
    # class attributes holding defaults would clash with the slots: they move into __init__
    defaults = {**getattr(cls, "__event_defaults__", {}), **{f: ns.pop(f) for f in own if f in ns}}
    params = []
    for f in fields:
        if f in defaults:
            params.append(f"{f}=_d_{f}")
        elif any("=" in p for p in params):
            raise TypeError(f"{cls.__name__}: field {f!r} without a default follows one with a default")
        else:
            params.append(f)
    ns.pop("__dict__", None)
    ns.pop("__weakref__", None)
    ns.update(
        __slots__=tuple(own),
        __init__=_first_init(params, fields, defaults),
        __event_fields__=fields,
        __event_defaults__=defaults,
        __match_args__=fields,
        _values=attrgetter(*fields),  # every event has line, ts and rank: always a tuple
    )
    return type(cls)(cls.__name__, cls.__bases__, ns)


def _first_init(params: list[str], fields: tuple[str, ...], defaults: dict[str, Any]) -> Any:
    """An `__init__` that compiles the class's real one on first use and puts it in its place:
    compiling costs ~0.1 ms a class, and a `cockpit diagnose` meets only a few of the ~40."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        # each field is set through its slot's own descriptor (what object.__setattr__ finds by name,
        # past the class's refusing __setattr__): ~40 % cheaper, and the batch lines make an event each
        scope: dict[str, Any] = {f"_d_{f}": v for f, v in defaults.items()}
        body = ""
        for f in fields:
            slot = next((k.__dict__[f] for k in cls.__mro__ if f in k.__dict__), None)
            if isinstance(slot, MemberDescriptorType):
                scope[f"_s_{f}"] = slot.__set__
                body += f"    _s_{f}(self, {f})\n"
            else:
                scope["_set"] = object.__setattr__
                body += f"    _set(self, {f!r}, {f})\n"
        exec(f"def __init__(self, {', '.join(params)}) -> None:\n{body}", scope)  # source: own field names only
        init = scope["__init__"]
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        if cls.__dict__.get("__init__") is __init__:
            cls.__init__ = init
        init(self, *args, **kwargs)

    return __init__


class _EventBase:
    """The methods every event shares (field values read in declaration order by `_values`)."""

    __slots__ = ()
    __event_fields__: tuple[str, ...] = ()
    _values: Any

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(self._values(self) == self._values(other))

    def __hash__(self) -> int:
        return hash(self._values(self))

    def __repr__(self) -> str:
        vals = self._values(self)
        inner = ", ".join(f"{f}={v!r}" for f, v in zip(self.__event_fields__, vals, strict=True))
        return f"{self.__class__.__qualname__}({inner})"

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # pickling (forked parser workers) and copy/deepcopy rebuild through __init__
        return (self.__class__, self._values(self))


@_event
class Event(_EventBase):
    line: int
    ts: str | None
    rank: str | None


# ---- startup lifecycle -------------------------------------------------------------------------


@_event
class ServerArgs(Event):
    args: dict[str, Any]  # snake_case keys, python values where they parse, else the text
    form: str  # "ServerArgs" (0.5.9 repr) or "dict" (0.5.23)


@_event
class FormatSeen(Event):
    """The line proves which log format (engine version family) this is, e.g. "sglang-0.5.23".
    `strong`: the proof outranks what earlier lines suggested (the arguments dump)."""

    fmt: str
    strong: bool = False


@_event
class DistInitBegin(Event):
    fmt: str  # "sglang-0.5.9" (`Init torch distributed`) or "sglang-0.5.23" (`Init parallel`)


@_event
class DeviceSeen(Event):
    """What the engine runs on, as its log proves it: "cpu" (vLLM's CPU build: `device_config=cpu`,
    its CPU worker and model runner, `CPU KV cache size`). Views show host memory, not GPU rows."""

    device: str


@_event
class DistInitEnd(Event):
    elapsed_s: float | None
    mem_usage_gb: float | None  # 0.5.9 prints it here; 0.5.23 in `Memory baseline taken`
    fmt: str


@_event
class MemoryBaseline(Event):
    mem_usage_gb: float


@_event
class MemoryImbalance(Event):
    text: str


@_event
class WeightLoadBegin(Event):
    avail_gb: float | None  # None: 0.1's `Rank 0: load weight begin.` printed no figure


@_event
class WeightLoadEnd(Event):
    elapsed_s: float | None
    avail_gb: float | None  # None where the server prints only what the weights took (vLLM)
    weights_gb: float | None  # None: an older release printed no `mem usage=`
    model_type: str | None
    dtype: str | None = None  # 0.5.9 only
    quant: str | None = None  # 0.5.23 `quant=fp8, fmt=e4m3`


@_event
class KvCacheAllocated(Event):
    tokens: int | None  # None: older releases printed only the K and V sizes
    kv_gb: float  # K + V, or the MLA `KV size`
    label: str | None  # 0.5.23 `<label> KV Cache`; None for the plain pool
    dtype: str | None  # 0.5.23 `dtype:`; None on 0.5.9
    upper_bound: bool = False  # 0.5.23 `VA upper bound` (post-capture sizing), not the final pool


@_event
class MemoryPoolEnd(Event):
    avail_gb: float


@_event
class GraphCaptureBegin(Event):
    what: str  # "cuda graph" (0.5.9), "target prefill CUDA graph", "target decode CUDA graph", "draft cuda graph"…
    avail_gb: float | None


@_event
class GraphCaptureEnd(Event):
    what: str
    elapsed_s: float | None
    graph_gb: float | None  # None: older releases printed only the time
    avail_gb: float | None


@_event
class KvPoolSized(Event):
    max_total_num_tokens: int
    prefill_chunk_tokens: int | None  # the engine's chunk of a long prompt (SGLang --chunked-prefill-size)
    prefill_tokens_cap: int | None  # tokens one prefill batch may hold
    running_requests_cap: int | None  # requests that may run at once
    context_len: int | None
    available_gpu_mem_gb: float | None
    # True where the server sizes its KV pool before capturing graphs (start-up is not over yet)
    sized_before_capture: bool = False


@_event
class HostCacheAllocating(Event):
    host_gb: float  # decimal GB per rank
    tokens: int | None = None  # 0.5.23 only
    label: str | None = None  # 0.5.23 pool label (`kv`)


@_event
class KvPoolBelowContext(Event):
    tokens: int
    context_len: int
    text: str = ""  # the engine's own words for it (the log warning), "" when it said none


@_event
class UvicornRunning(Event):
    port: int | None


@_event
class HttpAccess(Event):
    method: str
    path: str
    status: int


@_event
class ServerReady(Event):
    pass


@_event
class RankMemoryFigures(Event):
    """A rank's own memory account, printed once start-up sized its memory (GiB as printed).

    Keys that name a RankMemory field (`pre_load_avail_gb`, `weights_gb`, `kv_gb`, `graph_gb`,
    `avail_after_capture_gb`, `total_gb`) fill it; any other key is kept in `RankMemory.figures`
    under the backend's own name for its diagnosis."""

    figures: dict[str, float]


@_event
class ServingStats(Event):
    """A periodic statistics line over an interval (not one batch): throughputs in tokens/s, the
    KV cache usage as a fraction."""

    prompt_throughput: float | None
    gen_throughput: float | None
    running_req: int | None
    queue_req: int | None
    kv_usage: float | None
    preemptions: int | None = None


@_event
class PhaseEvidence(Event):
    """A line that proves what the server was doing (a start-up-only or serving-only failure
    path): the phase of a crash that nothing sharper names. "startup" or "serving"."""

    phase: str


@_event
class FailedBatch(Event):
    """The server's dump of the batch it was running when it failed: "prefill" or "decode"."""

    kind: str


# ---- serving ---------------------------------------------------------------------------------


@_event
class PrefillBatch(Event):
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    token_usage: float | None
    running_req: int | None
    queue_req: int | None
    input_throughput: float | None
    graph_replayed: bool | None  # the batch ran as a captured graph (None: the line does not say)


@_event
class DecodeBatch(Event):
    running_req: int | None
    tokens: int | None
    token_usage: float | None
    gen_throughput: float | None
    queue_req: int | None
    graph_replayed: bool | None  # the batch ran as a captured graph (None: the line does not say)


@_event
class KvRetract(Event):
    n: int  # requests retracted


@_event
class DecodeRetraction(Event):
    """`Decode out of memory happened. #retracted_reqs: …`: the KV pool was full during decode and
    SGLang retracted requests to carry on. A warning the server survives, never a crash."""

    retracted: int | None
    text: str


@_event
class EngineAdvice(Event):
    """The server's own advice about a flag, quoted as printed ("Raise --mem-fraction-static above
    0.91 (minimum viable = …)"). `flag`/`bound`: the flag and the value it names, when it names one."""

    text: str
    flag: str | None = None
    bound: float | None = None


@_event
class Unparsed(Event):
    """A line the grammar recognised whose figures did not parse or lie outside physical ranges
    (`avail mem=1.2.3 GB`, a 400-digit value): skipped as data, counted."""

    text: str


# ---- failures --------------------------------------------------------------------------------


@_event
class SchedulerException(Event):
    """A traceback header that names the failing process: `Scheduler hit an exception:`, the
    overlap worker's `TpModelWorkerClient hit an exception:`, a bare `[… TP0] Traceback (most recent
    call last):`, `Exception in ControllerSingle:` — the rank in the prefix is the one that failed."""

    text: str = "Scheduler hit an exception: Traceback (most recent call last):"


@_event
class TracebackStart(Event):
    """An unprefixed `Traceback (most recent call last):`: frames follow; whether it ended the
    server is for the exception line and what comes after to tell."""


@_event
class FlagStated(Event):
    """A line that states a flag's value in force outside the server_args dump ("Automatically
    reduce --mem-fraction-static to 0.760 because this is a multimodal model.")."""

    dest: str  # snake_case, as in server_args
    value: Any
    text: str


@_event
class PoolSize(Event):
    """`self.max_total_num_tokens=N` in a watchdog's debug dump: the KV pool's size in tokens."""

    tokens: int


@_event
class CollectiveSeq(Event):
    """A collective's sequence number (`SeqNum=1522789`, `last enqueued NCCL work: 1522789`): a
    high number proves the server had been serving (startup issues a few thousand at most)."""

    seq: int


@_event
class TracebackFrame(Event):
    """`File "…", line N, in function`. `phase` is the backend's reading of what the frame proves
    ("graph_capture", "startup", "prefill", "decode"; None when it proves nothing): the core knows
    no engine's function names."""

    function: str
    file: str | None = None
    phase: str | None = None


@_event
class ExceptionLine(Event):
    """The `SomeError: message` line that ends a Python traceback (any error, classified or not)."""

    exc_type: str
    text: str


@_event
class CudaOom(Event):
    """torch's `CUDA out of memory. Tried to allocate …` (sizes in GiB; gpu = local CUDA index, not the rank)."""

    requested_gib: float | None
    gpu: int | None
    total_gib: float | None
    free_gib: float | None
    text: str


@_event
class GraphCaptureFailed(Event):
    """`Capture cuda graph failed:` / 0.5.23 `Capture prefill CUDA graph failed:`."""

    text: str


@_event
class KvPoolExhausted(Event):
    """SGLang's own KV accounting ran out: `Prefill out of memory. Try to lower your batch size.`"""

    stage: str | None  # "prefill", "decode" or None (`Out of memory.`)
    text: str
    tokens: int | None = None  # `Try to allocate N tokens.`


@_event
class NotEnoughMemory(Event):
    """Startup could not size the KV pool: raise --mem-fraction-static."""

    setting: float | None  # the memory setting's value the message states
    minimum_viable: float | None  # 0.5.23 `minimum viable = 1 - available/pre = x`
    suggested: float | None  # 0.5.23 `Raise --mem-fraction-static above x`
    text: str


@_event
class HostCacheShortOfMemory(Event):
    """`Not enough host memory available. Requesting x GB but only have y GB free.` (decimal GB)."""

    requested_gb: float | None
    free_gb: float | None
    text: str


@_event
class HostCacheSmallerThanDevice(Event):
    """The engine refused a host cache no larger than its device KV pool (SGLang 0.5.9:
    `The host memory should be larger than the device memory with the current protocol`)."""

    text: str


@_event
class RankDead(Event):
    """A scheduler process died: `Rank i scheduler is dead`, `… died during initialization (exit code: c)`,
    `Subprocess scheduler_i (pid=…) crashed with exit code c`, `Scheduler or DataParallelController … terminated with c`."""

    rank_index: int | None
    exit_code: int | None
    how: str  # "dead", "died_during_init", "crashed", "terminated"
    text: str


@_event
class ExitCode(Event):
    """`Exit code: -9`, the line after `Rank i scheduler is dead` (0.5.9)."""

    exit_code: int


@_event
class NcclTimeout(Event):
    """`Watchdog caught collective operation timeout`, torch's `Received a dump signal due to a
    collective timeout`, a DistBackendError that says it timed out."""

    text: str


@_event
class NcclError(Event):
    """NCCL failed otherwise: `NCCL error in: …, unhandled system error`, `ncclInternalError` …"""

    text: str


@_event
class StartupError(Event):
    """The launcher refused its arguments or config before any model work: argparse's
    `launch_server.py: error: …`."""

    text: str


@_event
class EngineWatchdogFired(Event):
    """`Scheduler watchdog timeout (self.watchdog_timeout=300, …)`: a forward pass hung."""

    text: str


@_event
class WarmupFailed(Event):
    text: str


@_event
class PortInUse(Event):
    text: str


@_event
class SigquitReceived(Event):
    from_child: bool  # True: `Received sigquit from a child process` (launch phase)
    text: str


@_event
class ShutdownAsked(Event):
    """The server's own word that something asked it to stop (a signal it caught, e.g. vLLM 0.32's
    `[shutdown] API server: shutdown triggered`): a traceback it prints after is the stop's
    consequence, and the stop came from outside unless Cockpit or the operator asked."""

    text: str


@_event
class Killed(Event):
    """The shell's `Killed`: some process got SIGKILL (from whom, the line does not say)."""

    text: str


@_event
class OomKillLine(Event):
    """A kernel or job-scheduler line that proves an OOM kill (`Out of memory: Killed process N`,
    `Memory cgroup out of memory: …`, `invoked oom-killer`, Slurm's `Detected N oom_kill event`)."""

    text: str


@_event
class ProcessExited(Event):
    """Emitted by the supervisor when the server's pid dies (no log line: line=0). `stopped`: True
    when Cockpit or the operator stopped it, False when nobody did (an exit 0/143 is then an
    unexpected end, not a stop), None when the caller cannot tell (the exit code decides)."""

    exit_code: int | None
    stopped: bool | None = None
    # what the host program saw of memory at the end (the cgroup's oom_kill counter rising,
    # memory at its limit just before): the evidence an OOM kill needs; None when nothing
    oom_evidence: str | None = None


@_event
class HangSeen(Event):
    """Emitted by the supervisor's hang watch (no log line: line=0): work is outstanding and
    nothing moved for the window (cockpit/core/hang.py); `evidence` says what was seen."""

    evidence: dict[str, Any]


@_event
class HangCleared(Event):
    """Emitted by the supervisor's hang watch: tokens move again (or the probe was answered)."""


CRASH_EVENTS: tuple[type[Event], ...] = (
    CudaOom,
    GraphCaptureFailed,
    KvPoolExhausted,
    NotEnoughMemory,
    HostCacheShortOfMemory,
    RankDead,
    NcclTimeout,
    NcclError,
    StartupError,
    EngineWatchdogFired,
    WarmupFailed,
    PortInUse,
    SigquitReceived,
    Killed,
    OomKillLine,
)
