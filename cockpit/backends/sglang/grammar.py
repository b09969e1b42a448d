"""SGLang's log grammar: one line's text -> the events it states.

`split_record` reads the record prefix (`[timestamp DP1 TP3] msg`); `classify` turns a cleaned line
into events: the record grammar dispatches on the message's first character (a dict-free switch on
the lines that matter), and the failure signatures are looked for in any line, record or not
(traceback text has no prefix). The streaming scanner (`scanner.py`) decides which lines reach
`classify`; the bulk reader (`logparse.py`) feeds files to the scanner.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from cockpit.core import events as ev
from cockpit.core.events import Event


class _lazy:  # lower case: it reads like re.compile where the patterns are defined
    """A regex compiled on first use: most patterns only meet the rare lines with news, and
    compiling ~35 of them at import would cost `cockpit diagnose` ~10 ms before any work."""

    __slots__ = ("_rx", "_src")

    def __init__(self, src: str) -> None:
        self._src = src
        self._rx: re.Pattern[str] | None = None

    def _get(self) -> re.Pattern[str]:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self._src)
        return rx

    def match(self, text: str) -> re.Match[str] | None:
        return self._get().match(text)

    def search(self, text: str) -> re.Match[str] | None:
        return self._get().search(text)

# ---- record prefix ---------------------------------------------------------------------------


def split_record(line: str) -> tuple[str | None, str | None, str]:
    """`[2026-02-24 11:55:44.123 DP1 TP3] msg` -> ("2026-02-24 11:55:44.123", "DP1 TP3", "msg").

    A line that is not a record start (traceback text, tqdm, NCCL, `Killed`) comes back as
    (None, None, line). Rank tokens are kept as printed, unknown ones included.
    """
    if len(line) < 21 or line[0] != "[" or line[5] != "-" or line[11] != " " or line[14] != ":":
        return None, None, line
    if not (line[1:5].isdigit() and line[18:20].isdigit()):
        return None, None, line
    pos = 20
    if line[20] == ".":
        pos = 21
        while pos < len(line) and line[pos].isdigit():
            pos += 1
    close = line.find("]", pos)
    if close == -1:
        return None, None, line
    prefix = line[pos:close]
    if "[" in prefix:  # a token like ` encode_dp_worker[0]` holds its own brackets
        close = line.find("]", close + 1)
        if close == -1:
            return None, None, line
        prefix = line[pos:close]
    if prefix and prefix[0] != " ":
        return None, None, line
    ts = line[1:pos]
    rank = prefix.strip() or None
    msg = line[close + 2 :] if line[close + 1 : close + 2] == " " else line[close + 1 :]
    return ts, rank, msg


# ---- message grammar (applied to one line's message) --------------------------------------------

_F = r"([\d.]+)"
_RX_LOAD_BEGIN = _lazy(r"^Load weight begin\. avail mem=" + _F + r" GB")
_RX_LOAD_END_MEM = _lazy(r"avail mem=" + _F + r" GB, mem usage=" + _F + r" GB")
_RX_ELAPSED = _lazy(r"(?:Time elapsed: |elapsed=)" + _F + r" s")
_RX_TYPE = _lazy(r"type=([^,]+)")
_RX_DTYPE = _lazy(r"dtype=([^,]+)")
_RX_QUANT = _lazy(r"(quant=[^,]+(?:, fmt=[^,]+)?)")
_RX_KV = _lazy(
    r"^(?:(?P<label>.+?) )?KV Cache (?P<ub>is allocated|VA upper bound)\. (?:dtype: (?P<dtype>[^,]+), )?"
    r"#tokens: (?P<tokens>\d+), (?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
_RX_POST_CAPTURE_KV = _lazy(
    r"^Post-capture KV sizing: KV cache allocated\. dtype: (?P<dtype>[^,]+), #tokens: (?P<tokens>\d+), "
    r"KV size: (?P<kv>[\d.]+) GB"
)
_RX_POOL_END = _lazy(r"^Memory pool end\. avail mem=" + _F + r" GB")
_RX_AVAIL = _lazy(r"avail mem=" + _F + r" GB")
_RX_MEM_USAGE = _lazy(r"mem usage=" + _F + r" GB")
_RX_CAPTURE = _lazy(r"^Capture (?P<what>.+?) (?P<step>begin|end)\. ")
_RX_CAPTURE_FAILED = _lazy(r"Capture (?:\S+ )*?(?:cuda|CUDA|npu|cpu|musa) graph failed")
_RX_ALLOC_09 = _lazy(r"^Allocating " + _F + r" GB host memory for hierarchical KV cache")
_RX_ALLOC_23 = _lazy(r"^Allocating (\S+) hierarchical KV host pool: (\d+) tokens, " + _F + r" GB host memory")
_RX_BELOW_CTX = _lazy(r"^KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
_RX_UVICORN = _lazy(r"Uvicorn running on \S*?:(\d+)")
_RX_ACCESS = _lazy(r'^(?:INFO|WARNING|ERROR):\s+\S+ - "([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
_RX_RETRACT = _lazy(r"#retracted_reqs: (\d+)")
_RX_DIST_END = _lazy(r"elapsed=" + _F + r" s(?:, mem usage=" + _F + r" GB)?")
_RX_FRAME = _lazy(r'^\s*File "([^"]*)", line \d+, in (\S+)')
_RX_EXC_LINE = _lazy(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)): ?(.*)$")
_SIZE = r"([\d.]+) ?([KMGT]i?B|B)"
_RX_OOM_REQ = _lazy(r"Tried to allocate " + _SIZE)
_RX_OOM_GPU = _lazy(r"GPU (\d+)")
_RX_OOM_TOTAL = _lazy(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_RX_OOM_TOTAL_OLD = _lazy(_SIZE + r" total capacity; .*?" + _SIZE + r" free")
_RX_NEM_MFS = _lazy(r"mem_fraction_static=([\d.]+)")
_RX_NEM_23 = _lazy(
    r"--mem-fraction-static=([\d.]+)\. Raise --mem-fraction-static above ([\d.]+) "
    r"\(minimum viable = 1 - available/pre = ([\d.]+)\)"
)
_RX_HOST_MEM = _lazy(r"Requesting " + _F + r" GB but only have " + _F + r" GB free")
_RX_RANK_DEAD = _lazy(r"Rank (\d+) scheduler is dead")
_RX_RANK_INIT = _lazy(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")
_RX_SUBPROC = _lazy(r"Subprocess scheduler_(\d+) \(pid=\d+\) crashed with exit code (-?\d+)")
_RX_TERMINATED = _lazy(r"Scheduler or DataParallelController \d+ terminated with (-?\d+)")
_RX_EXIT_CODE = _lazy(r"^Exit code: (-?\d+)")
_RX_TRY_ALLOC = _lazy(r"Try to allocate (\d+) tokens")

_UNITS_GIB = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 1024.0,
              "KB": 1e3 / 2**30, "MB": 1e6 / 2**30, "GB": 1e9 / 2**30, "TB": 1e12 / 2**30}


def _gib(num: str, unit: str) -> float | None:
    try:
        return round(float(num) * _UNITS_GIB.get(unit, 1.0), 4)
    except ValueError:
        return None


def _float(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        return float(s)
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _fields(body: str) -> dict[str, str]:
    """`#running-req: 3, token usage: 0.08, gen throughput (token/s): 2874.31` -> {key: value}.

    Field order differs between versions and optional fields come and go, so never rely on it.
    """
    out: dict[str, str] = {}
    for part in body.split(", "):
        k, sep, v = part.rpartition(": ")
        if sep:
            out[k] = v
    return out


def _bool(s: str | None) -> bool | None:
    return None if s is None else s.strip() == "True"


def _graph_flag(f: dict[str, str]) -> bool | None:
    for key in ("cuda graph", "cpu graph", "npu graph", "musa graph"):
        if key in f:
            return _bool(f[key])
    return None


def _prefill(line: int, ts: str | None, rank: str | None, msg: str) -> ev.PrefillBatch:
    f = _fields(msg)
    usage = f.get("token usage", f.get("full token usage"))
    return ev.PrefillBatch(
        line, ts, rank,
        new_seq=_int(f.get("#new-seq")),
        new_token=_int(f.get("#new-token")),
        cached_token=_int(f.get("#cached-token")),
        token_usage=_float(usage),
        running_req=_int(f.get("#running-req")),
        queue_req=_int(f.get("#queue-req")),
        input_throughput=_float(f.get("input throughput (token/s)")),
        cuda_graph=_graph_flag(f),
    )


def _decode(line: int, ts: str | None, rank: str | None, msg: str) -> ev.DecodeBatch:
    f = _fields(msg)
    usage = f.get("token usage", f.get("full token usage"))
    return ev.DecodeBatch(
        line, ts, rank,
        running_req=_int(f.get("#running-req")),
        tokens=_int(f.get("#token", f.get("#full token"))),
        token_usage=_float(usage),
        gen_throughput=_float(f.get("gen throughput (token/s)")),
        queue_req=_int(f.get("#queue-req")),
        cuda_graph=_graph_flag(f),
    )


def _split_top(body: str) -> list[str]:
    """Split `a=1, b=[1, 2], c='x, y'` on the top-level commas."""
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parse_server_args(msg: str) -> tuple[dict[str, Any], str] | None:
    """Both dumps: 0.5.9 `server_args=ServerArgs(k=v, …)` and 0.5.23 `server_args={'k': v, …}`."""
    body = msg[len("server_args="):].strip()
    if body.startswith("ServerArgs("):
        inner = body[len("ServerArgs("):]
        if inner.endswith(")"):
            inner = inner[:-1]
        args: dict[str, Any] = {}
        for part in _split_top(inner):
            k, sep, v = part.partition("=")
            if sep and k.strip().isidentifier():
                args[k.strip()] = _value(v.strip())
        return args, "ServerArgs"
    if body.startswith("{"):
        whole = _value(body)
        if isinstance(whole, dict):
            return {str(k): v for k, v in whole.items()}, "dict"
        args = {}
        inner = body[1:-1] if body.endswith("}") else body[1:]
        for part in _split_top(inner):
            k, sep, v = part.partition(":")
            key = _value(k.strip())
            if sep and isinstance(key, str):
                args[key] = _value(v.strip())
        return args, "dict"
    return None


def _cuda_oom(line: int, ts: str | None, rank: str | None, text: str) -> ev.CudaOom:
    req = _RX_OOM_REQ.search(text)
    gpu = _RX_OOM_GPU.search(text)
    tot = _RX_OOM_TOTAL.search(text)
    total = free = None
    if tot:
        total, free = _gib(tot.group(1), tot.group(2)), _gib(tot.group(3), tot.group(4))
    else:
        old = _RX_OOM_TOTAL_OLD.search(text)
        if old:
            total, free = _gib(old.group(1), old.group(2)), _gib(old.group(3), old.group(4))
    return ev.CudaOom(
        line, ts, rank,
        requested_gib=_gib(req.group(1), req.group(2)) if req else None,
        gpu=int(gpu.group(1)) if gpu else None,
        total_gib=total,
        free_gib=free,
        text=text,
    )


def frame_phase(file: str, func: str) -> str | None:
    """The phase a traceback frame proves: the CUDA-graph runner's capture = graph capture, cache
    and model init = startup, forward_extend = prefill, forward_decode = decode."""
    lf = file.lower()
    if ("graph_runner" in lf and "capture" in func) or (func.startswith("capture") and "graph" in lf):
        return "graph_capture"
    if func in ("init_cache_with_memory_pool", "init_memory_pool", "load_model") or "hiradix" in lf \
            or "HiRadixCache" in func:
        return "startup"
    if func == "forward_extend":
        return "prefill"
    if func == "forward_decode":
        return "decode"
    return None


Peek = Callable[[], str | None]


def _no_peek() -> str | None:
    return None


def classify(line: int, text: str, peek: Peek = _no_peek) -> list[Event]:
    """Every event one log line yields (usually none or one). `text` is the line without its
    newline, already cleaned of ANSI codes and tqdm redraws. `peek` returns the next line's text
    (for the two-line KV-exhaustion message) or None."""
    ts, rank, msg = split_record(text)
    out: list[Event] = []
    if ts is not None:
        _classify_record(line, ts, rank, msg, out, peek)
    _classify_anywhere(line, ts, rank, msg, out, peek)
    return out


def _classify_record(line: int, ts: str, rank: str | None, msg: str, out: list[Event], peek: Peek) -> None:
    c = msg[:1]
    if c == "D":
        if msg.startswith("Decode batch"):
            out.append(_decode(line, ts, rank, msg))
        elif msg.startswith("Decode out of memory"):
            out.append(_kv_exhausted(line, ts, rank, msg, "decode", peek))
        return
    if c == "P":
        if msg.startswith("Prefill batch"):
            out.append(_prefill(line, ts, rank, msg))
        elif msg.startswith("Prefill out of memory"):
            out.append(_kv_exhausted(line, ts, rank, msg, "prefill", peek))
        elif msg.startswith("Post-capture KV sizing: KV cache allocated"):
            m = _RX_POST_CAPTURE_KV.match(msg)
            if m:
                out.append(ev.KvCacheAllocated(line, ts, rank, int(m["tokens"]), float(m["kv"]), None,
                                               m["dtype"].strip(), upper_bound=False))
        return
    if c in "IWE" and msg[:5] in ("INFO:", "WARNI", "ERROR"):
        m = _RX_ACCESS.match(msg)
        if m:
            out.append(ev.HttpAccess(line, ts, rank, m.group(1), m.group(2), int(m.group(3))))
            return
        if "Uvicorn running on" in msg:
            u = _RX_UVICORN.search(msg)
            out.append(ev.UvicornRunning(line, ts, rank, int(u.group(1)) if u else None))
        return
    if c == "L":
        if msg.startswith("Load weight begin."):
            m = _RX_LOAD_BEGIN.match(msg)
            if m:
                out.append(ev.WeightLoadBegin(line, ts, rank, float(m.group(1))))
        elif msg.startswith("Load weight end."):
            m = _RX_LOAD_END_MEM.search(msg)
            if m:
                el = _RX_ELAPSED.search(msg)
                ty = _RX_TYPE.search(msg)
                dt = _RX_DTYPE.search(msg)
                qu = _RX_QUANT.search(msg)
                out.append(ev.WeightLoadEnd(
                    line, ts, rank,
                    elapsed_s=float(el.group(1)) if el else None,
                    avail_gb=float(m.group(1)),
                    weights_gb=float(m.group(2)),
                    model_type=ty.group(1).strip() if ty else None,
                    dtype=dt.group(1).strip() if dt else None,
                    quant=qu.group(1) if qu else None,
                ))
        return
    if "KV Cache " in msg:
        m = _RX_KV.match(msg)
        if m:
            kv = float(m["kv"]) if m["kv"] is not None else round(float(m["k"]) + float(m["v"]), 2)
            out.append(ev.KvCacheAllocated(
                line, ts, rank, int(m["tokens"]), kv, m["label"],
                m["dtype"].strip() if m["dtype"] else None, upper_bound=m["ub"] == "VA upper bound",
            ))
        return
    if c == "M":
        if msg.startswith("Memory pool end."):
            m = _RX_POOL_END.match(msg)
            if m:
                out.append(ev.MemoryPoolEnd(line, ts, rank, float(m.group(1))))
        elif msg.startswith("Memory baseline taken."):
            mu = _RX_MEM_USAGE.search(msg)
            if mu:
                out.append(ev.MemoryBaseline(line, ts, rank, float(mu.group(1))))
        elif msg.startswith("max_total_num_tokens="):
            pass  # lower-case m: handled below
        return
    if c == "C":
        if msg.startswith("Capture "):
            m = _RX_CAPTURE.match(msg)
            if m:
                what = m["what"]
                av = _RX_AVAIL.search(msg)
                if m["step"] == "begin":
                    out.append(ev.GraphCaptureBegin(line, ts, rank, what, float(av.group(1)) if av else None))
                else:
                    mu = _RX_MEM_USAGE.search(msg)
                    el = _RX_ELAPSED.search(msg)
                    if mu and av:
                        out.append(ev.GraphCaptureEnd(line, ts, rank, what, float(el.group(1)) if el else None,
                                                      float(mu.group(1)), float(av.group(1))))
        return
    if c == "m":
        if msg.startswith("max_total_num_tokens="):
            f = {}
            for part in msg.split(", "):
                k, sep, v = part.partition("=")
                if sep:
                    f[k] = v
            avail = f.get("available_gpu_mem", f.get("available_cpu_mem"))
            tokens = _int(f.get("max_total_num_tokens"))
            if tokens is not None:
                out.append(ev.MaxTotalTokens(
                    line, ts, rank, tokens,
                    chunked_prefill_size=_int(f.get("chunked_prefill_size")),
                    max_prefill_tokens=_int(f.get("max_prefill_tokens")),
                    max_running_requests=_int(f.get("max_running_requests")),
                    context_len=_int(f.get("context_len")),
                    available_gpu_mem_gb=_float(avail.split()[0]) if avail else None,
                ))
        return
    if c == "A":
        if msg.startswith("Allocating "):
            m = _RX_ALLOC_09.match(msg)
            if m:
                out.append(ev.HiCacheAllocating(line, ts, rank, float(m.group(1))))
            else:
                m = _RX_ALLOC_23.match(msg)
                if m:
                    out.append(ev.HiCacheAllocating(line, ts, rank, float(m.group(3)), int(m.group(2)), m.group(1)))
        return
    if c == "s":
        if msg.startswith("server_args="):
            parsed = parse_server_args(msg)
            if parsed is not None:
                out.append(ev.ServerArgs(line, ts, rank, parsed[0], parsed[1]))
        return
    if c == "I":
        if msg.startswith("Init torch distributed begin"):
            out.append(ev.DistInitBegin(line, ts, rank, "sglang-0.5.9"))
        elif msg.startswith("Init torch distributed ends"):
            m = _RX_DIST_END.search(msg)
            out.append(ev.DistInitEnd(line, ts, rank, _float(m.group(1)) if m else None,
                                      _float(m.group(2)) if m else None, "sglang-0.5.9"))
        elif msg.startswith("Init parallel begin"):
            out.append(ev.DistInitBegin(line, ts, rank, "sglang-0.5.23"))
        elif msg.startswith("Init parallel ends"):
            m = _RX_DIST_END.search(msg)
            out.append(ev.DistInitEnd(line, ts, rank, _float(m.group(1)) if m else None, None, "sglang-0.5.23"))
        return
    if c == "T":
        if msg.startswith("The server is fired up and ready to roll"):
            out.append(ev.ServerReady(line, ts, rank))
        elif msg.startswith("The memory capacity is unbalanced"):
            out.append(ev.MemoryImbalance(line, ts, rank, msg))
        return
    if c == "K":
        if msg.startswith("KV cache pool is full. Retract requests"):
            m = _RX_RETRACT.search(msg)
            out.append(ev.KvRetract(line, ts, rank, int(m.group(1)) if m else 1))
        elif msg.startswith("KV pool holds"):
            m = _RX_BELOW_CTX.match(msg)
            if m:
                out.append(ev.KvPoolBelowContext(line, ts, rank, int(m.group(1)), int(m.group(2))))
        return
    if c == "O" and msg.startswith("Out of memory. Try to lower your batch size"):
        out.append(_kv_exhausted(line, ts, rank, msg, None, peek))
        return
    if c == "S":
        if msg.startswith("Scheduler hit an exception"):
            out.append(ev.SchedulerException(line, ts, rank))
        elif msg.startswith("SIGQUIT received"):
            out.append(ev.SigquitReceived(line, ts, rank, False, msg))
        elif msg.startswith("Subprocess scheduler_"):
            m = _RX_SUBPROC.search(msg)
            if m:
                out.append(ev.RankDead(line, ts, rank, int(m.group(1)), int(m.group(2)), "crashed", msg))
        elif msg.startswith("Scheduler or DataParallelController"):
            m = _RX_TERMINATED.search(msg)
            out.append(ev.RankDead(line, ts, rank, None, int(m.group(1)) if m else None, "terminated", msg))
        elif msg.startswith("Scheduler watchdog timeout"):
            out.append(ev.SchedulerWatchdogTimeout(line, ts, rank, msg))
        return
    if c == "E":
        if msg.startswith("Exit code:"):
            m = _RX_EXIT_CODE.match(msg)
            if m:
                out.append(ev.ExitCode(line, ts, rank, int(m.group(1))))
        return
    if c == "R":
        if msg.startswith("Received sigquit from a child"):
            out.append(ev.SigquitReceived(line, ts, rank, True, msg))
        elif msg.startswith("Rank "):
            m = _RX_RANK_INIT.search(msg)
            if m:
                out.append(ev.RankDead(line, ts, rank, int(m.group(1)), int(m.group(2)), "died_during_init", msg))
            else:
                m = _RX_RANK_DEAD.search(msg)
                if m:
                    out.append(ev.RankDead(line, ts, rank, int(m.group(1)), None, "dead", msg))
        return


def _kv_exhausted(line: int, ts: str | None, rank: str | None, msg: str, stage: str | None, peek: Peek) -> ev.KvPoolExhausted:
    m = _RX_TRY_ALLOC.search(msg)
    if m is None:
        nxt = peek()
        if nxt is not None:
            m = _RX_TRY_ALLOC.search(nxt)
    return ev.KvPoolExhausted(line, ts, rank, stage, msg, int(m.group(1)) if m else None)


# Substrings that make any line (record or not) worth a closer look for failure signatures.
def _classify_anywhere(line: int, ts: str | None, rank: str | None, msg: str, out: list[Event], peek: Peek) -> None:
    if out:
        return  # the record grammar already explained this line
    if ts is None:
        s = msg.lstrip()
        if s.startswith("File "):
            m = _RX_FRAME.match(msg)
            if m:
                out.append(ev.TracebackFrame(line, ts, rank, m.group(2), m.group(1), frame_phase(m.group(1), m.group(2))))
            return
        if s.startswith("Exit code:"):
            m = _RX_EXIT_CODE.match(s)
            if m:
                out.append(ev.ExitCode(line, ts, rank, int(m.group(1))))
            return
    specific: Event | None = None
    if "raph failed" in msg and _RX_CAPTURE_FAILED.search(msg):
        specific = ev.GraphCaptureFailed(line, ts, rank, msg)
    elif "CUDA out of memory" in msg:
        specific = _cuda_oom(line, ts, rank, msg)
    elif "ut of memory. Try to lower your batch size" in msg:
        stage = "prefill" if "Prefill out of memory" in msg else "decode" if "Decode out of memory" in msg else None
        specific = _kv_exhausted(line, ts, rank, msg, stage, peek)
    elif "Not enough memory. Please try to increase --mem-fraction-static" in msg:
        mm = _RX_NEM_MFS.search(msg)
        specific = ev.NotEnoughMemory(line, ts, rank, float(mm.group(1)) if mm else None, None, None, msg)
    elif "Loaded weights leave no GPU memory" in msg:
        m23 = _RX_NEM_23.search(msg)
        if m23:
            specific = ev.NotEnoughMemory(line, ts, rank, float(m23.group(1)), float(m23.group(3)),
                                          float(m23.group(2)), msg)
        else:
            specific = ev.NotEnoughMemory(line, ts, rank, None, None, None, msg)
    elif "Not enough host memory available" in msg:
        hm = _RX_HOST_MEM.search(msg)
        specific = ev.HiCacheHostMemory(line, ts, rank, float(hm.group(1)) if hm else None,
                                        float(hm.group(2)) if hm else None, msg)
    elif "No host memory is left for HiCache" in msg:
        specific = ev.HiCacheHostMemory(line, ts, rank, None, None, msg)
    elif "Watchdog caught collective operation timeout" in msg or "DistBackendError" in msg or "NCCL error" in msg:
        specific = ev.NcclTimeout(line, ts, rank, msg)
    elif "warmup error" in msg or "Initialization failed" in msg:
        specific = ev.WarmupFailed(line, ts, rank, msg)
    elif "ddress already in use" in msg or "[Errno 98]" in msg:
        specific = ev.PortInUse(line, ts, rank, msg)
    elif ts is None and "Killed" in msg and (msg.strip() == "Killed" or "Killed process" in msg or " Killed " in msg):
        specific = ev.Killed(line, ts, rank, msg.strip())
    if specific is not None:
        out.append(specific)
    if ts is None:
        m = _RX_EXC_LINE.match(msg)
        if m:
            out.append(ev.ExceptionLine(line, ts, rank, m.group(1), m.group(2)))

