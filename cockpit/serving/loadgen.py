"""A bounded, closed-loop load generator for a live server: streaming `/v1/completions` (OpenAI,
SGLang and vLLM) or SGLang's `/generate`.

`concurrency` workers each keep one request in flight until `requests` have been sent or
`duration_s` has passed; requests still streaming at the deadline are cancelled (their tokens so far
count toward throughput, their latencies do not). A level stops early once `max_error_share` of its
finished requests failed (after at least ERROR_SAMPLE of them), and says why. Every request is timed
on the client's clock: TTFT (send → first token), ITL as the engines define it (decode time per output
token of one request: (E2E − TTFT) / (tokens − 1)), end-to-end. Token counts come from the server
(`usage` with `continuous_usage_stats`, or `meta_info.completion_tokens`), never from counting
words, and are believed only within what was asked for (0 … max_tokens).

Synthetic prompts are token ids drawn from the model's own tokenizer (`Vocab`: its regular ids, the
special ones left out), read on the server's host by `vocab_probe.py`; when no tokenizer can be read
they are text (words), and their length is the server's count, not ours.

While it runs, the server's `/metrics` is scraped once a second: the peaks of running and queued
requests and KV usage, the change of the server's own counters over the run (generated tokens,
requests, TTFT/E2E sums) and of its latency histograms (ITL, TPOT, TTFT quantiles from bucket
deltas), so that client and server figures can be held side by side.

Everything read from the server is bounded in bytes and in time (SSE lines, error bodies, a whole
answer, `/metrics`, `/v1/models`), and every number from it is checked (finite, in range) before use.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import httpx

from cockpit.errors import BadInput
from cockpit.remote import programs

if TYPE_CHECKING:
    from cockpit.backends.base import GenerateApi
    from cockpit.transport.base import Transport

REQUEST_TIMEOUT_S = 600.0
METRICS_INTERVAL_S = 1.0
# bounds on what the server may make us read
SSE_LINE_CAP = 1 << 20  # one SSE line (an event of a token or a few: ~300 bytes)
ERROR_BODY_CAP = 64 << 10  # the body of a refused request (only its start is shown)
WHOLE_ANSWER_CAP = 16 << 20  # a non-streamed answer
METRICS_CAP = 4 << 20  # /metrics (vLLM's on a busy server: ~100 KB)
MODELS_CAP = 1 << 20  # /v1/models
SCRAPE_TIMEOUT_S = 5.0  # one /metrics scrape, whole (a server dribbling a byte a second is cut)
MODELS_TIMEOUT_S = 10.0  # /v1/models, whole
CHECK_TOKENS = 8  # output tokens of the check request before the load
ERROR_SAMPLE = 8  # finished requests before a level may be stopped for its errors
DEFAULT_MAX_ERROR_SHARE = 0.5
# words for text prompts when the model's tokenizer cannot be read (most are one token each)
_WORD_TEXT = ("the of and to in is was for on that with as by at from his her an which were are this be or had not "
              "but have it they one all their has been its who more new other after first time two also into "
              "over only may when there some would these years city state used three")
WORDS = tuple(_WORD_TEXT.split())

# Server counters whose change over the run is reported (names without the `sglang:` prefix).
SERVER_COUNTERS = ("generation_tokens_total", "prompt_tokens_total", "num_requests_total",
                   "num_retracted_requests_total", "time_to_first_token_seconds_sum",
                   "time_to_first_token_seconds_count", "e2e_request_latency_seconds_sum",
                   "e2e_request_latency_seconds_count")
SERVER_PEAKS = ("num_running_reqs", "num_queue_reqs", "token_usage")
# vLLM's names for the same figures (its prefix is `vllm:`)
ALIASES = {"num_running_reqs": ("num_requests_running",), "num_queue_reqs": ("num_requests_waiting",),
           "token_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc"),
           "num_requests_total": ("request_success_total",), "num_retracted_requests_total": ("num_preemptions_total",),
           "max_total_num_tokens": ()}
# The servers' latency histograms (both engines' names): quantiles of their change over the run.
# `inter_token_latency`: one observation per decode step of a request; `request_time_per_output_token`
# (vLLM): one per request, (E2E − TTFT) / (tokens − 1), the client's `itl_ms` definition.
SERVER_HISTOGRAMS = {"itl": "inter_token_latency_seconds", "tpot": "request_time_per_output_token_seconds",
                     "ttft": "time_to_first_token_seconds"}
_WANTED = frozenset((*SERVER_COUNTERS, *SERVER_PEAKS, *(a for al in ALIASES.values() for a in al),
                     "max_total_num_tokens"))
_FRACTIONS = frozenset(("token_usage", "kv_cache_usage_perc", "gpu_cache_usage_perc"))
_LE = re.compile(r'\ble="([^"]{0,40})"')


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int] | None  # synthetic prompts are token ids: their length is exact
    text: str | None
    output_len: int


@dataclass(frozen=True)
class Vocab:
    """Token ids a synthetic prompt may hold: half-open ranges of the model's own ids."""

    ranges: tuple[tuple[int, int], ...]
    source: str  # where they were read ("tokenizer.json of DIR", "config.json of DIR …")

    @property
    def size(self) -> int:
        return sum(hi - lo for lo, hi in self.ranges)

    def sample(self, rng: random.Random, k: int) -> list[int]:
        out = []
        sizes = [hi - lo for lo, hi in self.ranges]
        for r in rng.choices(range(len(self.ranges)), weights=sizes, k=k):
            lo, hi = self.ranges[r]
            out.append(rng.randrange(lo, hi))
        return out


