"""HTTP probes of a running server: readiness, /server_info, Prometheus metrics.

Which endpoint tells readiness and which prefix the server's metrics carry is the backend's
knowledge (`Backend.launch.readiness_path`, `Backend.metrics.path`, `.prefix`); this module only asks.

Reach the server through `transport.forward_port(port)` and pass the resulting base URL
("http://127.0.0.1:<local port>"); call forward_port again before each probe after a possible
link drop (it is cheap and returns the re-established tunnel's port).

Readiness (reference/sglang.md §6): the log line "The server is fired up and ready to roll!"
AND /health answering 200 (on 0.5.23 prefer /ready). The port refuses connections while weights
load and graphs capture, /health answers 503 during warmup, and a healthy /health costs at least
~1 s (it runs a 1-token generation), so its timeout is well above that and it is polled sparingly.
Hosts with --node-rank >= 1 serve a dummy /health that always answers 200: never probe them for
readiness (`should_probe_readiness`).

Bounded in bytes and in time: a server is not trusted to end its answer. Each probe has one
deadline for the whole exchange (connect, headers, body), not httpx's per-read timeouts (a server
that sends a byte a second never trips those). Readiness reads the status line and headers only
and closes the connection (a /health that streams forever cost 1.8 GB in 8 s when read whole);
/server_info and the metrics endpoint read at most MAX_INFO_BYTES / MAX_METRICS_BYTES (decoded)
and give up (None) past that.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import ssl
from typing import Any

import httpx

from cockpit.core.ownlines import HEADERS, own_path
from cockpit.core.serving import metric_families

# SGLANG_HEALTH_CHECK_TIMEOUT is 20 s by default: /health may legitimately take that long.
HEALTH_TIMEOUT_S = 25.0
CONNECT_TIMEOUT_S = 3.0
INFO_TIMEOUT_S = 10.0
# Suggested pause between /health probes once the port is open (it costs the server a generation).
HEALTH_POLL_INTERVAL_S = 5.0

_COUNTISH = re.compile(r"(^|:)num_|throughput|_total$|_count$")
# Free-memory figures: the worst rank is the one with the least.
_HEADROOMISH = re.compile(r"avail|free|headroom")


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # A new client loads the CA bundle again (~30 ms of CPU): once per process, not once per probe
    # (a probe every 1-2 s made that most of the TUI's idle CPU).
    return httpx.create_ssl_context()


def _client(timeout: float) -> httpx.AsyncClient:
    # trust_env=False: an operator's HTTP(S)_PROXY must not swallow requests to 127.0.0.1 tunnels.
    # every request carries Cockpit's User-Agent and its path the marker (cockpit/core/ownlines.py):
    # recognisable in the server's access log, and left out of what Cockpit shows of it
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S), trust_env=False,
                             verify=_ssl_context(), headers=HEADERS)


# what a probe reads of a body at most: /server_info is a few KiB, SGLang's /metrics with
# histograms per rank a few hundred KiB (a 64-GPU job's well under 8 MiB)
MAX_INFO_BYTES = 1 << 20
MAX_METRICS_BYTES = 8 << 20


class BodyTooLarge(Exception):
    """The server's answer went past what the probe reads."""


async def _exchange(url: str, timeout: float, client: httpx.AsyncClient | None,
                    limit: int | None) -> tuple[int, bytes]:
    """(status, body) of GET url. The body is read only when `limit` is given, and then at most
    `limit` decoded bytes (BodyTooLarge past that); with None the connection is closed after the
    headers, unread. The caller bounds the time."""
    per_op = httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S)

    async def go(c: httpx.AsyncClient) -> tuple[int, bytes]:
        async with c.stream("GET", url, timeout=per_op) as r:
            if limit is None:
                return r.status_code, b""
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise BodyTooLarge(f"{url}: more than {limit} bytes")
            return r.status_code, bytes(body)

    if client is not None:
        return await go(client)
    async with _client(timeout) as c:
        return await go(c)


