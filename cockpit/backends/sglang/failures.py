"""Failure signatures: the lines that say a server died, and why, in whatever form they come.

They are looked for in any line, record or not: tracebacks, torch's C++ log lines, NCCL and the
shell print no SGLang prefix. What counts (the decision list in docs/DECISIONS.md, "Diagnosis
grammar"):

- headers that name the failing process: `Scheduler hit an exception`, `TpModelWorkerClient hit an
  exception`, a record that is only `Traceback (most recent call last):`, `Exception in
  ControllerSingle:` / `Exception in ModelTpServer:` / `Exception in thread …` (older releases);
- out of memory in every accelerator's words (`CUDA out of memory`, `CUDA error: out of memory`,
  NPU / HIP / MUSA / XPU, `OutOfMemoryError`), kept apart from SGLang's own KV-pool messages;
- NCCL: a collective that timed out (torch's watchdog, its dump signal, a DistBackendError that says
  so) apart from NCCL failing otherwise (`unhandled system error` at init, `ncclInternalError`);
- the process dying without Python: dead ranks, exit codes, the shell's `Killed`.

A source line inside a traceback (`raise RuntimeError(f"NCCL error: …")`) names an error without
being one: the scanner marks the lines that follow a frame, and only an exception line among them
is read for signatures.
"""

from __future__ import annotations

from collections.abc import Callable

from cockpit.backends import peers
from cockpit.backends.framephase import frame_phase as map_frame_phase
from cockpit.backends.sglang import barelines
from cockpit.backends.sglang.hicache import HOST_POOL_ASSERTION
from cockpit.backends.sglang.textutil import count, host_gb_pair, lazy, sized_gib
from cockpit.core import events as ev
from cockpit.core.crashstory import is_oom_kill_line
from cockpit.core.events import Event

# the next line's text (None at the end of the input); call it while classifying the line it came
# with, never later (the live path's reads the loop's index, not a copy of it)
Peek = Callable[[], str | None]

_SIZE = r"([\d.]+) ?([KMGT]i?B|B)"
RX_FRAME = lazy(r'^\s*File "([^"]*)", line \d+, in (\S+)')
# `torch.OutOfMemoryError: …`, and the bare `Exception: …` / `Error: …` too
RX_EXC_LINE = lazy(r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit|Interrupt|Failure)): ?(.*)$")
_RX_OOM = lazy(
    r"(?:CUDA|NPU|HIP|MUSA|XPU|GPU|[Dd]evice) out of memory|CUDA error: out of memory|OutOfMemoryError"
    r"|hipErrorOutOfMemory|cudaErrorMemoryAllocation"
)
_RX_OOM_REQ = lazy(r"Tried to allocate " + _SIZE)
_RX_OOM_GPU = lazy(r"(?:GPU|NPU|HIP|MUSA|XPU) (\d+)")
_RX_OOM_TOTAL = lazy(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
# a number starts only where one starts, and is bounded: linear on a line of digits or dots
_SIZE_AT = r"(?<![\d.])([\d.]{1,32}) ?([KMGT]i?B|B)"
_RX_OOM_TOTAL_OLD = lazy(_SIZE_AT + r" total capacity; .{0,200}?" + _SIZE_AT + r" free")
_RX_CAPTURE_FAILED = lazy(r"Capture (?:\S{1,64} ){0,8}?(?:cuda|CUDA|npu|cpu|musa) graph failed")
_RX_NEM_MFS = lazy(r"(?:--mem-fraction-static[= ]|mem_fraction_static=)(\d*\.\d+|[01])\b")
_RX_NEM_23 = lazy(
    r"Raise --mem-fraction-static above ([\d.]+) \(minimum viable = 1 - available/pre = ([\d.]+)\)"
)
_RX_HOST_MEM = lazy(r"Requesting ([\d.]+) GB but only have ([\d.]+) GB free")
_RX_EXIT_CODE = lazy(r"^Exit code: (-?\d+)")
_RX_CHILD_FAILED = lazy(r"Child process unexpectedly failed with an exit code (-?\d+)")
_RX_TRY_ALLOC = lazy(r"Try to allocate (\d+) tokens")
_RX_SEQ = lazy(r"SeqNum=(\d+)|work sequence id:? (\d+)|last enqueued (?:NCCL )?work: (\d+)")
# `Exception in ModelTpServer:`, 0.3's `Exception in run_tp_server:`, `Exception in thread X:`
_RX_EXC_HEADER = lazy(r"^(?:Exception in (?:[\w.]{1,64}|thread [^:]*+)|Process [\w:-]{1,200})\s*+:\s*+$")
# argparse's `PROG: error: …`; 0.5.23's prog is `sglang serve` even under `python -m sglang.launch_server`
_RX_ARGPARSE = lazy(r"^(?:\S{0,200}?(?:launch_server|sglang)\S{0,200}?(?: serve)?|\S{1,200}?\.py): error: ")
# the interpreter itself refusing to start the server: `python3: No module named sglang`,
# `python3: Error while finding module specification for 'sglang.launch_server' (ModuleNotFoundError: …)`
_RX_INTERPRETER = lazy(r"^\S*python[\d.]*: (?:No module named |Error while finding module specification for "
                       r"|can't open file )")
# an import that failed: the first line of a log that says so was printed before any server code ran
_IMPORT_EXC = ("ModuleNotFoundError", "ImportError")
_RX_VLLM = lazy(
    r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\]"
    r"|\((?:EngineCore|APIServer|VllmWorker|RayWorkerVllm|Worker_\w+)\w*[^)]*pid=\d+\)|/vllm/|\bvLLM\b"
)
# what a line must hold for _RX_VLLM to match it (asked first: most lines hold none, and a log
# without one never compiles the pattern, ~0.2 ms)
_VLLM_LEVELS = ("INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL ")
# a call in a traceback's source line that names a phase (the excerpt cut before its own frame)
_PHASE_FUNCS = ("forward_extend", "forward_decode", "forward_prefill_batch", "forward_decode_batch",
                "capture_one_batch_size", "capture", "init_memory_pool", "init_cuda_graphs",
                "Scheduler", "ModelRunner", "TpModelWorker", "TpWorkerClass", "CudaGraphRunner", "ModelRpcClient")