def vocab_from_probe(answer: Any) -> Vocab | str:
    """vocab_probe.py's answer → Vocab, or the reason there is none (a sentence)."""
    if not isinstance(answer, dict):
        return "unreadable answer from the tokenizer probe"
    if answer.get("error"):
        return str(answer["error"])[:300]
    where = str(answer.get("dir", "?"))[:300]
    if answer.get("source") == "tokenizer.json":
        raw = answer.get("ranges")
        ranges = tuple((int(r[0]), int(r[1])) for r in raw if _is_range(r)) if isinstance(raw, list) else ()
        if ranges:
            return Vocab(ranges, f"tokenizer.json in {where}")
        return f"{where}/tokenizer.json lists no usable token ids"
    n = answer.get("vocab_size")
    if answer.get("source") == "config.json" and isinstance(n, int) and 16 <= n < 10**7:
        # no tokenizer: the ids of special tokens are unknown; they sit at either end in practice
        lo, hi = n // 8, n * 3 // 4
        return Vocab(((lo, hi),), f"config.json in {where} (vocab_size {n}; no tokenizer.json: ids {lo}–{hi - 1})")
    return "the tokenizer probe's answer names no vocabulary"


def _is_range(r: Any) -> bool:
    return (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            and 0 <= r[0] < r[1] <= 10**7)


VOCAB_TIMEOUT_S = 30.0


async def read_vocab(transport: Transport, model: str, python: str | None,
                     env: Mapping[str, str] | None = None) -> tuple[Vocab | None, str]:
    """The model's token ids as its host sees them: vocab_probe.py runs on the host's Python (given
    on stdin; argv holds the path and the HF cache dirs, never a token). (Vocab, "") or (None, why)."""
    import sys

    from cockpit.transport.base import TransportError

    hf = {k: v for k, v in (env or {}).items() if k in ("HF_HOME", "HF_HUB_CACHE")}
    req = json.dumps({"path": model, "hf": hf}, separators=(",", ":"))
    try:
        done = await transport.run([python or sys.executable, "-", req], stdin=programs.assemble(programs.VOCAB_PROBE_PROGRAM),
                                   timeout=VOCAB_TIMEOUT_S)
    except TransportError as exc:
        return None, f"{transport.label}: {exc}"
    lines = done.stdout[-(1 << 20):].decode("utf-8", "replace").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except (ValueError, RecursionError):
        answer = None
    if answer is None:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"{transport.label}: the tokenizer probe failed ({err[-1][:200] if err else f'exit {done.returncode}'})"
    got = vocab_from_probe(answer)
    return (got, "") if isinstance(got, Vocab) else (None, got)


@dataclass
class BenchSpec:
    requests: int = 200
    concurrency: int = 8
    input_len: int = 1024
    output_len: int = 256
    duration_s: float = 120.0
    api: str = "openai"
    dataset: list[Prompt] | None = None  # None: synthetic
    seed: int = 0
    model: str | None = None  # the OpenAI `model` field; None asks /v1/models
    metrics_prefix: str = ""  # the backend's (`Backend.metrics.prefix`), set by the caller
    metrics_switch: str | None = None  # the flag that turns /metrics on (`EngineWords.metrics_switch`), set by the caller
    # the engine's own generate API when `api` names it (`Backend.metrics.native_api`); None: OpenAI's
    native: GenerateApi | None = field(default=None, repr=False)
    vocab: Vocab | None = None  # None: synthetic prompts are text
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE  # stop a level once this share of it failed
    explicit: frozenset[str] = frozenset()  # the lengths the operator chose ("input_len", "output_len")
    api_key: str | None = field(default=None, repr=False)  # the server's --api-key: a header, never output

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def prompts(self) -> Sequence[Prompt]:
        if self.dataset:
            return [self.dataset[i % len(self.dataset)] for i in range(self.requests)]
        return SyntheticPrompts(self)