async def _status(base_url: str, path: str, timeout: float, client: httpx.AsyncClient | None) -> str:
    url = base_url.rstrip("/") + own_path(path)
    try:
        async with asyncio.timeout(timeout + CONNECT_TIMEOUT_S):  # the whole exchange, however the server paces it
            code, _ = await _exchange(url, timeout, client, None)
    except httpx.ConnectError:
        return "refused"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        # Through an SSH tunnel a closed remote port shows up as the tunnel hanging up without
        # an answer, not as a refused connection: it means the same thing here.
        return "refused"
    except (httpx.TimeoutException, TimeoutError):
        return "timeout"
    return str(code)


async def probe_health(
    base_url: str, *, timeout: float = HEALTH_TIMEOUT_S, client: httpx.AsyncClient | None = None
) -> str:
    """GET /health: "refused" (loading/capturing), "503" (warmup/unhealthy), "200" (ready), "timeout",
    or another status code as text."""
    return await _status(base_url, "/health", timeout, client)


async def probe_ready(
    base_url: str, *, timeout: float = INFO_TIMEOUT_S, client: httpx.AsyncClient | None = None
) -> str:
    """GET /ready (SGLang 0.5.23+; "404" on older versions): same words as probe_health."""
    return await _status(base_url, "/ready", timeout, client)


def should_probe_readiness(node_rank: int) -> bool:
    """Only node 0 serves the API; other nodes answer a dummy /health with 200 regardless."""
    return node_rank == 0


async def probe_status(
    base_url: str, path: str, *, timeout: float = HEALTH_TIMEOUT_S, client: httpx.AsyncClient | None = None
) -> str:
    """GET `path` (the backend's readiness endpoint): the same words as probe_health."""
    return await _status(base_url, path, timeout, client)


async def _get(base_url: str, path: str, timeout: float, client: httpx.AsyncClient | None,
               limit: int) -> tuple[int, bytes] | None:
    """(status, body) of GET base_url + path; None when the server cannot be reached, does not
    answer within `timeout` in all, or sends more than `limit` bytes."""
    url = base_url.rstrip("/") + own_path(path)
    try:
        async with asyncio.timeout(timeout):
            return await _exchange(url, timeout, client, limit)
    except (httpx.HTTPError, TimeoutError, BodyTooLarge):
        return None


