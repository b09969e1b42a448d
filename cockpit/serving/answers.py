"""One request of `cockpit bench` and its answer, read within bounds: the streamed `/v1/completions`
(or the engine's own `/generate`) timed on the client's clock, the token counts the server reports
(believed only within 0 … max_tokens), a refusal's message; and `/v1/models`.

Why a module of its own: reading what a server sends back — in bounded bytes (SSE lines, error
bodies, a whole answer) and time — is a job apart from scheduling the levels (loadgen.py) and from
the figures of the server's /metrics (servermetrics.py, which reads its body with `get_capped`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from cockpit.serving.workload import BenchSpec, Prompt

if TYPE_CHECKING:
    from cockpit.backends.base import GenerateApi

REQUEST_TIMEOUT_S = 600.0
# bounds on what the server may make us read
SSE_LINE_CAP = 1 << 20  # one SSE line (an event of a token or a few: ~300 bytes)
ERROR_BODY_CAP = 64 << 10  # the body of a refused request (only its start is shown)
WHOLE_ANSWER_CAP = 16 << 20  # a non-streamed answer
MODELS_CAP = 1 << 20  # /v1/models
MODELS_TIMEOUT_S = 10.0  # /v1/models, whole


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


def http_client() -> httpx.AsyncClient:
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
    async with http_client() as c:
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