_RX_PHASE_CALL = lazy(r"\b(" + "|".join(_PHASE_FUNCS) + r")\(")
_PHASE_CALLS = tuple(f + "(" for f in _PHASE_FUNCS)  # one of them is in every line the pattern matches
_CALL_PHASE = {"Scheduler": "startup", "ModelRunner": "startup", "TpModelWorker": "startup",
               "TpWorkerClass": "startup", "ModelRpcClient": "startup", "CudaGraphRunner": "graph_capture"}
# SGLang telling the operator which flag to move ("… try to increase --mamba-full-memory-ratio.")
_RX_ADVICE = lazy(r"(?:[Tt]ry to |[Pp]lease |[Cc]onsider )?(?:increas|decreas|rais|lower|reduc|enlarg|shrink)\w{0,12} "
                  r"(?:the )?(--[a-z][\w-]{0,80})[^.;]{0,200}")
_RX_TORCH_LOG = lazy(r"^\[rank\d+\]:\[[EWIF]\d{4} ")
# torch / CUDA saying the failing call ran while a CUDA stream was capturing a graph
# (`Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture`, `operation not permitted
# when stream is capturing`, `cudaStreamCaptureStatusActive`, `cudaErrorStreamCaptureInvalidated`)
_RX_CAPTURING = lazy(r"during (?:CUDA )?graph capture|stream is capturing|StreamCaptureStatusActive"
                     r"|StreamCapture(?:Unsupported|Invalidated)")

# failures only SGLang words this way (its KV / request pools, its memory budget, its host cache, its
# graph runner): a line saying one is SGLang's own, where a device OOM or NCCL's words are any server's
_OWN_WORDS = (ev.KvPoolExhausted, ev.NotEnoughMemory, ev.HostCacheShortOfMemory, ev.GraphCaptureFailed)

# Recognition of a line (SGLangLogParser.lines_recognised sums them): SGLang's own text, structure any Python
# / torch server prints (tracebacks, NCCL), or another engine's log.
NONE, GENERIC, STRONG, FOREIGN = 0, 1, 2, 3


