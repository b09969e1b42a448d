"""The server's own figures during a bench: its `/metrics` scraped and parsed (the counters, gauges
and latency histograms bench uses, named by the core's figures: the engine's own names come from its
backend's table, `Backend.metrics.serving()`), and their change over a level (peaks, steady state,
counter deltas, histogram quantiles), held beside the client's figures.

Why a module of its own: the Prometheus text and its arithmetic are read apart from the requests
(answers.py) and the level scheduling (loadgen.py) that calls `scrape` once a second.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from typing import Any

import httpx

from cockpit.serving.answers import get_capped

METRICS_CAP = 4 << 20  # /metrics (vLLM's on a busy server: ~100 KB)
SCRAPE_TIMEOUT_S = 5.0  # one /metrics scrape, whole (a server dribbling a byte a second is cut)

# The figures bench reads (cockpit/core/serving.py's words; each engine's table names them its way).
SERVER_COUNTERS = ("generation_tokens", "prompt_tokens", "requests_finished", "preemptions")  # change over the run
SERVER_PEAKS = ("running", "waiting", "kv_usage")  # peak and steady state
CAPACITY = "max_total_num_tokens"  # the KV pool's size in tokens, where the engine exports it
# Latency histograms: quantiles of their change over the run. `itl`: one observation per decode step
# of a request; `tpot` (where exported): one per request, (E2E − TTFT) / (tokens − 1), the client's
# `itl_ms` definition.
SERVER_HISTOGRAMS = ("itl", "tpot", "ttft")
MEANS = ("ttft", "e2e")  # histograms whose _sum / _count give a mean
_FRACTIONS = frozenset(("kv_usage",))
_LE = re.compile(r'\ble="([^"]{0,40})"')


def _lookup(names: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, str]]:
    """The engine's metric names (histograms with their suffixes) -> (figure, part)."""
    out: dict[str, tuple[str, str]] = {}
    for figure in (*SERVER_COUNTERS, *SERVER_PEAKS, CAPACITY):
        out.update((n, (figure, "value")) for n in names.get(figure, ()))
    for figure in {*SERVER_HISTOGRAMS, *MEANS}:
        for n in names.get(figure, ()):
            out.update({n + "_bucket": (figure, "bucket"), n + "_sum": (figure, "sum"), n + "_count": (figure, "count")})
    return out


def parse_scrape(text: str, prefix: str, names: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The figures bench uses from a /metrics body, `names` being the engine's table (figure -> its
    metric names without the prefix, newest first): {figure: value} for the counters and gauges
    (label sets folded: counts summed, fractions and the capacity the maximum), `{figure}_sum` and
    `{figure}_count` of MEANS, and {"buckets": {histogram: {le: cumulative count}}}. Only lines that
    start with the prefix and name a wanted metric are looked at; a value that is not a finite number
    ≥ 0 (a fraction above 1) is left out, as if the server had not sent it."""
    wanted = _lookup(names)
    raw: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
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
        what = wanted.get(name)
        if what is None:
            continue
        figure, part = what
        parts = rest.split(None, 2)
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if not (math.isfinite(value) and value >= 0) or (figure in _FRACTIONS and value > 1.0):
            continue
        if part == "bucket":
            m = _LE.search(labels)
            try:
                le = float(m.group(1)) if m else math.nan
            except ValueError:
                continue
            if le == le and le >= 0:  # +Inf is a bound here
                b = buckets.setdefault(name, {})
                b[le] = b.get(le, 0.0) + value
            continue
        if name not in raw:
            raw[name] = value
        elif figure in _FRACTIONS or figure == CAPACITY:
            raw[name] = max(raw[name], value)
        else:
            raw[name] += value
    out: dict[str, Any] = {}
    hists: dict[str, dict[float, float]] = {}
    for name, (figure, part) in wanted.items():  # the table's order: the newest name the server sent wins
        key = figure if part in ("value", "bucket") else f"{figure}_{part}"
        if part == "bucket":
            if name in buckets and figure not in hists:
                hists[figure] = buckets[name]
        elif name in raw and key not in out:
            out[key] = raw[name]
    out["buckets"] = hists
    return out


async def scrape(client: httpx.AsyncClient, base_url: str, path: str, prefix: str,
                 names: Mapping[str, tuple[str, ...]]) -> dict[str, Any] | None:
    """The server's metrics endpoint (`path`) as parse_scrape's figures; None when it does not
    answer within SCRAPE_TIMEOUT_S and METRICS_CAP bytes. Parsed in a thread: a large body must not
    hold the event loop the requests are timed on."""
    got = await get_capped(client, base_url.rstrip("/") + path, METRICS_CAP, SCRAPE_TIMEOUT_S)
    if got is None or got[0] != 200:
        return None
    return await asyncio.to_thread(lambda: parse_scrape(got[1].decode("utf-8", "replace"), prefix, names))


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
                   switch: str | None = None, absent: str | None = None) -> dict[str, Any]:
    """The `server` object of a level: its figures' peaks and steady state, the counters' change,
    the histograms' quantiles; `{"available": false, "reason"}` when no scrape answered (`absent`:
    why none was tried, an engine without metrics)."""
    if before is None or after is None:
        how = f" (start the server with {switch})" if switch else ""
        return {"available": False, "reason": absent or f"/metrics did not answer{how}"}
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
    for k in MEANS:
        s, c = f"{k}_sum", f"{k}_count"
        if all(x in before and x in after for x in (s, c)) and after[c] - before[c] > 0 and after[s] >= before[s]:
            out[f"mean_{k}_ms"] = round((after[s] - before[s]) / (after[c] - before[c]) * 1000, 2)
    for key in SERVER_HISTOGRAMS:
        if key in after["buckets"]:
            out[f"{key}_ms"] = hist_quantiles(before["buckets"].get(key, {}), after["buckets"][key])
    if CAPACITY in after and after[CAPACITY] < 2**53:
        out[CAPACITY] = int(after[CAPACITY])
    return out
