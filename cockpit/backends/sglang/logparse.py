"""SGLang's log grammar (0.5.9 and 0.5.23) turned into typed events.

Why the scanning looks the way it does: a busy server log is millions of uvicorn access lines and
`Decode batch` / `Prefill batch` lines, and the handful of lines that matter (memory milestones,
the crash) are rare. Python's `re` runs at ~125 MB/s and a per-line Python loop is slower still,
while `bytes.count` runs at GB/s. So the parser works on big byte blocks cut into 64 KiB windows
and asks C, per half window, "does every line here look routine?" (newlines == batch markers +
access markers; the newlines are counted by what `bytes.replace` removes, which finds them with
memchr at twice `count`'s speed). A routine half costs one `replace` and two `count` calls (every
other window also gives its last batch line to the throughput series); a half that holds something
else is re-checked in 8 KiB pieces and only the lines that are not routine are classified, each
after the batch line just before it (so "which batch ran last" is right when a crash follows).
Small feeds (a live tail) are classified line by line in full, so the live view sees every batch
and access line.

Line numbers stay exact (the newlines of every window are counted), lines are capped at 64 KiB
(the rest of an over-long line is skipped without buffering it), bytes that are not UTF-8 are
replaced, ANSI colour codes are stripped, a tqdm line redrawn with `\\r` keeps its last segment,
and nothing in the input makes the parser raise.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from cockpit.core import events as ev
from cockpit.core.events import Event
from cockpit.core.state import RunState

LINE_CAP = 64 * 1024  # longest line kept; the rest of a longer line is dropped
WINDOW = 64 * 1024  # bytes per routine-check window
FULL_FEED_LINES = 512  # a feed with at most this many lines is classified line by line in full
SUB_WINDOW = 8 * 1024  # a window with news is checked again in pieces of this size
TAIL_SAMPLE = 8192  # bytes at the end of a window searched for its last batch lines
SAMPLE_EVERY = 2  # one batch line per this many windows (~1 per 1,000 lines) feeds the series
READ_CHUNK = 1 << 20

# A routine line holds exactly one of these (batch lines / uvicorn access lines).
_BATCH_MARK = b"#running-req: "  # in every Prefill and Decode batch line, both versions
_ACCESS_MARK = b" HTTP/1."

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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
                out.append(ev.TracebackFrame(line, ts, rank, m.group(2), m.group(1)))
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


# ---- the streaming parser ----------------------------------------------------------------------


def _clean(raw: bytes) -> str:
    """One line's bytes -> text: CRLF and tqdm `\\r` redraws (keep the last segment), ANSI, bad UTF-8."""
    if b"\r" in raw:
        raw = raw.rstrip(b"\r")
        cut = raw.rfind(b"\r")
        if cut != -1:
            raw = raw[cut + 1 :]
    if len(raw) > LINE_CAP:
        raw = raw[:LINE_CAP]
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