def frame_phase(file: str, func: str) -> str | None:
    """The phase a traceback frame proves, from SGLang's module and function names.

    Graph capture: the graph runner's capture or constructor. Startup: scheduler / worker / model
    runner / cache constructors, model loading, memory-pool and distributed init. Prefill / decode:
    the forward and result paths of each. The event loop proves nothing: it also runs the warmup
    request before the server says ready. Anything else proves nothing.
    """
    lf = file.lower()
    if "graph_runner" in lf and ("capture" in func or func == "__init__"):
        return "graph_capture"
    if (func.startswith("capture") and "graph" in lf) or func in ("init_cuda_graphs", "init_device_graphs"):
        return "graph_capture"
    if func in _STARTUP_FUNCS or func.startswith(("init_memory_pool", "init_torch_distributed")):
        return "startup"
    if func == "__init__" and ("sglang" in lf or "sgl" in lf) and any(k in lf for k in _STARTUP_FILES):
        return "startup"
    if func in _PREFILL_FUNCS or (func.startswith("event_loop") and "prefill" in func):
        return "prefill"  # a disaggregated prefill server's loop runs prefill only
    if func in _DECODE_FUNCS or (func.startswith("event_loop") and "decode" in func):
        return "decode"
    # the engine's own names, release by release (data/frame_phases.json): the batch loop, the loader,
    # the profile, the warm-up … (a batch-loop frame is the least telling: any sharper frame wins)
    return map_frame_phase("sglang", file, func)


_STARTUP_FUNCS = frozenset((
    "init_cache_with_memory_pool", "load_model", "load_weights_and_postprocess", "initialize",
    "init_distributed_environment", "initialize_model_parallel", "init_model_parallel_group",
    "ncclCommInitRank", "init_weights_update_group", "launch_server", "_launch_subprocesses",
    "_set_envs_and_config", "check_server_args", "__post_init__",
))
# a scheduler / worker process's entry function: an exception raised in it, not below it, happened
# before the process reached its loop
_ENTRY_FUNCS = frozenset(("run_scheduler_process", "run_tp_server", "start_controller_process",
                          "run_data_parallel_controller_process", "run_detokenizer_process"))
_STARTUP_FILES = ("managers/scheduler", "tp_worker", "model_runner", "mem_cache/", "memory_pool",
                  "parallel_state", "model_loader", "hiradix", "radix_cache")
_PREFILL_FUNCS = frozenset((
    "forward_extend", "forward_prefill_batch", "process_batch_result_prefill", "get_new_batch_prefill",
    "add_one_req", "alloc_for_extend", "prepare_for_extend", "_get_new_batch_prefill_raw",
))
_DECODE_FUNCS = frozenset((
    "forward_decode", "forward_decode_batch", "process_batch_result_decode", "prepare_for_decode",
    "alloc_for_decode", "update_running_batch", "retract_decode",
))


def is_oom(text: str) -> bool:
    return _RX_OOM.search(text) is not None


def cuda_oom(line: int, ts: str | None, rank: str | None, text: str) -> ev.CudaOom:
    """An accelerator's out-of-memory text, with torch's figures where it printed them."""
    req = _RX_OOM_REQ.search(text)
    gpu = _RX_OOM_GPU.search(text)
    tot = _RX_OOM_TOTAL.search(text) or _RX_OOM_TOTAL_OLD.search(text)
    total = free = None
    if tot:
        total, free = sized_gib(tot.group(1), tot.group(2)), sized_gib(tot.group(3), tot.group(4))
    gpu_idx = int(gpu.group(1)) if gpu and len(gpu.group(1)) < 6 else None
    return ev.CudaOom(
        line, ts, rank,
        requested_gib=sized_gib(req.group(1), req.group(2)) if req else None,
        gpu=gpu_idx,
        total_gib=total,
        free_gib=free,
        text=text,
    )


def kv_exhausted(line: int, ts: str | None, rank: str | None, msg: str, stage: str | None, peek: Peek) -> ev.KvPoolExhausted:
    m = _RX_TRY_ALLOC.search(msg)
    if m is None:
        nxt = peek()
        if nxt is not None:
            m = _RX_TRY_ALLOC.search(nxt)
    return ev.KvPoolExhausted(line, ts, rank, stage, msg, count(m.group(1)) if m else None)


