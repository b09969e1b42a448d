"""A bounded, closed-loop load generator for a live server: streaming `/v1/completions` (OpenAI,
SGLang and vLLM) or SGLang's `/generate`.

`concurrency` workers each keep one request in flight until `requests` have been sent or
`duration_s` has passed; requests still streaming at the deadline are cancelled (their tokens so far
count toward throughput, their latencies do not). Every request is timed on the client's clock:
TTFT (send → first token), inter-token latency (the gap between two token-bearing chunks divided
by the tokens the later one brings), end-to-end. Token counts come from the server (`usage` with
`continuous_usage_stats`, or `meta_info.completion_tokens`), never from counting words.

While it runs, the server's `/metrics` is scraped once a second: the peaks of running and queued
requests and KV usage, and the change of the server's own counters over the run (generated
tokens, requests, TTFT/E2E sums), so that client and server figures can be held side by side.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cockpit.errors import BadInput
from cockpit.telemetry.probes import parse_metrics

API_CHOICES = ("openai", "sglang")
REQUEST_TIMEOUT_S = 600.0
METRICS_INTERVAL_S = 1.0
# token ids for synthetic prompts: inside every real vocabulary, away from the special tokens
SYNTH_TOKEN_RANGE = (1000, 20000)

# Server counters whose change over the run is reported (names without the `sglang:` prefix).
SERVER_COUNTERS = ("generation_tokens_total", "prompt_tokens_total", "num_requests_total",
                   "num_retracted_requests_total", "time_to_first_token_seconds_sum",
                   "time_to_first_token_seconds_count", "e2e_request_latency_seconds_sum",
                   "e2e_request_latency_seconds_count")
SERVER_PEAKS = ("num_running_reqs", "num_queue_reqs", "token_usage")
# vLLM's names for the same figures (its prefix is `vllm:`)
ALIASES = {"num_running_reqs": ("num_requests_running",), "num_queue_reqs": ("num_requests_waiting",),
           "token_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc"),
           "num_requests_total": ("request_success_total",), "num_retracted_requests_total": ("num_preemptions_total",)}


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int] | None  # synthetic prompts are token ids: their length is exact
    text: str | None
    output_len: int


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
    metrics_prefix: str = "sglang:"  # the backend's (`Backend.metrics_prefix`)

    def prompts(self) -> list[Prompt]:
        if self.dataset:
            return [self.dataset[i % len(self.dataset)] for i in range(self.requests)]
        rng = random.Random(self.seed)
        ids = range(*SYNTH_TOKEN_RANGE)
        return [Prompt(rng.choices(ids, k=self.input_len), None, self.output_len) for _ in range(self.requests)]


@dataclass
class RequestResult:
    ok: bool
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
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
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    xs = sorted(values)

    def q(p: float) -> float:
        k = (len(xs) - 1) * p
        lo = math.floor(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {f"p{int(p * 100)}": round(q(p) * scale, 2) for p in (0.5, 0.9, 0.99)}


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


async def served_model(base_url: str) -> str | None:
    async with _client() as c:
        try:
            r = await c.get(base_url.rstrip("/") + "/v1/models", timeout=10.0)
            data = r.json()["data"]
            return str(data[0]["id"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None


def _request(spec: BenchSpec, prompt: Prompt) -> tuple[str, dict[str, Any]]:
    if spec.api == "sglang":
        body: dict[str, Any] = {"stream": True, "sampling_params": {
            "max_new_tokens": prompt.output_len, "ignore_eos": True, "temperature": 0.0}}
        if prompt.token_ids is not None:
            body["input_ids"] = prompt.token_ids
        else:
            body["text"] = prompt.text
        return "/generate", body
    body = {"model": spec.model or "default", "prompt": prompt.token_ids if prompt.token_ids is not None else prompt.text,
            "max_tokens": prompt.output_len, "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    return "/v1/completions", body


def _tokens_in(event: dict[str, Any], api: str, seen: int) -> int | None:
    """Output tokens so far according to one streamed event (None: the event says nothing)."""
    if api == "sglang":
        meta = event.get("meta_info")
        if isinstance(meta, dict) and isinstance(meta.get("completion_tokens"), int):
            return int(meta["completion_tokens"])
        return None
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and choices[0].get("text"):
        return seen + 1  # a server without continuous usage: one token per chunk (vLLM's default)
    return None


async def one_request(client: httpx.AsyncClient, base_url: str, spec: BenchSpec, prompt: Prompt,
                      on_tokens: Callable[[int], None]) -> RequestResult:
    path, body = _request(spec, prompt)
    content = json.dumps(body).encode()  # serialised before the clock starts
    res = RequestResult(ok=False)
    t0 = time.perf_counter()
    last = t0
    seen = 0
    try:
        async with client.stream("POST", base_url.rstrip("/") + path, content=content,
                                 headers={"Content-Type": "application/json"}) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode("utf-8", "replace")[:200]
                res.error = f"HTTP {r.status_code}: {text.strip()}"
                return res
            if r.headers.get("content-type", "").startswith("application/json"):
                # the server ignored `stream`: every token arrives with the answer (TTFT = E2E, no ITL)
                try:
                    whole = json.loads(await r.aread())
                except ValueError:
                    whole = None
                n = _tokens_in(whole, spec.api, 0) if isinstance(whole, dict) else None
                res.streamed = False
                if n:
                    res.ttft_s = time.perf_counter() - t0
                    on_tokens(n)
                    seen = n
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                if "error" in event or event.get("object") == "error":
                    err = event.get("error") or event.get("message")
                    res.error = f"stream error: {str(err)[:200]}"
                    return res
                n = _tokens_in(event, spec.api, seen)
                if n is None or n <= seen:
                    continue
                now = time.perf_counter()
                if seen == 0:
                    res.ttft_s = now - t0
                    if n > 1:
                        res.itl_s.extend([0.0] * (n - 1))
                else:
                    gap = (now - last) / (n - seen)
                    res.itl_s.extend([gap] * (n - seen))
                on_tokens(n - seen)
                seen = n
                last = now
    except asyncio.CancelledError:
        res.output_tokens = seen
        res.cancelled = True
        raise
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:200]
        res.output_tokens = seen
        return res
    res.output_tokens = seen
    res.e2e_s = time.perf_counter() - t0
    res.ok = seen > 0
    if not res.ok:
        res.error = "no tokens in the answer"
    return res


async def scrape(client: httpx.AsyncClient, base_url: str, prefix: str = "sglang:") -> dict[str, float] | None:
    """The server's /metrics, names without the prefix and in SGLang's words; None when it does not answer."""
    try:
        r = await client.get(base_url.rstrip("/") + "/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    flat = parse_metrics(r.text, prefix)
    # histogram sums and counts are not in parse_metrics (gauges and counters only)
    for line in r.text.splitlines():
        if line.startswith(prefix) and ("_seconds_sum" in line or "_seconds_count" in line):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            try:
                flat[name] = flat.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    out = {k.removeprefix(prefix): v for k, v in flat.items()}
    for name, others in ALIASES.items():
        for other in others:
            if name not in out and other in out:
                out[name] = out[other]
    return out


def _server_summary(before: dict[str, float] | None, after: dict[str, float] | None,
                    peaks: dict[str, float], series: list[tuple[float, dict[str, float]]], duration: float) -> dict[str, Any]:
    if before is None or after is None:
        return {"available": False, "reason": "/metrics did not answer (start the server with --enable-metrics)"}
    out: dict[str, Any] = {"available": True, "samples": len(series)}
    # steady state: the samples of the second half (the start's burst of prefills queues everything)
    late = [m for t, m in series if t >= duration / 2]
    for k in SERVER_PEAKS:
        out[f"peak_{k}"] = peaks.get(k)
        vals = [m[k] for m in late if k in m]
        out[f"steady_{k}"] = round(sum(vals) / len(vals), 4) if vals else None
    for k in SERVER_COUNTERS:
        if k in after and k in before:
            out[f"delta_{k}"] = round(after[k] - before[k], 6)
    n = out.get("delta_time_to_first_token_seconds_count")
    if n:
        out["mean_ttft_ms"] = round(out["delta_time_to_first_token_seconds_sum"] / n * 1000, 2)
    n = out.get("delta_e2e_request_latency_seconds_count")
    if n:
        out["mean_e2e_ms"] = round(out["delta_e2e_request_latency_seconds_sum"] / n * 1000, 2)
    if "max_total_num_tokens" in after:
        out["max_total_num_tokens"] = int(after["max_total_num_tokens"])
    return out


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
    samples = [0]

    def count(n: int) -> None:
        tokens[0] += n

    async with _client() as client:
        before = await scrape(client, base_url, spec.metrics_prefix)
        t0 = time.perf_counter()
        deadline = t0 + spec.duration_s

        async def worker() -> None:
            while next_i[0] < len(prompts) and time.perf_counter() < deadline:
                p = prompts[next_i[0]]
                next_i[0] += 1
                results.append(await one_request(client, base_url, spec, p, count))

        async def watch() -> None:
            # its own client: behind a pool busy with many streams, a scrape can wait for seconds
            async with _client() as mc:
                while True:
                    await watch_once(mc)
                    await asyncio.sleep(min(progress_every_s, METRICS_INTERVAL_S))

        async def watch_once(mc: httpx.AsyncClient) -> None:
            m = await scrape(mc, base_url, spec.metrics_prefix) if before is not None else None
            if m is not None:
                samples[0] += 1
                series.append((time.perf_counter() - t0, {k: m[k] for k in SERVER_PEAKS if k in m}))
                last_metrics.clear()
                last_metrics.update(m)
                for k in SERVER_PEAKS:
                    if k in m:
                        peaks[k] = max(peaks.get(k, 0.0), m[k])
            if on_progress is not None:
                on_progress(Progress(spec.concurrency, len(results), len(prompts),
                                     sum(1 for r in results if not r.ok), time.perf_counter() - t0,
                                     tokens[0], dict(last_metrics)))

        workers = [asyncio.create_task(worker()) for _ in range(max(1, spec.concurrency))]
        watcher = asyncio.create_task(watch())
        cancelled = 0
        try:
            left = deadline - time.perf_counter()
            done, pending = await asyncio.wait(workers, timeout=max(0.0, left))
            for t in pending:
                t.cancel()
            cancelled = len(pending)
            await asyncio.gather(*pending, return_exceptions=True)
            for t in done:
                t.result()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        duration = time.perf_counter() - t0
        after = await scrape(client, base_url, spec.metrics_prefix) if before is not None else None
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    kinds: dict[str, int] = {}
    for r in errors:
        kinds[r.error or "unknown"] = kinds.get(r.error or "unknown", 0) + 1
    return {
        "concurrency": spec.concurrency,
        "requests": len(ok),
        "errors": len(errors),
        "cancelled": cancelled,
        # answers that came whole although streaming was asked for: their TTFT is their E2E
        "not_streamed": sum(1 for r in results if not r.streamed),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "duration_s": round(duration, 3),
        "output_tokens": tokens[0],
        "output_tok_s": round(tokens[0] / duration, 2) if duration > 0 else None,
        "requests_per_s": round(len(ok) / duration, 3) if duration > 0 else None,
        "ttft_ms": percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": percentiles([x for r in ok for x in r.itl_s]),
        "e2e_ms": percentiles([r.e2e_s for r in ok if r.e2e_s is not None]),
        "mean_ttft_ms": round(sum(r.ttft_s or 0 for r in ok) / len(ok) * 1000, 2) if ok else None,
        "mean_e2e_ms": round(sum(r.e2e_s or 0 for r in ok) / len(ok) * 1000, 2) if ok else None,
        "server": _server_summary(before, after, peaks, series, duration),
    }


async def run_bench(base_url: str, spec: BenchSpec, levels: list[int],
                    on_progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
    """Every concurrency level in turn. The top-level figures are the level with the highest output
    tok/s; `levels` lists them all (DESIGN.md's `bench --json` shape plus those keys)."""
    if spec.api == "openai" and spec.model is None:
        spec.model = await served_model(base_url)
    runs = []
    for c in levels:
        level = BenchSpec(**{**spec.__dict__, "concurrency": c})
        runs.append(await run_level(base_url, level, on_progress))
    best = max(runs, key=lambda r: r["output_tok_s"] or 0.0)
    out = dict(best)
    out["levels"] = runs
    out["api"] = spec.api
    out["input_len"] = None if spec.dataset else spec.input_len
    out["output_len"] = None if spec.dataset else spec.output_len
    return out
