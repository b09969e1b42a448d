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

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    line: int
    ts: str | None
    rank: str | None


# ---- startup lifecycle -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerArgs(Event):
    args: dict[str, Any]  # snake_case keys, python values where they parse, else the text
    form: str  # "ServerArgs" (0.5.9 repr) or "dict" (0.5.23)


@dataclass(frozen=True, slots=True)
class DistInitBegin(Event):
    fmt: str  # "sglang-0.5.9" (`Init torch distributed`) or "sglang-0.5.23" (`Init parallel`)


@dataclass(frozen=True, slots=True)
class DistInitEnd(Event):
    elapsed_s: float | None
    mem_usage_gb: float | None  # 0.5.9 prints it here; 0.5.23 in `Memory baseline taken`
    fmt: str


@dataclass(frozen=True, slots=True)
class MemoryBaseline(Event):
    mem_usage_gb: float


@dataclass(frozen=True, slots=True)
class MemoryImbalance(Event):
    text: str


@dataclass(frozen=True, slots=True)
class WeightLoadBegin(Event):
    avail_gb: float


@dataclass(frozen=True, slots=True)
class WeightLoadEnd(Event):
    elapsed_s: float | None
    avail_gb: float
    weights_gb: float
    model_type: str | None
    dtype: str | None = None  # 0.5.9 only
    quant: str | None = None  # 0.5.23 `quant=fp8, fmt=e4m3`


@dataclass(frozen=True, slots=True)
class KvCacheAllocated(Event):
    tokens: int
    kv_gb: float  # K + V, or the MLA `KV size`
    label: str | None  # 0.5.23 `<label> KV Cache`; None for the plain pool
    dtype: str | None  # 0.5.23 `dtype:`; None on 0.5.9
    upper_bound: bool = False  # 0.5.23 `VA upper bound` (post-capture sizing), not the final pool


@dataclass(frozen=True, slots=True)
class MemoryPoolEnd(Event):
    avail_gb: float


@dataclass(frozen=True, slots=True)
class GraphCaptureBegin(Event):
    what: str  # "cuda graph" (0.5.9), "target prefill CUDA graph", "target decode CUDA graph", "draft cuda graph"…
    avail_gb: float | None


@dataclass(frozen=True, slots=True)
class GraphCaptureEnd(Event):
    what: str
    elapsed_s: float | None
    graph_gb: float
    avail_gb: float


@dataclass(frozen=True, slots=True)
class MaxTotalTokens(Event):
    max_total_num_tokens: int
    chunked_prefill_size: int | None
    max_prefill_tokens: int | None
    max_running_requests: int | None
    context_len: int | None
    available_gpu_mem_gb: float | None


@dataclass(frozen=True, slots=True)
class HiCacheAllocating(Event):
    host_gb: float  # decimal GB per rank
    tokens: int | None = None  # 0.5.23 only
    label: str | None = None  # 0.5.23 pool label (`kv`)


@dataclass(frozen=True, slots=True)
class KvPoolBelowContext(Event):
    tokens: int
    context_len: int


@dataclass(frozen=True, slots=True)
class UvicornRunning(Event):
    port: int | None


@dataclass(frozen=True, slots=True)
class HttpAccess(Event):
    method: str
    path: str
    status: int


@dataclass(frozen=True, slots=True)
class ServerReady(Event):
    pass


# ---- serving ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrefillBatch(Event):
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    token_usage: float | None
    running_req: int | None
    queue_req: int | None
    input_throughput: float | None
    cuda_graph: bool | None


@dataclass(frozen=True, slots=True)
class DecodeBatch(Event):
    running_req: int | None
    tokens: int | None
    token_usage: float | None
    gen_throughput: float | None
    queue_req: int | None
    cuda_graph: bool | None


@dataclass(frozen=True, slots=True)
class KvRetract(Event):
    n: int  # requests retracted


# ---- failures --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulerException(Event):
    """`Scheduler hit an exception:` — the rank in the prefix is the one that failed."""