def not_enough_memory(line: int, ts: str | None, rank: str | None, msg: str, out: list[Event]) -> None:
    """`Not enough memory … increase --mem-fraction-static` (0.5.9) / 0.5.23 `Loaded weights leave no
    GPU memory for the KV cache under --mem-fraction-static=0.88. Raise … above X (minimum viable = Y)`.
    The value in force is read from the line itself; SGLang's own bound is quoted as its advice."""
    mm = _RX_NEM_MFS.search(msg)
    mfs = float(mm.group(1)) if mm else None
    if mfs is not None and not 0.0 < mfs <= 1.0:
        raise ValueError(f"--mem-fraction-static {mfs} outside 0..1")
    m23 = _RX_NEM_23.search(msg)
    suggested = minimum = None
    if m23:
        suggested, minimum = float(m23.group(1)), float(m23.group(2))
        if not (0.0 <= suggested <= 1.0 and 0.0 <= minimum <= 1.0):
            raise ValueError("SGLang's --mem-fraction-static bound outside 0..1")
    out.append(ev.NotEnoughMemory(line, ts, rank, mfs, minimum, suggested, msg))
    if m23:
        out.append(ev.EngineAdvice(line, ts, rank, m23.group(0), "--mem-fraction-static", suggested))
    elif "increase --mem-fraction-static" in msg:
        out.append(ev.EngineAdvice(line, ts, rank, "Please try to increase --mem-fraction-static.",
                                   "--mem-fraction-static", None))