async def server_info(
    base_url: str, *, timeout: float = INFO_TIMEOUT_S, client: httpx.AsyncClient | None = None
) -> dict[str, Any] | None:
    """GET /server_info (falls back to the deprecated /get_server_info); None when unreachable,
    too slow, too large or not JSON."""
    for path in ("/server_info", "/get_server_info"):
        r = await _get(base_url, path, timeout, client, MAX_INFO_BYTES)
        if r is None:
            return None
        code, body = r
        if code == 404:
            continue
        if code != 200:
            return None
        try:
            data = json.loads(body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None
    return None


def parse_metrics(text: str, prefix: str) -> dict[str, float]:
    """Prometheus text → {name: value} for gauges and counters whose name starts with `prefix`.

    A name exported with several label sets (one per TP/DP rank) is folded: counts and
    throughputs (num_*, *throughput*, *_total) are summed; free-memory figures (*avail*, *free*)
    take the minimum and everything else (usage ratios) the maximum: the worst rank either way.
    """
    out: dict[str, float] = {}
    families = metric_families(text)
    for fam in families:
        if fam.type not in ("gauge", "counter", "untyped", "unknown"):
            continue
        for s in fam.samples:
            name = s.name
            if not name.startswith(prefix) or name.endswith("_created"):
                continue
            value = float(s.value)
            if not math.isfinite(value):  # NaN, ±Inf: unknown, leave it out
                continue
            if name not in out:
                out[name] = value
            elif _COUNTISH.search(name.removeprefix(prefix)):
                out[name] += value
            elif _HEADROOMISH.search(name):
                out[name] = min(out[name], value)
            else:
                out[name] = max(out[name], value)
    return out


async def metrics(
    base_url: str, path: str, prefix: str, *, timeout: float = INFO_TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
) -> dict[str, float] | None:
    """GET the metrics endpoint parsed (see parse_metrics); None when unreachable or not enabled
    (SGLang's --enable-metrics off: 404)."""
    r = await _get(base_url, path, timeout, client, MAX_METRICS_BYTES)
    if r is None or r[0] != 200:
        return None
    return parse_metrics(r[1].decode("utf-8", "replace"), prefix)


# What the serving watch reads of /metrics (every 2 s, for the figures): lower than what a one-off
# probe accepts. A body past it is not read at all, and the figures say so.
MAX_SERVING_METRICS_BYTES = 4 << 20


async def metrics_body(
    base_url: str, path: str, *, timeout: float = INFO_TIMEOUT_S, limit: int = MAX_SERVING_METRICS_BYTES,
    client: httpx.AsyncClient | None = None,
) -> tuple[bytes | None, str | None]:
    """(the metrics endpoint's body, None), or (None, why in the operator's words) when it was too
    large or did not answer in time; (None, None) when unreachable or not enabled (404), which
    the readiness probe and the engine's flags already tell."""
    url = base_url.rstrip("/") + own_path(path)
    try:
        async with asyncio.timeout(timeout):
            code, body = await _exchange(url, timeout, client, limit)
    except BodyTooLarge:
        return None, (f"metrics too large: {path} is over {limit >> 20} MiB, not read (the serving figures "
                      "need only a few of its families)")
    except (httpx.TimeoutException, TimeoutError):
        return None, f"{path} did not answer within {timeout:g} s"
    except httpx.HTTPError:
        return None, None
    return (body, None) if code == 200 else (None, None)


async def metrics_text(
    base_url: str, path: str, *, timeout: float = INFO_TIMEOUT_S, client: httpx.AsyncClient | None = None,
) -> str | None:
    """GET the metrics endpoint as text (histograms included, for cockpit/core/serving.py); None
    when unreachable or not enabled."""
    r = await _get(base_url, path, timeout, client, MAX_METRICS_BYTES)
    if r is None or r[0] != 200:
        return None
    return r[1].decode("utf-8", "replace")


async def first_model(base_url: str, *, api_key: str | None = None, timeout: float = INFO_TIMEOUT_S) -> str | None:
    """The first model id `/v1/models` lists (what a completion must name); None when unknown."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/") + own_path("/v1/models")
    try:
        # bounded like every probe (a hostile or broken server cannot feed it without end)
        async with asyncio.timeout(timeout), _client(timeout) as c, c.stream("GET", url, headers=headers) as r:
            if r.status_code != 200:
                return None
            body = b""
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > MAX_INFO_BYTES:
                    return None
        data = json.loads(body)
    except (httpx.HTTPError, TimeoutError, ValueError):
        return None
    items = data.get("data") if isinstance(data, dict) else None
    if isinstance(items, list) and items and isinstance(items[0], dict) and isinstance(items[0].get("id"), str):
        return str(items[0]["id"])
    return None


# the smallest request both engines accept: a one-character prompt, one token out (max_tokens 0 is
# refused by vLLM's request validation); greedy, so it costs the same every time
PROBE_PROMPT = "."


async def probe_generate(base_url: str, model: str, *, api_key: str | None = None, timeout: float) -> str:
    """Cockpit's hang probe: a one-token completion. "ok" when the engine generated it, "timeout"
    when it did not answer within `timeout`, else what went wrong ("refused", "HTTP 503")."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
    try:
        async with _client(timeout) as c:
            r = await c.post(base_url.rstrip("/") + own_path("/v1/completions"), json=body, headers=headers)
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError:
        return "refused"
    return "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
