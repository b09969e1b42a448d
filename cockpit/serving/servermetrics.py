"""The server's own figures during a bench: its `/metrics` scraped and parsed (the counters, gauges
and latency histograms bench uses, in SGLang's names whichever engine), and their change over a level
(peaks, steady state, counter deltas, histogram quantiles), held beside the client's figures.

Why a module of its own: the Prometheus text and its arithmetic are read apart from the requests
(answers.py) and the level scheduling (loadgen.py) that calls `scrape` once a second.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import httpx

from cockpit.serving.answers import get_capped

METRICS_CAP = 4 << 20  # /metrics (vLLM's on a busy server: ~100 KB)
SCRAPE_TIMEOUT_S = 5.0  # one /metrics scrape, whole (a server dribbling a byte a second is cut)

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


def server_summary(before: dict[str, Any] | None, after: dict[str, Any] | None,
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