def classify_failure(line: int, ts: str | None, rank: str | None, msg: str, out: list[Event], peek: Peek,
                     last_frame: str | None = None) -> int:
    """Failure signatures in one line (record or not); returns the line's recognition class.
    `last_frame`: the function of the traceback frame just above, when the line follows one."""
    in_traceback = last_frame is not None
    recog = NONE
    if ts is None:
        s = msg.lstrip()
        if s.startswith("File "):
            m = RX_FRAME.match(msg)
            if m:
                file, func = m.group(1), m.group(2)
                out.append(ev.TracebackFrame(line, ts, rank, func, file, frame_phase(file, func)))
                return STRONG if "sglang" in file else (FOREIGN if "/vllm/" in file else GENERIC)
            return barelines.classify(line, rank, s, out) or NONE  # faulthandler's frames
        if s.startswith("Capturing batches ("):
            return barelines.classify(line, rank, s, out) or NONE
        if s.startswith("Traceback (most recent call last)"):
            out.append(ev.TracebackStart(line, ts, rank))
            return GENERIC
        if s.startswith("Exit code:"):
            m = _RX_EXIT_CODE.match(s)
            if m and len(m.group(1)) < 6:
                out.append(ev.ExitCode(line, ts, rank, int(m.group(1))))
                return GENERIC
            return NONE
        if s.startswith(("Exception in ", "Process ")) and _RX_EXC_HEADER.match(s):
            out.append(ev.SchedulerException(line, ts, rank, s))
            return STRONG if ("Controller" in s or "ModelTpServer" in s) else GENERIC
        if "init state: Traceback" in s:  # 0.1's `router init state: Traceback …`
            out.append(ev.SchedulerException(line, ts, rank, s))
            return STRONG
        exc = RX_EXC_LINE.match(msg)
        if in_traceback and exc is None:
            # source text quoted by the traceback: it names errors without being one, but a call
            # in it can name the phase when the excerpt stops before the callee's own frame
            call = _RX_PHASE_CALL.search(msg) if "(" in msg and any(c in msg for c in _PHASE_CALLS) else None
            if call:
                func = call.group(1)
                phase = _CALL_PHASE.get(func) or frame_phase("sglang/graph_runner", func)
                out.append(ev.TracebackFrame(line, ts, rank, func, None, phase))
            return NONE
        if (msg.startswith(_VLLM_LEVELS) or "pid=" in msg or "/vllm/" in msg or "vLLM" in msg) and _RX_VLLM.search(msg):
            return FOREIGN
        if _RX_ARGPARSE.match(s) or _RX_INTERPRETER.match(s):
            out.append(ev.StartupError(line, ts, rank, s))
            # argparse names its program: `sglang serve: error:` / `launch_server.py: error:` is
            # SGLang refusing its own flags (0.5.23 prints no stamped line before it), any other
            # program's is only a Python program's
            prog = s.partition(": error: ")[0] if ": error: " in s else ""
            return STRONG if ("sglang" in prog or "launch_server" in prog) else GENERIC
        if line == 1 and exc is not None and exc.group(1).rpartition(".")[2] in _IMPORT_EXC:
            out.append(ev.StartupError(line, ts, rank, s))
            return GENERIC
    else:
        exc = None
    n_before = len(out)
    specific = _signature(line, ts, rank, msg, peek, out)
    if specific is not None:
        out.append(specific)
        # prose that quotes an error (a README: "misses `CUDA out of memory`") is not a log line:
        # only a line shaped like the failure's own output says this is a server's log
        if ts is not None or exc is not None or _error_shaped(msg):
            recog = GENERIC
    # SGLang's own failure words (its pools, its host cache, its capture), not torch's
    own = any(type(e) in _OWN_WORDS for e in out[n_before:]) and (ts is not None or exc is not None)
    if "--" in msg and (exc is not None or ts is not None):
        adv = _RX_ADVICE.search(msg)
        if adv and not any(isinstance(e, ev.EngineAdvice) for e in out):
            out.append(ev.EngineAdvice(line, ts, rank, adv.group(0).strip(), adv.group(1), None))
    if exc is not None:
        if last_frame in _ENTRY_FUNCS:
            # raised by a process's entry function itself, before its loop ran: it was starting
            out.append(ev.TracebackFrame(line, ts, rank, last_frame, None, "startup"))
        elif last_frame == "<module>":
            # raised by module-level code (an import, a script's top level): the process was still
            # importing, a start-up fact that any sharper evidence in the log overrides
            out.append(ev.PhaseEvidence(line, ts, rank, "startup"))
        if _RX_CAPTURING.search(exc.group(2)):
            # the error's own words place it in a graph capture: the capture failed, and the frames
            # of a chained trace after it (the scheduler's start-up) do not make it a start-up failure
            if specific is None:
                out.append(ev.GraphCaptureFailed(line, ts, rank, s.strip()))
            out.append(ev.TracebackFrame(line, ts, rank, "cuda_graph_capture", None, "graph_capture"))
        out.append(ev.ExceptionLine(line, ts, rank, exc.group(1), exc.group(2)))
        recog = GENERIC
    if ts is None and ("SeqNum=" in msg or "sequence id" in msg or "enqueued" in msg):
        sm = _RX_SEQ.search(msg)
        if sm:
            seq = sm.group(1) or sm.group(2) or sm.group(3)
            if len(seq) <= 13:
                out.append(ev.CollectiveSeq(line, ts, rank, int(seq)))
    if ts is None and recog == NONE and (_RX_TORCH_LOG.match(msg) or " NCCL INFO " in msg or " NCCL WARN " in msg):
        recog = GENERIC  # torch's C++ log and NCCL's debug lines: any distributed server prints them
    return STRONG if own else recog


def _error_shaped(msg: str) -> bool:
    s = msg.strip()
    return (s == "Killed" or "Killed process" in s or "Tried to allocate" in s or "what():" in s
            or "terminate called" in s or "[ERROR]" in s or _RX_TORCH_LOG.match(s) is not None
            or "ProcessGroupNCCL" in s)


