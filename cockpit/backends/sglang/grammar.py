"""SGLang's log grammar: one line's text -> the events it states.

`split_record` reads the record prefix (`[timestamp DP1 TP3] msg`, and the older or damaged forms:
`[gpu_id=0] msg` of 0.1-0.3, `[TP0] msg` with the time trimmed, a record whose opening bracket was
lost). `classify_line` turns a cleaned, unwrapped line into events and says how sure it is that the
line is SGLang's (`failures.STRONG` / `GENERIC` / `FOREIGN` / `NONE`): the record grammar dispatches
on the message's first character (a dict-free switch on the lines that matter), and the failure
signatures (`failures.py`) are looked for in any line, record or not. The streaming scanner
(`scanner.py`) decides which lines reach it; the bulk reader (`logparse.py`) feeds it files.

A recognised line whose figures do not parse or are impossible yields one `Unparsed` event instead
of its own: skipped and counted, never fatal (textutil.py).
"""

from __future__ import annotations

import ast
from typing import Any

from cockpit.backends.sglang.failures import (
    FOREIGN,
    GENERIC,
    NONE,
    STRONG,
    Peek,
    classify_failure,
    frame_phase,
    kv_exhausted,
)
from cockpit.backends.sglang.textutil import (
    SECONDS_MAX,
    bounded,
    count,
    gib,
    host_gb_pair,
    lazy,
    opt_float,
    opt_int,
)
from cockpit.core import events as ev
from cockpit.core.events import Event

__all__ = ["FOREIGN", "GENERIC", "NONE", "STRONG", "Peek", "classify", "classify_line", "frame_phase",
           "parse_server_args", "split_record"]

# ---- record prefix ---------------------------------------------------------------------------

_RANK_TOKENS = ("DP", "PP", "TP", "EP", "ATTN_CP", "MOE_DP", "CP")


def _rank_only(prefix: str) -> bool:
    """`TP0`, `DP1 TP3`, `DP0 TP0 EP0`: rank tokens only (a trimmed-timestamp record)."""
    parts = prefix.split()
    if not parts or len(parts) > 6:
        return False
    for p in parts:
        head = p.rstrip("0123456789")
        if head == p or head not in _RANK_TOKENS:
            return False
    return True


def split_record(line: str) -> tuple[str | None, str | None, str]:
    """`[2026-02-24 11:55:44.123 DP1 TP3] msg` -> ("2026-02-24 11:55:44.123", "DP1 TP3", "msg").

    A line that is not a record start (traceback text, tqdm, NCCL, `Killed`) comes back as
    (None, None, line). Rank tokens are kept as printed, unknown ones included. Records without a
    timestamp (`[gpu_id=0] msg` of 0.1-0.3, `[TP0] msg` with the time trimmed by the reporter) come
    back with ts "" (a record, but no time).
    """
    n = len(line)
    if n < 4:
        return None, None, line
    c0 = line[0]
    if c0 != "[":
        # `2025-02-09 10:14:05 TP0] msg`: a record that lost its opening bracket in a paste
        if c0.isdigit() and n > 21 and line[4] == "-" and line[10] in " T" and line[13] == ":":
            if ".py:" in line[:120]:
                # a logging config of its own: `2025-04-13 14:53:38 INFO 511 [pynccl.py:78] msg`
                m = _RX_PY_LOGGING.match(line)
                if m:
                    return m.group(1), None, line[m.end():]
            close = line.find("] ", 19, 120)
            if close != -1 and line[:4].isdigit() and line[17:19].isdigit():
                return _split_bracketed("[" + line[: close + 1], line[close + 2 :])
        return None, None, line
    # the usual `[2026-02-24 11:55:44 TP0] ` first (nearly every line; neither `gpu` form has a
    # `-` at [5] and digits at [1:5], and where one has the `-`, both read it as no record)
    if n < 21 or line[5] != "-" or line[11] != " " or line[14] != ":":
        if line[1:8] == "gpu_id=" or line[1:5] == "gpu=":
            eq = line.find("=", 1, 9) + 1
            close = line.find("]", eq, eq + 8)
            if close != -1 and line[eq:close].isdigit():
                return "", f"TP{int(line[eq:close])}", line[close + 2 :] if line[close + 1 : close + 2] == " " else line[close + 1 :]
            return None, None, line
        close = line.find("] ", 1, 40)
        if close == -1:
            return None, None, line
        inner = line[1:close]
        if _rank_only(inner):
            return "", inner, line[close + 2 :]
        # `[16:43:29 TP0]` (time only) and `[12-16 14:27:08]` (no year): trimmed or short stamps
        stamp, _, ranks = inner.partition(" ") if inner[2:3] == ":" else (inner[:14], "", inner[15:])
        if _short_stamp(stamp) and (not ranks or _rank_only(ranks)):
            return stamp, ranks or None, line[close + 2 :]
        return None, None, line
    if not (line[1:5].isdigit() and line[18:20].isdigit()):
        return None, None, line
    pos = 20
    if line[20] == ".":
        pos = 21
        while pos < n and line[pos].isdigit():
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