class SyntheticPrompts(Sequence[Prompt]):
    """A spec's synthetic prompts, each drawn when first asked for, in order from one generator seeded
    with `spec.seed` (the same prompts as drawing them all up front). Drawn up front, `--requests 1000
    --input-len 16000` cost 16M token ids (~8 s of CPU) before the check request, and again before
    every level, although a time-limited level sends a few of them."""

    def __init__(self, spec: BenchSpec):
        self._spec = spec
        self._rng = random.Random(spec.seed)
        self._drawn: list[Prompt] = []

    def __len__(self) -> int:
        return self._spec.requests

    def _draw(self) -> Prompt:
        s = self._spec
        if s.vocab is None:
            return Prompt(None, " ".join(self._rng.choices(WORDS, k=s.input_len)), s.output_len)
        return Prompt(s.vocab.sample(self._rng, s.input_len), None, s.output_len)

    @overload
    def __getitem__(self, i: int) -> Prompt: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Prompt]: ...

    def __getitem__(self, i: int | slice) -> Prompt | Sequence[Prompt]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        while len(self._drawn) <= i:
            self._drawn.append(self._draw())
        return self._drawn[i]


@dataclass
class RequestResult:
    ok: bool
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None  # decode time per output token: (E2E − TTFT) / (tokens − 1)
    error: str | None = None
    cancelled: bool = False
    streamed: bool = True


def load_dataset(path: str, default_output_len: int) -> list[Prompt]:
    """JSONL, one request a line: {"prompt": "…"} or {"input_ids": […]}, optionally "output_len"
    (or "max_tokens")."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--dataset {path}: cannot read it ({exc})") from None
    out: list[Prompt] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BadInput(f"--dataset {path}:{i}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise BadInput(f"--dataset {path}:{i}: not a JSON object")
        out_len = obj.get("output_len", obj.get("max_tokens", default_output_len))
        if not isinstance(out_len, int) or out_len < 1:
            raise BadInput(f"--dataset {path}:{i}: output_len must be a positive integer")
        ids = obj.get("input_ids")
        if isinstance(ids, list) and ids and all(isinstance(x, int) and x >= 0 for x in ids):
            out.append(Prompt(list(ids), None, out_len))
        elif isinstance(obj.get("prompt"), str) and obj["prompt"]:
            out.append(Prompt(None, obj["prompt"], out_len))
        else:
            raise BadInput(f"--dataset {path}:{i}: needs a non-empty \"prompt\" string or \"input_ids\" list")
    if not out:
        raise BadInput(f"--dataset {path}: no requests in it")
    return out


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    """p50/p90/p99 (linear interpolation between ranks), in ms by default; None when nothing was measured."""
    xs = sorted(v for v in values if math.isfinite(v))
    if not xs:
        return {"p50": None, "p90": None, "p99": None}

    def q(p: float) -> float:
        k = (len(xs) - 1) * p
        lo = math.floor(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {f"p{int(p * 100)}": round(q(p) * scale, 2) for p in (0.5, 0.9, 0.99)}


def finite_json(obj: Any) -> Any:
    """Strict JSON: a float that is not finite has no JSON spelling; it is unknown (null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


_HTTP_STATUS = re.compile(r"HTTP \d{3}\b")
_SHAPE_SUBS = (
    (re.compile(r"\b(?=[0-9]{0,63}[a-f])[0-9a-f]{8,64}\b"), "…"),  # request ids, hashes (a letter in them)
    (re.compile(r"\d{1,40}(?:\.\d{1,40})?"), "N"),  # every number: token ids, lengths, ports
)


def error_shape(message: str) -> str:
    """The kind of an error: its message with every number spelled N (one kind for "Token id 14233
    is out of vocabulary" and "Token id 981 …")."""
    s = message[:300]
    head = _HTTP_STATUS.match(s)  # the status stays a kind of its own: 400 is not 500
    keep, s = (head.group(0), s[head.end():]) if head else ("", s)
    for pat, rep in _SHAPE_SUBS:
        s = pat.sub(rep, s)
    return keep + s


@dataclass
class Progress:
    concurrency: int
    done: int
    total: int
    errors: int
    elapsed_s: float
    output_tokens: int
    server: dict[str, float]

    def line(self) -> str:
        tps = self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0
        srv = ""
        if self.server:
            srv = (f" · server running {self.server.get('num_running_reqs', 0):.0f}"
                   f" queue {self.server.get('num_queue_reqs', 0):.0f}"
                   f" KV {self.server.get('token_usage', 0):.2f}")
        return (f"c={self.concurrency} {self.done}/{self.total} done · {self.errors} errors · "
                f"{tps:,.0f} tok/s · {self.elapsed_s:.0f} s{srv}")


def _client() -> httpx.AsyncClient:
    # trust_env=False: a proxy must never swallow loopback / tunnel traffic. TCP_NODELAY: the request
    # body goes out in a second write, which Nagle would hold until the server's delayed ACK (~40 ms)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0), trust_env=False,
                             transport=transport)