def _signature(line: int, ts: str | None, rank: str | None, msg: str, peek: Peek, out: list[Event]) -> Event | None:
    """The one failure a line states, most specific first."""
    if is_oom_kill_line(msg):  # before the CUDA OOM test: the kernel's `Out of memory: Killed process`
        return ev.OomKillLine(line, ts, rank, msg.strip())
    if ts is not None and msg.startswith("Exception in ") and _RX_EXC_HEADER.match(msg):
        return ev.SchedulerException(line, ts, rank, msg)  # 0.3's `[… TP4] Exception in run_tp_server:`
    if "raph failed" in msg and _RX_CAPTURE_FAILED.search(msg):
        return ev.GraphCaptureFailed(line, ts, rank, msg)
    if "ut of memory. Try to lower your batch size" in msg:
        stage = "prefill" if "Prefill out of memory" in msg else "decode" if "Decode out of memory" in msg else None
        return kv_exhausted(line, ts, rank, msg, stage, peek)
    if "Decode out of memory happened" in msg:
        return None  # a retraction (the record grammar reads it); survivable, never a crash
    if "Not enough space for" in msg or "out of memory for req_to_token" in msg.lower() \
            or "alloc_req_slots runs out of memory" in msg or "smaller number for `--max-running-requests`" in msg \
            or " draft OOM when allocating" in msg:
        # SGLang's own request-slot / mamba-state / draft pools ran out: its accounting, not the device's
        return ev.KvPoolExhausted(line, ts, rank, None, msg, None)
    if "Out of memory even after retracting" in msg:  # 0.5.7–0.5.9: retraction could not free enough
        return kv_exhausted(line, ts, rank, msg, "decode", peek)
    if ("ut of memory" in msg or "OutOfMemory" in msg or "MemoryAllocation" in msg) and is_oom(msg):
        return cuda_oom(line, ts, rank, msg)
    if "Not enough memory. Please try to increase --mem-fraction-static" in msg \
            or "Loaded weights leave no GPU memory" in msg or "leaves no room for the full KV pool" in msg:
        not_enough_memory(line, ts, rank, msg, out)
        return None
    if "Not enough host memory" in msg or "host memory exhausted" in msg:
        # `… available`, and 0.5.11+'s per pool: `… for V4 paged pool X. Requesting A GB but only have B GB free.`
        hm = _RX_HOST_MEM.search(msg)
        req, free = host_gb_pair(hm.group(1), hm.group(2)) if hm else (None, None)
        return ev.HostCacheShortOfMemory(line, ts, rank, req, free, msg)
    if "No host memory is left for HiCache" in msg:
        return ev.HostCacheShortOfMemory(line, ts, rank, None, None, msg)
    if HOST_POOL_ASSERTION in msg:  # 0.5.9's assertion: the host pool no larger than the device pool
        return ev.HostCacheSmallerThanDevice(line, ts, rank, msg)
    if "by peer" in msg and ("gloo" in msg or "pair.cc" in msg or "remote worker" in msg):
        peer = peers.peer_closed(line, ts, rank, msg)  # a peer died: the address names its node
        if peer is not None:
            return peer
    nccl = _nccl(line, ts, rank, msg)
    if nccl is not None:
        return nccl
    if "warmup error" in msg or "Initialization failed" in msg:
        return ev.WarmupFailed(line, ts, rank, msg)
    if "ddress already in use" in msg or "[Errno 98]" in msg or msg.endswith("No free port available."):
        return ev.PortInUse(line, ts, rank, msg)
    if "Child process unexpectedly failed" in msg:
        m = _RX_CHILD_FAILED.search(msg)
        code = int(m.group(1)) if m and len(m.group(1)) < 6 else None
        return ev.RankDead(line, ts, rank, None, code, "child_failed", msg)
    if ts is None and "Killed" in msg and (msg.strip() == "Killed" or " Killed " in msg):
        return ev.Killed(line, ts, rank, msg.strip())
    return None


_NCCL_TIMEOUT = ("Watchdog caught collective operation timeout", "due to a collective timeout",
                 "collective operation timeout", "failure detected by watchdog at work sequence id")


def _nccl(line: int, ts: str | None, rank: str | None, msg: str) -> Event | None:
    if any(k in msg for k in _NCCL_TIMEOUT):
        return ev.NcclTimeout(line, ts, rank, msg)
    if "DistBackendError" in msg or "NCCL error" in msg or "ncclInternalError" in msg \
            or "ncclSystemError" in msg or "ncclUnhandledCudaError" in msg or "ncclRemoteError" in msg:
        low = msg.lower()
        if "timeout" in low or "timed out" in low:
            return ev.NcclTimeout(line, ts, rank, msg)
        return ev.NcclError(line, ts, rank, msg)
    return None
