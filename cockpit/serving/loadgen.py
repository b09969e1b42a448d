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

Here: the levels (the workers, the deadline, the error stop, the watcher) and the client's
statistics. What is sent (the spec, the prompts, the vocabulary) is workload.py; one request and
its answer, read within bounds, answers.py; the server's `/metrics` and its figures, servermetrics.py.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from cockpit.serving.answers import RequestResult, ServedModel, http_client, one_request, served_model
from cockpit.serving.servermetrics import SERVER_PEAKS, scrape, server_summary
from cockpit.serving.workload import BenchSpec, Prompt

METRICS_INTERVAL_S = 1.0
CHECK_TOKENS = 8  # output tokens of the check request before the load
ERROR_SAMPLE = 8  # finished requests before a level may be stopped for its errors


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
            srv = (f" · server running {self.server.get('running', 0):.0f}"
                   f" queue {self.server.get('waiting', 0):.0f}"
                   f" KV {self.server.get('kv_usage', 0):.2f}")
        return (f"c={self.concurrency} {self.done}/{self.total} done · {self.errors} errors · "
                f"{tps:,.0f} tok/s · {self.elapsed_s:.0f} s{srv}")


def _cpu_s() -> float:
    return time.process_time()


async def server_figures(client: httpx.AsyncClient, base_url: str, spec: BenchSpec) -> dict[str, Any] | None:
    """One scrape of the engine's metrics as the figures bench reads; None when the engine has none."""
    if spec.metrics_path is None:
        return None
    return await scrape(client, base_url, spec.metrics_path, spec.metrics_prefix, spec.metric_names)


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
    async with http_client() as client:
        before = await server_figures(client, base_url, spec)
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
            async with http_client() as mc:
                last = -math.inf
                while True:
                    due = time.perf_counter() - last >= METRICS_INTERVAL_S
                    if due:
                        last = time.perf_counter()
                    await watch_once(mc, due)
                    await asyncio.sleep(min(progress_every_s, METRICS_INTERVAL_S))

        async def watch_once(mc: httpx.AsyncClient, scrape_now: bool) -> None:
            m = await server_figures(mc, base_url, spec) if before is not None and scrape_now else None
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
        after = await server_figures(client, base_url, spec) if before is not None else None
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
        "server": server_summary(before, after, peaks, series, duration, spec.metrics_switch, spec.metrics_absent),
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
    async with http_client() as client:
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