class BodyTooLarge(Exception):
    pass


async def read_capped(r: httpx.Response, cap: int) -> bytes:
    """The response body, refused (BodyTooLarge) past `cap` bytes: never more than cap + a chunk held."""
    buf = bytearray()
    async for chunk in r.aiter_bytes():
        buf += chunk
        if len(buf) > cap:
            raise BodyTooLarge(f"a body over {cap:,} bytes")
    return bytes(buf)


async def sse_lines(r: httpx.Response, cap: int = SSE_LINE_CAP) -> AsyncIterator[str]:
    """The lines of a streamed body (\\n, \\r\\n); a line over `cap` bytes raises BodyTooLarge. Each
    chunk is searched once (a line dribbled a byte at a time costs linear time, not quadratic)."""
    buf = bytearray()
    async for chunk in r.aiter_bytes():
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            buf += chunk[start:nl]
            line = bytes(buf).rstrip(b"\r").decode("utf-8", "replace")
            buf.clear()
            start = nl + 1
            yield line
        buf += chunk[start:]
        if len(buf) > cap:
            raise BodyTooLarge(f"an SSE line over {cap:,} bytes")
    if buf:
        yield bytes(buf).rstrip(b"\r").decode("utf-8", "replace")


async def _no_lines() -> AsyncIterator[str]:
    return
    yield  # an async generator that yields nothing


async def get_capped(client: httpx.AsyncClient, url: str, cap: int, timeout: float,
                     headers: dict[str, str] | None = None) -> tuple[int, bytes] | None:
    """GET, whole, within `timeout` seconds and `cap` bytes; None when it did not answer so."""
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("GET", url, timeout=timeout, headers=headers) as r:
                return r.status_code, await read_capped(r, cap)
    except (httpx.HTTPError, BodyTooLarge, TimeoutError):
        return None


@dataclass(frozen=True)
class ServedModel:
    id: str | None
    context_len: int | None  # the card's `max_model_len`, as the server reports it (both engines' /v1/models)