@dataclass(frozen=True, slots=True)
class TracebackFrame(Event):
    function: str
    file: str | None = None


@dataclass(frozen=True, slots=True)
class ExceptionLine(Event):
    """The `SomeError: message` line that ends a Python traceback (any error, classified or not)."""

    exc_type: str
    text: str


@dataclass(frozen=True, slots=True)
class CudaOom(Event):
    """torch's `CUDA out of memory. Tried to allocate …` (sizes in GiB; gpu = local CUDA index, not the rank)."""

    requested_gib: float | None
    gpu: int | None
    total_gib: float | None
    free_gib: float | None
    text: str


@dataclass(frozen=True, slots=True)
class GraphCaptureFailed(Event):
    """`Capture cuda graph failed:` / 0.5.23 `Capture prefill CUDA graph failed:`."""

    text: str


@dataclass(frozen=True, slots=True)
class KvPoolExhausted(Event):
    """SGLang's own KV accounting ran out: `Prefill out of memory. Try to lower your batch size.`"""

    stage: str | None  # "prefill", "decode" or None (`Out of memory.`)
    text: str
    tokens: int | None = None  # `Try to allocate N tokens.`


@dataclass(frozen=True, slots=True)
class NotEnoughMemory(Event):
    """Startup could not size the KV pool: raise --mem-fraction-static."""

    mem_fraction_static: float | None
    minimum_viable: float | None  # 0.5.23 `minimum viable = 1 - available/pre = x`
    suggested: float | None  # 0.5.23 `Raise --mem-fraction-static above x`
    text: str


@dataclass(frozen=True, slots=True)
class HiCacheHostMemory(Event):
    """`Not enough host memory available. Requesting x GB but only have y GB free.` (decimal GB)."""

    requested_gb: float | None
    free_gb: float | None
    text: str


@dataclass(frozen=True, slots=True)
class RankDead(Event):
    """A scheduler process died: `Rank i scheduler is dead`, `… died during initialization (exit code: c)`,
    `Subprocess scheduler_i (pid=…) crashed with exit code c`, `Scheduler or DataParallelController … terminated with c`."""

    rank_index: int | None
    exit_code: int | None
    how: str  # "dead", "died_during_init", "crashed", "terminated"
    text: str


@dataclass(frozen=True, slots=True)
class ExitCode(Event):
    """`Exit code: -9`, the line after `Rank i scheduler is dead` (0.5.9)."""

    exit_code: int


@dataclass(frozen=True, slots=True)
class NcclTimeout(Event):
    """`Watchdog caught collective operation timeout`, `DistBackendError`, NCCL errors."""

    text: str


@dataclass(frozen=True, slots=True)
class SchedulerWatchdogTimeout(Event):
    """`Scheduler watchdog timeout (self.watchdog_timeout=300, …)`: a forward pass hung."""

    text: str


@dataclass(frozen=True, slots=True)
class WarmupFailed(Event):
    text: str


@dataclass(frozen=True, slots=True)
class PortInUse(Event):
    text: str


@dataclass(frozen=True, slots=True)
class SigquitReceived(Event):
    from_child: bool  # True: `Received sigquit from a child process` (launch phase)
    text: str


@dataclass(frozen=True, slots=True)
class Killed(Event):
    """The shell's `Killed` (or the kernel's `Out of memory: Killed process`)."""

    text: str


@dataclass(frozen=True, slots=True)
class ProcessExited(Event):
    """Emitted by the supervisor when the server's pid dies (no log line: line=0)."""

    exit_code: int | None


CRASH_EVENTS: tuple[type[Event], ...] = (
    CudaOom,
    GraphCaptureFailed,
    KvPoolExhausted,
    NotEnoughMemory,
    HiCacheHostMemory,
    RankDead,
    NcclTimeout,
    SchedulerWatchdogTimeout,
    WarmupFailed,
    PortInUse,
    SigquitReceived,
    Killed,
)