def _short_stamp(s: str) -> bool:
    """`16:43:29`, `16:43:29.123` or `12-16 14:27:08`."""
    if len(s) >= 14 and s[2] == "-" and s[5] == " ":
        s = s[6:]
        if not (s[:2].isdigit() and s[3:5].isdigit()):
            return False
    return len(s) >= 8 and s[2] == ":" and s[5] == ":" and s[:2].isdigit() and s[3:5].isdigit() and s[6:8].isdigit()


_RX_PY_LOGGING = lazy(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?) +(?:[A-Z]+ +)?(?:\d+ +)?\[[\w.]+\.py:\d+\] ")


def _split_bracketed(head: str, msg: str) -> tuple[str | None, str | None, str]:
    ts, rank, _ = split_record(head + " x")
    if ts is None:
        return None, None, head[1:] + " " + msg
    return ts, rank, msg


# ---- message grammar (applied to one line's message) --------------------------------------------

FORMAT_059 = "sglang-0.5.9"
FORMAT_0523 = "sglang-0.5.23"

_F = r"([\d.]+)"
_RX_LOAD_BEGIN = lazy(r"^Load weight begin\. avail mem=" + _F + r" ?GB")
_RX_LOAD_END_MEM = lazy(r"avail mem=" + _F + r" ?GB(?:, mem usage=" + _F + r" ?GB)?")
_RX_ELAPSED = lazy(r"(?:Time elapsed: |elapsed=)" + _F + r" ?s")
_RX_TYPE = lazy(r"type=([^,]+)")
_RX_DTYPE = lazy(r"dtype=([^,]+)")
_RX_QUANT = lazy(r"(quant=[^,]+(?:, fmt=[^,]+)?)")
_RX_KV = lazy(
    r"^(?:(?P<label>.+?) )?KV Cache (?P<ub>is allocated|VA upper bound)\. (?:dtype: (?P<dtype>[^,]+), )?"
    r"(?:#tokens: (?P<tokens>\d+), )?(?:K size: (?P<k>[\d.]+) ?GB, V size: (?P<v>[\d.]+) ?GB|KV size: (?P<kv>[\d.]+) ?GB)"
)
_RX_POST_CAPTURE_KV = lazy(
    r"^Post-capture KV sizing: KV cache allocated\. dtype: (?P<dtype>[^,]+), #tokens: (?P<tokens>\d+), "
    r"KV size: (?P<kv>[\d.]+) GB"
)
_RX_POOL_END = lazy(r"^Memory pool end\. avail mem=" + _F + r" ?GB")
_RX_AVAIL = lazy(r"avail[ _]mem=" + _F + r" ?GB")
_RX_MEM_USAGE = lazy(r"mem usage=" + _F + r" ?GB")
_RX_CAPTURE = lazy(r"^Capture (?P<what>.+?) (?P<step>begin|end)\.(?: |$)")
_RX_ALLOC_09 = lazy(r"^Allocating " + _F + r" GB host memory for hierarchical KV cache")
_RX_ALLOC_23 = lazy(r"^Allocating (\S+) hierarchical KV host pool: (\d+) tokens, " + _F + r" GB host memory")
_RX_BELOW_CTX = lazy(r"^KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
_RX_UVICORN = lazy(r"Uvicorn running on \S*?:(\d+)")
_RX_ACCESS = lazy(r'^(?:INFO|WARNING|ERROR):\s+\S+ - "([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
_RX_RETRACT = lazy(r"#retracted_reqs: (\d+)")
_RX_DIST_END = lazy(r"elapsed=" + _F + r" s(?:, mem usage=" + _F + r" GB)?")
_RX_RANK_DEAD = lazy(r"Rank (\d+) scheduler is dead")
_RX_RANK_INIT = lazy(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")
_RX_SUBPROC = lazy(r"Subprocess scheduler_(\d+) \(pid=\d+\) crashed with exit code (-?\d+)")
_RX_TERMINATED = lazy(r"Scheduler or DataParallelController \d+ terminated with (-?\d+)")
_RX_EXIT_CODE = lazy(r"^Exit code: (-?\d+)")
_RX_FLAG_SET = lazy(r"(?:[Aa]utomatically |[Aa]uto-)?(?:reduce|adjust|set|lower|raise|increase|change)\w{0,12} "
                    r"(?:the )?--mem-fraction-static to (\d*\.\d+)")
_RX_SELF_MAX_TOKENS = lazy(r"^self\.max_total_num_tokens=(\d+)")


def _code(s: str) -> int:
    """An exit code or rank index as printed (a few digits, maybe negative)."""
    if len(s) > 6:
        raise ValueError(f"exit code / index {s[:20]!r} too long")
    return int(s)


def _fields(body: str) -> dict[str, str]:
    """`#running-req: 3, token usage: 0.08, gen throughput (token/s): 2874.31` -> {key: value}.

    Field order differs between versions and optional fields come and go, so never rely on it.
    Older releases separate the head with a full stop (`Decode batch. #running-req: 2, …`).
    """
    out: dict[str, str] = {}
    parts = body.split(", ")
    head = parts[0]
    dot = head.find(". ")  # `Decode batch. #running-req: 2`: the first field shares the head's part
    if dot != -1:
        parts[0] = head[dot + 2 :]
    for part in parts:
        k, sep, v = part.rpartition(": ")
        if sep:
            out[k] = v
    return out


def _graph_flag(f: dict[str, str]) -> bool | None:
    v = f.get("cuda graph")
    if v is None:
        v = f.get("cpu graph")
        if v is None:
            v = f.get("npu graph")
            if v is None:
                v = f.get("musa graph")
                if v is None:
                    return None
    return v.strip() == "True"


# The two batch lines are half of a busy log and every one of them is read on the live path: the
# fields are looked up once each and passed in order (no keyword matching, no helper per field).


def _prefill(line: int, ts: str | None, rank: str | None, msg: str) -> ev.PrefillBatch:
    f = _fields(msg)
    get = f.get
    usage = get("token usage")
    return ev.PrefillBatch(
        line, ts, rank,
        opt_int(get("#new-seq")),  # new_seq
        opt_int(get("#new-token")),  # new_token
        opt_int(get("#cached-token")),  # cached_token
        opt_float(get("full token usage") if usage is None else usage, 100.0),  # token_usage
        opt_int(get("#running-req")),  # running_req
        opt_int(get("#queue-req")),  # queue_req
        opt_float(get("input throughput (token/s)"), 1e9),  # input_throughput
        _graph_flag(f),  # graph_replayed
    )


def _decode(line: int, ts: str | None, rank: str | None, msg: str) -> ev.DecodeBatch:
    f = _fields(msg)
    get = f.get
    tokens = get("#token")
    usage = get("token usage")
    return ev.DecodeBatch(
        line, ts, rank,
        opt_int(get("#running-req")),  # running_req
        opt_int(get("#full token") if tokens is None else tokens),  # tokens
        opt_float(get("full token usage") if usage is None else usage, 100.0),  # token_usage
        opt_float(get("gen throughput (token/s)"), 1e9),  # gen_throughput
        opt_int(get("#queue-req")),  # queue_req
        _graph_flag(f),  # graph_replayed
    )


def _old_fill(line: int, msg: str) -> ev.PrefillBatch:
    """0.1's `new fill batch. #seq: 1. #cached_token: 478. #new_token: 254. … #running_req: 4. …`"""
    f: dict[str, str] = {}
    for part in msg.split(". "):
        k, sep, v = part.partition(": ")
        if sep:
            f[k.strip()] = v.strip().rstrip(".")
    return ev.PrefillBatch(line, None, None, new_seq=opt_int(f.get("#seq")), new_token=opt_int(f.get("#new_token")),
                           cached_token=opt_int(f.get("#cached_token")), token_usage=None,
                           running_req=opt_int(f.get("#running_req")), queue_req=opt_int(f.get("#remaining_req")),
                           input_throughput=None, graph_replayed=None)


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



def _no_peek() -> str | None:
    return None


def classify(line: int, text: str, peek: Peek = _no_peek) -> list[Event]:
    """Every event one log line yields (usually none or one). `text` is the line without its
    newline, already cleaned of control codes and tqdm redraws. `peek` returns the next line's
    text (for the two-line KV-exhaustion message) or None."""
    return classify_line(line, text, peek)[0]


def classify_line(line: int, text: str, peek: Peek = _no_peek, last_frame: str | None = None) -> tuple[list[Event], int]:
    """`classify`, plus how sure the line is SGLang's (failures.STRONG / GENERIC / FOREIGN / NONE).
    `last_frame`: the function of the traceback frame just above, when the line follows one (it is
    then source text, unless it is the exception)."""
    ts, rank, msg = split_record(text)
    out: list[Event] = []
    try:
        if ts is not None:
            if msg[:1] == "[" and msg[1:2].isupper():
                msg = _strip_level(msg)
            _classify_record(line, ts, rank, msg, out, peek)
            recog = STRONG
        else:
            recog = _classify_unprefixed(line, msg, out)
        if not out:
            r = classify_failure(line, ts, rank, msg, out, peek, last_frame if ts is None else None)
            if ts is None:
                recog = max(recog, r) if r != FOREIGN else FOREIGN
    except ValueError as exc:  # a figure that does not parse or cannot be: skip the line, count it
        return [ev.Unparsed(line, ts, rank, f"{exc}: {text[:200]}")], (STRONG if ts is not None else NONE)
    return out, recog


_LIFECYCLE_HEADS = ("Load weight begin. avail mem=", "Load weight end. ", "Memory pool end. avail mem=",
                    "KV Cache is allocated. ", "Capture cuda graph begin. ", "Capture cuda graph end. ",
                    "max_total_num_tokens=")


_LEVELS = ("[ERROR] ", "[WARNING] ", "[INFO] ", "[DEBUG] ", "[CRITICAL] ", "[WARN] ")


def _strip_level(msg: str) -> str:
    """`[ERROR] Scheduler hit an exception: …`: a logging config that adds the level after the
    prefix; the message is what follows it."""
    for lv in _LEVELS:
        if msg.startswith(lv):
            return msg[len(lv):]
    return msg


_HEADERS = ("Scheduler hit an exception", "TpModelWorkerClient hit an exception")


def _classify_unprefixed(line: int, msg: str, out: list[Event]) -> int:
    """SGLang text that carries no record prefix: 0.1's batch lines, watchdog dumps, a crash
    header pasted without its prefix."""
    c = msg[:1]
    if c in "ST" and msg.startswith(_HEADERS):
        out.append(ev.SchedulerException(line, None, None, msg))
        return STRONG
    if c == "n" and msg.startswith("new fill batch. "):
        out.append(_old_fill(line, msg))
        return STRONG
    if c == "#" and msg.startswith("#running-req: ") and "gen throughput" in msg:
        out.append(_decode(line, None, None, msg))
        return STRONG
    if c == "R" and msg.startswith("Rank ") and ": load weight begin" in msg[:28]:
        idx = msg[5 : msg.find(":")]
        if idx.isdigit() and len(idx) < 6:
            out.append(ev.WeightLoadBegin(line, None, f"TP{int(idx)}", None))  # 0.1: no figures
        return STRONG
    if c == "R" and msg.startswith("Rank ") and ": load weight " in msg[:28]:
        return STRONG
    if msg[:1] in " \t" or c in "LMCKm":
        s = msg.strip()
        if s.startswith(_LIFECYCLE_HEADS):
            # a record cut from its prefix (a terminal or an OCR broke the line): SGLang's own words
            _classify_record(line, "", None, s, out, _no_peek)
            return STRONG if out else NONE
    if c == "s" and msg.startswith("self.max_total_num_tokens="):
        m = _RX_SELF_MAX_TOKENS.match(msg)
        if m:
            out.append(ev.PoolSize(line, None, None, count(m.group(1))))
            return STRONG
    return NONE


def _classify_record(line: int, ts: str, rank: str | None, msg: str, out: list[Event], peek: Peek) -> None:
    c = msg[:1]
    if c == "D":
        if msg.startswith("Decode batch"):
            out.append(_decode(line, ts, rank, msg))
        elif msg.startswith("Decode out of memory happened"):
            m = _RX_RETRACT.search(msg)
            out.append(ev.DecodeRetraction(line, ts, rank, count(m.group(1)) if m else None, msg))
        elif msg.startswith("Decode out of memory"):
            out.append(kv_exhausted(line, ts, rank, msg, "decode", peek))
        return
    if c == "P":
        if msg.startswith("Prefill batch"):
            out.append(_prefill(line, ts, rank, msg))
        elif msg.startswith("Prefill out of memory"):
            out.append(kv_exhausted(line, ts, rank, msg, "prefill", peek))
        elif msg.startswith("Post-capture KV sizing: KV cache allocated"):
            m = _RX_POST_CAPTURE_KV.match(msg)
            if m:
                out.append(ev.KvCacheAllocated(line, ts, rank, count(m["tokens"]), gib(m["kv"]), None,
                                               m["dtype"].strip(), upper_bound=False))
        return
    if c in "IWE" and msg[:5] in ("INFO:", "WARNI", "ERROR"):
        m = _RX_ACCESS.match(msg)
        if m:
            method, path, status = m.groups()
            out.append(ev.HttpAccess(line, ts, rank, method, path, int(status)))
            return
        if "Uvicorn running on" in msg:
            u = _RX_UVICORN.search(msg)
            out.append(ev.UvicornRunning(line, ts, rank, _code(u.group(1)) if u else None))
        return
    if c == "L":
        if msg.startswith("Load weight begin."):
            m = _RX_LOAD_BEGIN.match(msg)
            if m:
                out.append(ev.WeightLoadBegin(line, ts, rank, gib(m.group(1))))
        elif msg.startswith("Load weight end."):
            m = _RX_LOAD_END_MEM.search(msg)
            if m:
                el = _RX_ELAPSED.search(msg)
                ty = _RX_TYPE.search(msg)
                dt = _RX_DTYPE.search(msg)
                qu = _RX_QUANT.search(msg)
                out.append(ev.WeightLoadEnd(
                    line, ts, rank,
                    elapsed_s=bounded(el.group(1), SECONDS_MAX) if el else None,
                    avail_gb=gib(m.group(1)),
                    weights_gb=gib(m.group(2)) if m.group(2) is not None else None,
                    model_type=ty.group(1).strip() if ty else None,
                    dtype=dt.group(1).strip() if dt else None,
                    quant=qu.group(1) if qu else None,
                ))
        return
    if "KV Cache " in msg:
        m = _RX_KV.match(msg)
        if m:
            kv = gib(m["kv"]) if m["kv"] is not None else round(gib(m["k"]) + gib(m["v"]), 2)
            out.append(ev.KvCacheAllocated(
                line, ts, rank, count(m["tokens"]) if m["tokens"] is not None else None, kv, m["label"],
                m["dtype"].strip() if m["dtype"] else None, upper_bound=m["ub"] == "VA upper bound",
            ))
            if m["dtype"]:
                out.append(ev.FormatSeen(line, ts, rank, FORMAT_0523))  # `dtype:` in the KV line: 0.5.15+
        return
    if c == "M":
        if msg.startswith("Memory pool end."):
            m = _RX_POOL_END.match(msg)
            if m:
                out.append(ev.MemoryPoolEnd(line, ts, rank, gib(m.group(1))))
        elif msg.startswith("Memory baseline taken."):
            mu = _RX_MEM_USAGE.search(msg)
            if mu:
                out.append(ev.MemoryBaseline(line, ts, rank, gib(mu.group(1))))
                out.append(ev.FormatSeen(line, ts, rank, FORMAT_0523))  # 0.5.23 only
        return
    if c == "C":
        if msg.startswith("Capture "):
            m = _RX_CAPTURE.match(msg)
            if m:
                what = m["what"]
                av = _RX_AVAIL.search(msg)
                if m["step"] == "begin":
                    out.append(ev.GraphCaptureBegin(line, ts, rank, what, gib(av.group(1)) if av else None))
                    if what.startswith("target "):  # `Capture target … CUDA graph` exists only in 0.5.23
                        out.append(ev.FormatSeen(line, ts, rank, FORMAT_0523))
                else:
                    mu = _RX_MEM_USAGE.search(msg)
                    el = _RX_ELAPSED.search(msg)
                    out.append(ev.GraphCaptureEnd(line, ts, rank, what, bounded(el.group(1), SECONDS_MAX) if el else None,
                                                  gib(mu.group(1)) if mu else None, gib(av.group(1)) if av else None))
        return
    if c == "m":
        if msg.startswith("max_total_num_tokens="):
            f = {}
            for part in msg.split(", "):
                k, sep, v = part.partition("=")
                if sep:
                    f[k] = v
            avail = f.get("available_gpu_mem", f.get("available_cpu_mem"))
            tokens = opt_int(f.get("max_total_num_tokens"))
            if tokens is None:
                raise ValueError(f"max_total_num_tokens={f.get('max_total_num_tokens', '')[:40]!r}")
            out.append(ev.KvPoolSized(
                line, ts, rank, tokens,
                prefill_chunk_tokens=opt_int(f.get("chunked_prefill_size"), signed=True),
                prefill_tokens_cap=opt_int(f.get("max_prefill_tokens")),
                running_requests_cap=opt_int(f.get("max_running_requests")),
                context_len=opt_int(f.get("context_len")),
                available_gpu_mem_gb=gib(avail.split()[0]) if avail else None,
            ))
        return
    if c == "A":
        if "-fraction-static to " in msg:  # `Automatically reduce --mem-fraction-static to 0.760 …`
            m = _RX_FLAG_SET.search(msg)
            if m:
                out.append(ev.FlagStated(line, ts, rank, "mem_fraction_static", bounded(m.group(1), 1.0), msg))
        elif msg.startswith("Allocating "):
            m = _RX_ALLOC_09.match(msg)
            if m:
                out.append(ev.HostCacheAllocating(line, ts, rank, host_gb_pair(m.group(1), "0")[0]))
            else:
                m = _RX_ALLOC_23.match(msg)
                if m:
                    out.append(ev.HostCacheAllocating(line, ts, rank, host_gb_pair(m.group(3), "0")[0],
                                                    count(m.group(2)), m.group(1)))
        return
    if c == "s":
        if msg.startswith("server_args="):
            parsed = parse_server_args(msg)
            if parsed is not None:
                out.append(ev.ServerArgs(line, ts, rank, parsed[0], parsed[1]))
                out.append(ev.FormatSeen(line, ts, rank, FORMAT_059 if parsed[1] == "ServerArgs" else FORMAT_0523,
                                         strong=True))
        elif msg.startswith("self.max_total_num_tokens="):
            m = _RX_SELF_MAX_TOKENS.match(msg)
            if m:
                out.append(ev.PoolSize(line, ts, rank, count(m.group(1))))
        return
    if c == "I":
        if msg.startswith("Init torch distributed begin"):
            out.append(ev.DistInitBegin(line, ts, rank, FORMAT_059))
        elif msg.startswith("Init torch distributed ends"):
            m = _RX_DIST_END.search(msg)
            out.append(ev.DistInitEnd(line, ts, rank, bounded(m.group(1), SECONDS_MAX) if m else None,
                                      gib(m.group(2)) if m and m.group(2) else None, FORMAT_059))
        elif msg.startswith("Init parallel begin"):
            out.append(ev.DistInitBegin(line, ts, rank, FORMAT_0523))
        elif msg.startswith("Init parallel ends"):
            m = _RX_DIST_END.search(msg)
            out.append(ev.DistInitEnd(line, ts, rank, bounded(m.group(1), SECONDS_MAX) if m else None, None,
                                      FORMAT_0523))
        return
    if c == "T":
        if msg.startswith("The server is fired up and ready to roll"):
            out.append(ev.ServerReady(line, ts, rank))
        elif msg.startswith("The memory capacity is unbalanced"):
            out.append(ev.MemoryImbalance(line, ts, rank, msg))
        elif msg.startswith("Traceback (most recent call last)"):
            out.append(ev.SchedulerException(line, ts, rank, msg))  # a bare header names the rank too
        elif msg.startswith("TpModelWorkerClient hit an exception"):
            out.append(ev.SchedulerException(line, ts, rank, msg))
        return
    if c == "K":
        if msg.startswith("KV cache pool is full. Retract requests"):
            m = _RX_RETRACT.search(msg)
            out.append(ev.KvRetract(line, ts, rank, count(m.group(1)) if m else 1))
        elif msg.startswith("KV pool holds"):
            m = _RX_BELOW_CTX.match(msg)
            if m:
                out.append(ev.KvPoolBelowContext(line, ts, rank, count(m.group(1)), count(m.group(2)),
                                                 m.group(0)))
        return
    if c == "O" and msg.startswith("Out of memory. Try to lower your batch size"):
        out.append(kv_exhausted(line, ts, rank, msg, None, peek))
        return
    if c == "S":
        if msg.startswith("Scheduler hit an exception"):
            out.append(ev.SchedulerException(line, ts, rank))
        elif msg.startswith("SIGQUIT received"):
            out.append(ev.SigquitReceived(line, ts, rank, False, msg))
        elif msg.startswith("SIGTERM received. "):
            # tokenizer_manager.py (0.5.23): `SIGTERM received. signum=… frame=…. Draining requests
            # and shutting down...` — a stop was asked; the scheduler's -15 and SIGQUIT after it are its
            out.append(ev.ShutdownAsked(line, ts, rank, msg.strip()))
        elif msg.startswith("Subprocess scheduler_"):
            m = _RX_SUBPROC.search(msg)
            if m:
                out.append(ev.RankDead(line, ts, rank, _code(m.group(1)), _code(m.group(2)), "crashed", msg))
        elif msg.startswith("Scheduler or DataParallelController"):
            m = _RX_TERMINATED.search(msg)
            out.append(ev.RankDead(line, ts, rank, None, _code(m.group(1)) if m else None, "terminated", msg))
        elif msg.startswith("Scheduler watchdog timeout"):
            out.append(ev.EngineWatchdogFired(line, ts, rank, msg))
        return
    if c == "W":
        if msg.startswith("Watchdog timeout (self.watchdog_timeout"):
            out.append(ev.EngineWatchdogFired(line, ts, rank, msg))
        return
    if c == "E":
        if msg.startswith("Exit code:"):
            m = _RX_EXIT_CODE.match(msg)
            if m:
                out.append(ev.ExitCode(line, ts, rank, _code(m.group(1))))
        return
    if c == "R":
        if msg.startswith("Received sigquit from a child"):
            out.append(ev.SigquitReceived(line, ts, rank, True, msg))
        elif msg.startswith("Rank "):
            m = _RX_RANK_INIT.search(msg)
            if m:
                out.append(ev.RankDead(line, ts, rank, _code(m.group(1)), _code(m.group(2)), "died_during_init", msg))
            else:
                m = _RX_RANK_DEAD.search(msg)
                if m:
                    out.append(ev.RankDead(line, ts, rank, _code(m.group(1)), None, "dead", msg))
        return