async def served_model(base_url: str, api_key: str | None = None) -> ServedModel:
    async with _client() as c:
        got = await get_capped(c, base_url.rstrip("/") + "/v1/models", MODELS_CAP, MODELS_TIMEOUT_S,
                               BenchSpec(api_key=api_key).headers())
    if got is None or got[0] != 200:
        return ServedModel(None, None)
    try:
        card = json.loads(got[1])["data"][0]
        mid = card["id"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return ServedModel(None, None)
    n = card.get("max_model_len") if isinstance(card, dict) else None
    ok = isinstance(n, int) and not isinstance(n, bool) and 0 < n < 2**40
    return ServedModel(str(mid)[:500] if isinstance(mid, (str, int)) else None, n if ok else None)


def _request(spec: BenchSpec, prompt: Prompt) -> tuple[str, dict[str, Any]]:
    if spec.native is not None:
        return spec.native.path, spec.native.body(prompt.text, prompt.token_ids, prompt.output_len)
    body: dict[str, Any] = {"model": spec.model or "default", "prompt": prompt.token_ids if prompt.token_ids is not None else prompt.text,
            "max_tokens": prompt.output_len, "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    return "/v1/completions", body


class ImplausibleCount(Exception):
    pass


def _count(v: Any, limit: int) -> int | None:
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= limit:
        raise ImplausibleCount(f"the server reported {v} output tokens for max_tokens {limit}")
    return v


def _tokens_in(event: dict[str, Any], native: GenerateApi | None, seen: int, limit: int) -> int | None:
    """Output tokens so far according to one streamed event (None: the event says nothing); a count
    outside 0 … limit (the max_tokens asked for) raises ImplausibleCount."""
    if native is not None:
        return _count(native.output_tokens(event), limit)
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return _count(usage["completion_tokens"], limit)
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and choices[0].get("text"):
        return _count(seen + 1, limit)  # a server without continuous usage: one token per chunk (vLLM's default)
    return None


def _http_error(status: int, body: bytes) -> str:
    """`HTTP 400: <the server's message>` (OpenAI-style JSON's error.message when there is one)."""
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (err if isinstance(err, str) else None)
        if isinstance(msg, str) and msg:
            text = msg
    except (ValueError, RecursionError):
        pass
    return f"HTTP {status}: {' '.join(text.split())[:200]}"


async def one_request(client: httpx.AsyncClient, base_url: str, spec: BenchSpec, prompt: Prompt,
                      on_tokens: Callable[[int], None]) -> RequestResult:
    path, body = _request(spec, prompt)
    content = json.dumps(body).encode()  # serialised before the clock starts
    res = RequestResult(ok=False)
    t0 = time.perf_counter()
    seen = 0
    limit = prompt.output_len
    try:
        async with client.stream("POST", base_url.rstrip("/") + path, content=content,
                                 headers={"Content-Type": "application/json", **spec.headers()}) as r:
            if r.status_code != 200:
                try:
                    res.error = _http_error(r.status_code, await read_capped(r, ERROR_BODY_CAP))
                except BodyTooLarge:
                    res.error = f"HTTP {r.status_code} (its body is over {ERROR_BODY_CAP:,} bytes: not read)"
                return res
            if r.headers.get("content-type", "").startswith("application/json"):
                # the server ignored `stream`: every token arrives with the answer (TTFT = E2E, no ITL)
                try:
                    whole = json.loads(await read_capped(r, WHOLE_ANSWER_CAP))
                except (ValueError, RecursionError):
                    whole = None
                n = _tokens_in(whole, spec.native, 0, limit) if isinstance(whole, dict) else None
                res.streamed = False
                if n:
                    res.ttft_s = time.perf_counter() - t0
                    on_tokens(n)
                    seen = n
            lines = sse_lines(r) if res.streamed else _no_lines()
            async for line in lines:
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(event, dict):
                    continue
                if "error" in event or event.get("object") == "error":
                    err = event.get("error") or event.get("message")
                    if isinstance(err, dict):
                        err = err.get("message", err)
                    res.error = f"stream error: {' '.join(str(err).split())[:200]}"
                    return res
                n = _tokens_in(event, spec.native, seen, limit)
                if n is None or n <= seen:
                    continue
                if seen == 0:
                    res.ttft_s = time.perf_counter() - t0
                on_tokens(n - seen)
                seen = n
    except asyncio.CancelledError:
        res.output_tokens = seen
        res.cancelled = True
        raise
    except (BodyTooLarge, ImplausibleCount) as exc:
        res.error = str(exc)
        res.output_tokens = seen
        return res
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:200]
        res.output_tokens = seen
        return res
    res.output_tokens = seen
    res.e2e_s = time.perf_counter() - t0
    res.ok = seen > 0
    if not res.ok:
        res.error = "no tokens in the answer"
    elif res.streamed and res.ttft_s is not None and seen > 1:
        res.itl_s = (res.e2e_s - res.ttft_s) / (seen - 1)
    return res


def parse_scrape(text: str, prefix: str) -> dict[str, Any]:
    """The figures bench uses from a /metrics body: {name without prefix: value} for the counters and
    gauges it knows (label sets folded: counts summed, fractions the maximum), and
    {"buckets": {histogram: {le: cumulative count}}} for SERVER_HISTOGRAMS. Only lines that start with
    the prefix and name a wanted metric are looked at; a value that is not a finite number ≥ 0 (a
    fraction above 1) is left out, as if the server had not sent it."""
    out: dict[str, Any] = {}
    buckets: dict[str, dict[float, float]] = {}
    hists = {h + "_bucket": h for h in SERVER_HISTOGRAMS.values()}
    n = len(prefix)
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        brace = line.find("{", n)
        space = line.find(" ", n)
        if brace >= 0 and (space < 0 or brace < space):
            name, close = line[n:brace], line.rfind("}")
            if close < brace:
                continue
            labels, rest = line[brace:close], line[close + 1:]
        else:
            if space < 0:
                continue
            name, labels, rest = line[n:space], "", line[space:]
        hist = hists.get(name)
        if name not in _WANTED and hist is None:
            continue
        parts = rest.split(None, 2)
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if not (math.isfinite(value) and value >= 0) or (name in _FRACTIONS and value > 1.0):
            continue
        if hist is not None:
            m = _LE.search(labels)
            try:
                le = float(m.group(1)) if m else math.nan
            except ValueError:
                continue
            if le == le and le >= 0:  # +Inf is a bound here
                b = buckets.setdefault(hist, {})
                b[le] = b.get(le, 0.0) + value
            continue
        if name not in out:
            out[name] = value
        elif name in _FRACTIONS or name == "max_total_num_tokens":
            out[name] = max(out[name], value)
        else:
            out[name] += value
    for name, others in ALIASES.items():
        for other in others:
            if name not in out and other in out:
                out[name] = out[other]
    out["buckets"] = buckets
    return out


async def scrape(client: httpx.AsyncClient, base_url: str, prefix: str) -> dict[str, Any] | None:
    """The server's /metrics, names without the prefix and in SGLang's words; None when it does not
    answer within SCRAPE_TIMEOUT_S and METRICS_CAP bytes. Parsed in a thread: a large body must not
    hold the event loop the requests are timed on."""
    got = await get_capped(client, base_url.rstrip("/") + "/metrics", METRICS_CAP, SCRAPE_TIMEOUT_S)
    if got is None or got[0] != 200:
        return None
    return await asyncio.to_thread(lambda: parse_scrape(got[1].decode("utf-8", "replace"), prefix))


def hist_quantiles(before: dict[float, float], after: dict[float, float], scale: float = 1000.0) -> dict[str, Any] | None:
    """p50/p99 of what a histogram observed between two scrapes (Prometheus' histogram_quantile:
    linear within the bucket), and the count; None when it observed nothing."""
    les = sorted(after)
    cum = [max(0.0, after[le] - before.get(le, 0.0)) for le in les]
    for i in range(1, len(cum)):  # cumulative counts never fall; a reset or a torn scrape would
        cum[i] = max(cum[i], cum[i - 1])
    if not les or les[-1] != math.inf or cum[-1] <= 0:
        return None
    total = cum[-1]

    def q(p: float) -> float | None:
        rank = p * total
        prev_le, prev_c = 0.0, 0.0
        for le, c in zip(les, cum, strict=True):
            if c >= rank:
                if le == math.inf:  # in the open top bucket: the highest finite bound is all we know
                    return prev_le * scale
                width = c - prev_c
                return (prev_le + (le - prev_le) * ((rank - prev_c) / width if width > 0 else 1.0)) * scale
            prev_le, prev_c = le, c
        return None

    p50, p99 = q(0.5), q(0.99)
    return {"p50": None if p50 is None else round(p50, 2), "p99": None if p99 is None else round(p99, 2),
            "count": int(total)}


def _server_summary(before: dict[str, Any] | None, after: dict[str, Any] | None,
                    peaks: dict[str, float], series: list[tuple[float, dict[str, float]]], duration: float,
                    switch: str | None = None) -> dict[str, Any]:
    if before is None or after is None:
        how = f" (start the server with {switch})" if switch else ""
        return {"available": False, "reason": f"/metrics did not answer{how}"}
    out: dict[str, Any] = {"available": True, "samples": len(series)}
    # steady state: the samples of the second half (the start's burst of prefills queues everything)
    late = [m for t, m in series if t >= duration / 2]
    for k in SERVER_PEAKS:
        out[f"peak_{k}"] = peaks.get(k)
        vals = [m[k] for m in late if k in m]
        out[f"steady_{k}"] = round(sum(vals) / len(vals), 4) if vals else None
    for k in SERVER_COUNTERS:
        if k in after and k in before and after[k] >= before[k]:
            out[f"delta_{k}"] = round(after[k] - before[k], 6)
    n = out.get("delta_time_to_first_token_seconds_count")
    if n:
        out["mean_ttft_ms"] = round(out["delta_time_to_first_token_seconds_sum"] / n * 1000, 2)
    n = out.get("delta_e2e_request_latency_seconds_count")
    if n:
        out["mean_e2e_ms"] = round(out["delta_e2e_request_latency_seconds_sum"] / n * 1000, 2)
    for key, hist in SERVER_HISTOGRAMS.items():
        if hist in after["buckets"]:
            out[f"{key}_ms"] = hist_quantiles(before["buckets"].get(hist, {}), after["buckets"][hist])
    if "max_total_num_tokens" in after and after["max_total_num_tokens"] < 2**53:
        out["max_total_num_tokens"] = int(after["max_total_num_tokens"])
    return out


def _cpu_s() -> float:
    return time.process_time()


async def run_level(base_url: str, spec: BenchSpec, on_progress: Callable[[Progress], None] | None = None,
                    progress_every_s: float = 0.5) -> dict[str, Any]:
    """One closed-loop run at `spec.concurrency`; the `bench --json` shape for it."""
    prompts = spec.prompts()
    results: list[RequestResult] = []
    tokens = [0]
    next_i = [0]
    peaks: dict[str, float] = {}
    series: list[tuple[float, dict[str, float]]] = []  # (seconds into the run, sample)
    last_metrics: dict[str, float] = {}
    stopped: list[str] = []  # why the level stopped early
    too_many_errors = asyncio.Event()

    def count(n: int) -> None:
        tokens[0] += n

    def check_errors() -> None:
        bad = sum(1 for r in results if not r.ok)
        if len(results) >= min(ERROR_SAMPLE, len(prompts)) and bad > 0 and bad >= spec.max_error_share * len(results):
            if not stopped:
                stopped.append(f"{bad} of {len(results)} requests failed (stop at {spec.max_error_share:.0%}, "
                               "--max-error-share)")
            too_many_errors.set()

    cpu0 = _cpu_s()
    async with _client() as client:
        before = await scrape(client, base_url, spec.metrics_prefix)
        t0 = time.perf_counter()
        deadline = t0 + spec.duration_s

        async def worker() -> None:
            while next_i[0] < len(prompts) and time.perf_counter() < deadline and not too_many_errors.is_set():
                p = prompts[next_i[0]]
                next_i[0] += 1
                results.append(await one_request(client, base_url, spec, p, count))
                check_errors()

        async def watch() -> None:
            # its own client: behind a pool busy with many streams, a scrape can wait for seconds.
            # /metrics once a second (the server renders it in the process that serves the requests),
            # the progress line more often
            async with _client() as mc:
                last = -math.inf
                while True:
                    due = time.perf_counter() - last >= METRICS_INTERVAL_S
                    if due:
                        last = time.perf_counter()
                    await watch_once(mc, due)
                    await asyncio.sleep(min(progress_every_s, METRICS_INTERVAL_S))

        async def watch_once(mc: httpx.AsyncClient, scrape_now: bool) -> None:
            m = await scrape(mc, base_url, spec.metrics_prefix) if before is not None and scrape_now else None
            if m is not None:
                sample = {k: m[k] for k in SERVER_PEAKS if k in m}
                series.append((time.perf_counter() - t0, sample))
                last_metrics.clear()
                last_metrics.update(sample)
                for k, v in sample.items():
                    peaks[k] = max(peaks.get(k, 0.0), v)
            if on_progress is not None:
                on_progress(Progress(spec.concurrency, len(results), len(prompts),
                                     sum(1 for r in results if not r.ok), time.perf_counter() - t0,
                                     tokens[0], dict(last_metrics)))

        workers = [asyncio.create_task(worker()) for _ in range(max(1, spec.concurrency))]
        watcher = asyncio.create_task(watch())
        all_done = asyncio.create_task(asyncio.wait(workers))
        stop_wait = asyncio.create_task(too_many_errors.wait())
        cancelled = 0
        try:
            await asyncio.wait([all_done, stop_wait], timeout=max(0.0, deadline - time.perf_counter()),
                               return_when=asyncio.FIRST_COMPLETED)
            pending = [w for w in workers if not w.done()]
            for t in pending:
                t.cancel()
            cancelled = len(pending)
            await asyncio.gather(*pending, return_exceptions=True)
            for t in workers:
                if not t.cancelled():
                    t.result()
        finally:
            all_done.cancel()
            stop_wait.cancel()
            watcher.cancel()
            await asyncio.gather(watcher, all_done, stop_wait, return_exceptions=True)
        duration = time.perf_counter() - t0
        after = await scrape(client, base_url, spec.metrics_prefix) if before is not None else None
    cpu = _cpu_s() - cpu0
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    kinds: dict[str, int] = {}
    for r in errors:
        k = error_shape(r.error or "unknown")
        kinds[k] = kinds.get(k, 0) + 1
    out = {
        "concurrency": spec.concurrency,
        "requests": len(ok),
        "errors": len(errors),
        "cancelled": cancelled,
        "stopped": stopped[0] if stopped else None,
        # answers that came whole although streaming was asked for: their TTFT is their E2E
        "not_streamed": sum(1 for r in results if not r.streamed),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "duration_s": round(duration, 3),
        "output_tokens": tokens[0],
        "output_tok_s": round(tokens[0] / duration, 2) if duration > 0 else None,
        "requests_per_s": round(len(ok) / duration, 3) if duration > 0 else None,
        "ttft_ms": percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": percentiles([r.itl_s for r in ok if r.itl_s is not None]),
        "e2e_ms": percentiles([r.e2e_s for r in ok if r.e2e_s is not None]),
        "mean_ttft_ms": round(sum(r.ttft_s or 0 for r in ok) / len(ok) * 1000, 2) if ok else None,
        "mean_e2e_ms": round(sum(r.e2e_s or 0 for r in ok) / len(ok) * 1000, 2) if ok else None,
        "client_cpu_s": round(cpu, 3),
        "server": _server_summary(before, after, peaks, series, duration, spec.metrics_switch),
    }
    return finite_json(out)


async def check_request(base_url: str, spec: BenchSpec) -> RequestResult:
    """One short request alone before any load (as `vllm bench serve` does): a server that refuses
    the bench's requests is told once, not once per request of every level. The first prompt, at most
    CHECK_TOKENS out, within the level's time limit."""
    if not spec.requests:
        return RequestResult(ok=True)
    p = spec.prompts()[0]
    prompt = Prompt(p.token_ids, p.text, min(p.output_len, CHECK_TOKENS))
    async with _client() as client:
        try:
            async with asyncio.timeout(spec.duration_s):
                return await one_request(client, base_url, spec, prompt, lambda n: None)
        except TimeoutError:
            return RequestResult(ok=False, error=f"no answer within --duration {spec.duration_s:g} s")


async def run_bench(base_url: str, spec: BenchSpec, levels: list[int],
                    on_progress: Callable[[Progress], None] | None = None,
                    served: ServedModel | None = None) -> dict[str, Any]:
    """Every concurrency level in turn, after one check request. The top-level figures are the level
    with the highest output tok/s; `levels` lists them all (DESIGN.md's `bench --json` shape plus
    those keys). A level stopped for its errors ends the bench: the levels after it are not run."""
    if spec.api == "openai" and spec.model is None:
        spec.model = (served or await served_model(base_url, spec.api_key)).id
    runs = []
    stopped: str | None = None
    first = await check_request(base_url, spec)
    if not first.ok:
        stopped = f"the check request before the load failed: {first.error}"
    else:
        for c in levels:
            level = BenchSpec(**{**spec.__dict__, "concurrency": c})
            runs.append(await run_level(base_url, level, on_progress))
            if runs[-1]["stopped"]:
                stopped = f"concurrency {c} stopped: {runs[-1]['stopped']}"
                break
    if runs:
        out = dict(max(runs, key=lambda r: r["output_tok_s"] or 0.0))
    else:
        out = {"concurrency": levels[0], "requests": 0, "errors": 1, "cancelled": 0, "stopped": stopped,
               "not_streamed": 0, "error_kinds": {error_shape(first.error or "unknown"): 1}, "duration_s": 0.0,
               "output_tokens": 0, "output_tok_s": None, "requests_per_s": None,
               "ttft_ms": percentiles([]), "itl_ms": percentiles([]), "e2e_ms": percentiles([]),
               "mean_ttft_ms": None, "mean_e2e_ms": None, "client_cpu_s": None,
               "server": {"available": False, "reason": "no load was sent"}}
    out["levels"] = runs
    out["not_run"] = [c for c in levels[len(runs):]]
    out["bench_stopped"] = stopped
    out["api"] = spec.api
    out["input_len"] = None if spec.dataset else spec.input_len
    out["output_len"] = None if spec.dataset else spec.output_len
    out["prompts"] = ("dataset" if spec.dataset else "token ids from " + spec.vocab.source if spec.vocab
                      else "text (words; the model's tokenizer was not read): prompt lengths are the server's count")
    return finite_json(out)