class SGLangLogParser:
    """Feed it bytes in any chunking; it returns the events of every line completed so far.

    Stateful across feeds: a partial last line waits for its newline (or `finish()`).
    """

    def __init__(self) -> None:
        self._pending = b""
        self._skipping = False  # inside the dropped rest of an over-long line
        self._long_head = b""  # that line's first LINE_CAP bytes
        self._long_cur = b""  # its current `\r` segment (capped)
        self._long_prev = b""  # and the last non-empty one before it
        self._long_cr = False
        self._lines = 0
        self._last_line = 0  # the last line handed to classify (lines are never classified twice)
        self._windows = 0
        self._unsampled: tuple[bytes, int, int, int, int] | None = None

    @property
    def lines_seen(self) -> int:
        return self._lines

    def skip_lines(self, n: int) -> None:
        """n whole lines went by unread (the middle of a huge log): keep numbering as the file does.
        Call it only between complete lines (no partial line pending)."""
        self._lines += n
        self._last_line = self._lines

    def feed(self, data: bytes) -> list[Event]:
        out: list[Event] = []
        if not data:
            return out
        start = 0
        if self._skipping:
            nl = data.find(b"\n")
            self._skip(data if nl == -1 else data[:nl])
            if nl == -1:
                return out
            self._end_long_line(out)
            start = nl + 1
        if self._pending:
            nl = data.find(b"\n", start)
            if nl == -1:
                self._keep(self._pending + data[start:])
                return out
            # finish the waiting line on its own; the rest is scanned in place (no 1 MiB copies)
            line = self._pending + data[start : nl + 1]
            self._pending = b""
            self._block(line, 0, len(line), out)
            start = nl + 1
        end = data.rfind(b"\n", start) + 1
        if end:
            self._block(data, start, end, out)
        else:
            end = start
        self._keep(data[end:])
        return out

    def _keep(self, tail: bytes) -> None:
        """Hold a partial last line. One longer than the cap is not buffered: its head and its last
        `\r` segment (a tqdm bar redrawn for minutes, maybe ending in a record) are kept, capped."""
        if len(tail) > LINE_CAP:
            self._skipping = True
            self._long_head = tail[:LINE_CAP]
            self._long_cur = self._long_prev = b""
            self._long_cr = False
            self._pending = b""
            self._skip(tail)
        else:
            self._pending = tail

    def _skip(self, part: bytes) -> None:
        """More of an over-long line (without its newline): track its last non-empty `\r` segment."""
        segs = part.split(b"\r")
        if len(self._long_cur) < LINE_CAP:
            self._long_cur = (self._long_cur + segs[0][:LINE_CAP])[:LINE_CAP]
        if len(segs) == 1:
            return
        self._long_cr = True
        for seg in (self._long_cur, *segs[1:-1]):
            if seg:
                self._long_prev = seg[:LINE_CAP]
        self._long_cur = segs[-1][:LINE_CAP]

    def _end_long_line(self, out: list[Event]) -> None:
        self._lines += 1
        self._last_line = self._lines
        raw = (self._long_cur or self._long_prev) if self._long_cr else self._long_head
        out.extend(classify(self._lines, _clean(raw)))
        self._skipping = False
        self._long_head = self._long_cur = self._long_prev = b""
        self._long_cr = False

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self._unsampled is not None:
            buf, ws, we, wnl, before = self._unsampled
            self._unsampled = None
            lines, self._lines = self._lines, before
            self._sample(buf, ws, we, wnl, out)  # the last batch line before the end counts
            self._lines = lines
        if self._skipping:
            self._end_long_line(out)
        elif self._pending:
            self._lines += 1
            self._last_line = self._lines
            out.extend(classify(self._lines, _clean(self._pending)))
        self._pending = b""
        return out

    # -- internals --

    def _block(self, buf: bytes, start: int, n: int, out: list[Event]) -> None:
        """buf[start:n] ends with a newline. Appends events; advances the line count."""
        if n - start <= FULL_FEED_LINES * 64 and buf.count(b"\n", start, n) <= FULL_FEED_LINES:
            self._lines += self._classify_lines(buf[start:n].split(b"\n")[:-1], self._lines, out)
            return
        pos = start
        while pos < n:
            end = pos + WINDOW
            if end >= n:
                end = n
            else:
                nl = buf.find(b"\n", end - 1, n)
                end = n if nl == -1 else nl + 1
            self._window(buf, pos, end, out)
            pos = end

    def _window(self, buf: bytes, s: int, e: int, out: list[Event]) -> None:
        base = self._lines
        nl = 0
        pos = s
        find = buf.find
        step = SUB_WINDOW - 1
        while pos < e:
            # The window is checked in halves of four pieces, cut where _find_news cuts its
            # pieces (buf[e - 1] is a newline, so a search that starts past it gives e), so that
            # a line with news costs a second look at half a window, not a whole one. Newlines
            # are counted by what `replace` removes: that path finds them with memchr, about
            # twice as fast as `count`'s byte loop.
            he = find(b"\n", pos + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            half = buf[pos:he]
            hnl = len(half) - len(half.replace(b"\n", b""))
            news = hnl - buf.count(_BATCH_MARK, pos, he) - buf.count(_ACCESS_MARK, pos, he)
            if news:
                self._lines = base + nl
                self._find_news(buf, pos, he, news, out)
            nl += hnl
            pos = he
        self._lines = base
        self._windows += 1
        if self._windows % SAMPLE_EVERY == 0:
            self._sample(buf, s, e, nl, out)
            self._unsampled = None
        else:
            # remembered so that finish() can still give the last batch line of the input
            self._unsampled = (buf, s, e, nl, self._lines)
        self._lines += nl

    def _find_news(self, buf: bytes, s: int, e: int, news: int, out: list[Event]) -> None:
        """buf[s:e] holds `news` lines besides routine ones (self._lines: the lines before s): find
        them in pieces with the same test, stopping once every line with news is accounted for."""
        pos = s
        while pos < e and news > 0:
            se = buf.find(b"\n", min(pos + SUB_WINDOW, e) - 1, e) + 1 or e
            snl = buf.count(b"\n", pos, se)
            sub_news = snl - buf.count(_BATCH_MARK, pos, se) - buf.count(_ACCESS_MARK, pos, se)
            if sub_news:
                self._last_batch_before(buf, pos, out)
                self._dirty(buf[pos:se].split(b"\n")[:-1], out)
                news -= sub_news
            self._lines += snl
            pos = se

    def _emit(self, lineno: int, raw: bytes, out: list[Event], peek: Peek = _no_peek) -> None:
        if lineno <= self._last_line:
            return  # already classified (a sample may meet a line the dirty path took)
        self._last_line = lineno
        text = _clean(raw)
        if text:
            out.extend(classify(lineno, text, peek))

    def _sample(self, buf: bytes, s: int, e: int, nl: int, out: list[Event]) -> None:
        """Keep a window's last batch line: one point of the series per window."""
        p = buf.rfind(_BATCH_MARK, max(s, e - TAIL_SAMPLE), e)
        if p == -1:
            return
        ls = buf.rfind(b"\n", s, p) + 1 or s
        le = buf.find(b"\n", p, e)
        # counted from the window's end: the sampled line sits near it
        self._emit(self._lines + nl - buf.count(b"\n", ls, e) + 1, buf[ls:le], out)

    def _last_batch_before(self, buf: bytes, pos: int, out: list[Event]) -> None:
        """Before a piece with news (maybe a crash), the batch line just before it: the crash phase."""
        p = buf.rfind(_BATCH_MARK, max(0, pos - TAIL_SAMPLE), pos)
        if p == -1:
            return
        ls = buf.rfind(b"\n", 0, p) + 1
        le = buf.find(b"\n", p, pos)
        self._emit(self._lines - buf.count(b"\n", ls, pos) + 1, buf[ls:le], out)

    def _dirty(self, lines: list[bytes], out: list[Event]) -> None:
        """Classify the lines that are not routine, each after the batch line just before it."""
        base = self._lines
        bm, am = _BATCH_MARK, _ACCESS_MARK
        count = len(lines)
        done = -1
        for i, raw in enumerate(lines):
            if bm in raw or am in raw:
                continue
            for j in range(i - 1, done, -1):
                if bm in lines[j]:
                    self._emit(base + j + 1, lines[j], out)
                    break
                if am not in lines[j]:
                    break

            def peek(i: int = i) -> str | None:
                return _clean(lines[i + 1]) if i + 1 < count else None

            self._emit(base + i + 1, raw, out, peek)
            done = i

    def _classify_lines(self, lines: list[bytes], base: int, out: list[Event]) -> int:
        """Classify every line; returns how many there were."""
        count = len(lines)
        cleaned: list[str | None] = [None] * count

        def text(i: int) -> str:
            t = cleaned[i]
            if t is None:
                t = cleaned[i] = _clean(lines[i])
            return t

        for i in range(count):
            t = text(i)
            if not t:
                continue

            def peek(i: int = i) -> str | None:
                return text(i + 1) if i + 1 < count else None

            evs = classify(base + i + 1, t, peek)
            if evs:
                out.extend(evs)
        self._last_line = max(self._last_line, base + count)
        self._unsampled = None
        return count


def iter_chunks(source: BinaryIO, size: int = READ_CHUNK) -> Iterator[bytes]:
    while True:
        chunk = source.read(size)
        if not chunk:
            return
        yield chunk


PARALLEL_MIN_BYTES = 48 << 20  # a file at least this big is cut into ranges parsed by forked workers
MAX_WORKERS = 4


def _parse_range(fd: int, start: int, end: int) -> tuple[int, list[Event]]:
    """Events of the lines in bytes [start, end) of a file, numbered from 1. `pread` keeps the
    shared file offset out of it (forked workers share it with the parent)."""
    parser = SGLangLogParser()
    out: list[Event] = []
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        out += parser.feed(chunk)
    out += parser.finish()
    return parser.lines_seen, out


def _line_starts(f: BinaryIO, size: int, parts: int) -> list[int]:
    """`parts` + 1 offsets cutting the file at line starts, in order (ranges may be empty)."""
    cuts = [0]
    for i in range(1, parts):
        pos = max(size * i // parts, cuts[-1])
        f.seek(pos)
        while True:
            block = f.read(65536)
            if not block:
                pos = size
                break
            nl = block.find(b"\n")
            if nl != -1:
                pos += nl + 1
                break
            pos += len(block)
        cuts.append(min(pos, size))
    cuts.append(size)
    return cuts


def _workers(size: int) -> int:
    if size < PARALLEL_MIN_BYTES or not hasattr(os, "fork"):
        return 1
    env = os.environ.get("COCKPIT_LOG_WORKERS")
    if env is not None:
        return max(1, int(env)) if env.isdigit() else 1
    import threading

    if threading.active_count() != 1:
        return 1  # forking a threaded process is not safe
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        idle = cpus - os.getloadavg()[0]  # on a saturated host more processes only add overhead
    except OSError:
        idle = cpus
    return max(1, min(MAX_WORKERS, cpus, int(idle + 0.5), size // (PARALLEL_MIN_BYTES // 2)))


def _parallel_events(f: BinaryIO, size: int, n: int, total: list[int]) -> Iterator[Event]:
    """Parse a big regular file in n ranges at once (fork; this process takes the first range).

    Each range yields its events numbered from 1; they are renumbered here, in order, from the line
    counts of the ranges before. A worker that fails is replaced by parsing its range here.
    """
    import pickle

    cuts = _line_starts(f, size, n)
    children: list[tuple[int, int, int, int]] = []  # (pid, read fd, start, end)
    for i in range(1, n):
        start, end = cuts[i], cuts[i + 1]
        try:
            rfd, wfd = os.pipe()
            pid = os.fork()
        except OSError:
            children.append((-1, -1, start, end))
            continue
        if pid == 0:  # the worker: parse, send, leave without running any of the parent's cleanup
            code = 0
            try:
                os.close(rfd)
                data = pickle.dumps(_parse_range(f.fileno(), start, end), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(wfd, "wb") as w:
                    w.write(data)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        children.append((pid, rfd, start, end))
    try:
        lines, events = _parse_range(f.fileno(), cuts[0], cuts[1])
        yield from events
        base = lines
        total.append(lines)
        for pid, rfd, start, end in children:
            got: tuple[int, list[Event]] | None = None
            if pid > 0:
                with os.fdopen(rfd, "rb") as r:
                    data = r.read()
                _, status = os.waitpid(pid, 0)
                if os.waitstatus_to_exitcode(status) == 0 and data:
                    try:
                        got = pickle.loads(data)
                    except Exception:
                        got = None
            count, evs = got if got is not None else _parse_range(f.fileno(), start, end)
            for e in evs:
                # the worker's events are fresh objects nobody else holds yet: renumber in place
                object.__setattr__(e, "line", e.line + base)
                yield e
            base += count
            total.append(count)
    finally:
        for pid, rfd, _, _ in children:  # on an early exit, reap what is left
            if pid > 0:
                try:
                    os.close(rfd)
                except OSError:
                    pass
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def read_log(source: str | Path | BinaryIO, state: RunState | None = None) -> RunState:
    """Parse a whole log (a path, or an open binary stream such as sys.stdin.buffer) into a RunState.

    A big regular file is parsed in ranges by forked workers (see _parallel_events); the result is
    the same as a sequential parse except for which routine batch lines are sampled into the series.
    """
    from cockpit.core.reducer import apply

    st = state if state is not None else RunState(backend="sglang")
    parser = SGLangLogParser()

    def consume(f: BinaryIO) -> None:
        for chunk in iter_chunks(f):
            for e in parser.feed(chunk):
                apply(st, e)
        for e in parser.finish():
            apply(st, e)

    if isinstance(source, (str, Path)):
        if str(source) == "-":
            consume(sys.stdin.buffer)
        else:
            with open(source, "rb") as f:
                info = os.fstat(f.fileno())
                n = _workers(info.st_size) if stat.S_ISREG(info.st_mode) else 1
                if n > 1:
                    total: list[int] = []
                    for e in _parallel_events(f, info.st_size, n, total):
                        apply(st, e)
                    st.lines_seen = max(st.lines_seen, sum(total))
                    return st
                consume(f)
    else:
        consume(source)
    st.lines_seen = max(st.lines_seen, parser.lines_seen)
    return st
