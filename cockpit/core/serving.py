"""Serving health from the engine's own Prometheus metrics: parsed, windowed, summarised.

The engine's metric names differ per engine and version; each backend lists them (`metrics.serving()`:
a figure -> the names to try, newest first, so a rename falls back to the old name). A figure the
engine does not export is `None` ("not reported"), never 0.

Counters are turned into rates between two scrapes; histograms into p50/p99 over a sliding
one-minute window from the bucket deltas (the newest scrape minus the oldest one in the window),
interpolated inside the bucket as Prometheus' histogram_quantile does. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

WINDOW_S = 60.0  # the latency window
RATE_WINDOW_S = 10.0  # tok/s over the last ten seconds (vLLM's own stats interval)

# the figures an engine's table may fill (cockpit/backends/*/metricnames.py)
COUNTERS = ("generation_tokens", "prompt_tokens", "preemptions", "requests_finished",
            "prefix_cache_hits", "prefix_cache_queries", "spec_accepted_tokens", "spec_draft_tokens")
GAUGES = ("running", "waiting", "kv_usage", "prefix_cache_hit_rate", "spec_accept_length")
HISTOGRAMS = ("ttft", "itl", "e2e", "tpot")


@dataclass
class MetricsSample:
    """One scrape: figure -> value (summed over label sets), histogram -> cumulative buckets."""

    at: float  # the caller's clock (seconds)
    values: dict[str, float] = field(default_factory=dict)
    hists: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (le, cumulative count)
    names: dict[str, str] = field(default_factory=dict)  # figure -> the engine's name it was read from


def metric_families(text: str) -> list[Any]:
    """Prometheus text parsed; truncated or garbled output keeps what parses line by line."""
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError):
        families: list[Any] = []
        for line in text.splitlines():
            try:
                families.extend(text_string_to_metric_families(line + "\n"))
            except (ValueError, TypeError, IndexError):
                continue
        return families


# Larger than any figure an engine reports (tokens, requests, bytes): a sample past it is the
# exporter's bug, kept as this bound so that the window's arithmetic stays finite.
ABSURD = 1e15
_SUFFIXES = ("", "_bucket", "_sum", "_count", "_total", "_created")


def serving_families(text: str, prefix: str, table: Mapping[str, tuple[str, ...]]) -> str:
    """Only the lines of the families `table` names (samples, and their # TYPE / # HELP lines):
    a body of a few MiB (TP64 histograms, per-adapter labels) is mostly families no figure reads,
    and the Prometheus parser is slow. A line-by-line look at the name, no parsing."""
    wanted: set[str] = set()
    for names in table.values():
        for n in names:
            wanted.update(prefix + n + suffix for suffix in _SUFFIXES)
            wanted.add(prefix + n.removesuffix("_total"))
    keep: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 and parts[1] in ("TYPE", "HELP") else ""
        else:
            end = len(line)
            for stop in ("{", " ", "\t"):
                at = line.find(stop, 0, end)
                if at != -1:
                    end = at
            name = line[:end]
        if name in wanted:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_body(body: bytes, prefix: str, table: Mapping[str, tuple[str, ...]], at: float) -> MetricsSample:
    """A /metrics body as read -> the sample: decoded, filtered to the table's families, parsed.
    Seconds of CPU for a body of a few MiB: callers on an event loop run it in a thread."""
    return parse_sample(serving_families(body.decode("utf-8", "replace"), prefix, table), prefix, table, at)


def parse_sample(text: str, prefix: str, table: Mapping[str, tuple[str, ...]], at: float) -> MetricsSample:
    """Prometheus text -> the figures of `table` (names without `prefix`). Several label sets of
    one name (ranks, engines, finished reasons) are summed; gauges of ratios take the maximum.
    A sample that is not a finite number (NaN, ±Inf: an exporter's division by zero) is left out,
    as unknown; one past ABSURD is held at it."""
    raw: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    for fam in metric_families(text):
        for s in fam.samples:
            if not s.name.startswith(prefix) or s.name.endswith("_created"):
                continue
            name = s.name.removeprefix(prefix)
            value = float(s.value)
            if not math.isfinite(value):
                continue
            value = max(-ABSURD, min(ABSURD, value))
            if name.endswith("_bucket") and "le" in s.labels:
                le = float(s.labels["le"])
                if math.isnan(le):
                    continue
                b = buckets.setdefault(name.removesuffix("_bucket"), {})
                b[le] = b.get(le, 0.0) + value
            elif name.endswith(("_usage_perc", "_usage", "_rate", "_length")) and name in raw:
                raw[name] = max(raw[name], value)
            else:
                raw[name] = raw.get(name, 0.0) + value
    out = MetricsSample(at=at)
    for figure, names in table.items():
        for n in names:
            if figure in HISTOGRAMS:
                if n in buckets:
                    out.hists[figure] = sorted(buckets[n].items())
                    out.names[figure] = n
                    break
            elif n in raw:
                out.values[figure] = raw[n]
                out.names[figure] = n
                break
    return out


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative buckets [(le, count)], linear inside the bucket (as
    Prometheus' histogram_quantile); None with no observations."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le  # the top bucket has no upper bound: its lower bound is all we know
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def _delta(new: list[tuple[float, float]], old: list[tuple[float, float]] | None) -> list[tuple[float, float]]:
    if not old:
        return list(new)
    before = dict(old)
    out = [(le, c - before.get(le, 0.0)) for le, c in new]
    if any(c < 0 for _, c in out):  # the engine restarted: its counters began again
        return list(new)
    return out


class ServingWindow:
    """Scrapes over the last minute, and the figures they give."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[MetricsSample] = deque()

    def add(self, sample: MetricsSample) -> None:
        if self.samples and sample.at <= self.samples[-1].at:
            return
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.at - self.samples[1].at >= self.window_s:
            self.samples.popleft()

    def _since(self, seconds: float) -> MetricsSample | None:
        """The oldest scrape at most `seconds` before the newest (the newest's predecessor at least)."""
        if len(self.samples) < 2:
            return None
        newest = self.samples[-1]
        chosen = self.samples[-2]
        for s in reversed(self.samples):
            if s is newest:
                continue
            if newest.at - s.at > seconds:
                break
            chosen = s
        return chosen

    def _rate(self, figure: str, seconds: float, per: float = 1.0) -> float | None:
        old = self._since(seconds)
        if old is None:
            return None
        new = self.samples[-1]
        if figure not in new.values or figure not in old.values:
            return None
        dt = new.at - old.at
        dv = new.values[figure] - old.values[figure]
        if dt <= 0:
            return None
        if dv < 0:  # the engine restarted
            return None
        return dv / dt * per

    def _latency_ms(self, figure: str) -> dict[str, float | None] | None:
        if not self.samples or figure not in self.samples[-1].hists:
            return None
        new = self.samples[-1]
        old = self.samples[0] if len(self.samples) > 1 else None
        buckets = _delta(new.hists[figure], old.hists.get(figure) if old is not None else None)
        p50, p99 = quantile(0.5, buckets), quantile(0.99, buckets)
        return {"p50": None if p50 is None else round(p50 * 1000, 2),
                "p99": None if p99 is None else round(p99 * 1000, 2),
                "count": buckets[-1][1] if buckets else 0}

    def figures(self) -> dict[str, Any] | None:
        """The `serving` object of `status --json` (None before the first scrape)."""
        if not self.samples:
            return None
        new = self.samples[-1]
        v = new.values

        def gauge(name: str) -> float | None:
            return v.get(name)

        kv = gauge("kv_usage")
        hit_rate: float | None = None
        old = self._since(self.window_s)
        if "prefix_cache_hits" in v and "prefix_cache_queries" in v:
            hits, queries = v["prefix_cache_hits"], v["prefix_cache_queries"]
            if old is not None and "prefix_cache_queries" in old.values:
                hits -= old.values.get("prefix_cache_hits", 0.0)
                queries -= old.values["prefix_cache_queries"]
            hit_rate = round(hits / queries * 100, 1) if queries > 0 else None
        elif gauge("prefix_cache_hit_rate") is not None:
            hit_rate = round(float(v["prefix_cache_hit_rate"]) * 100, 1)
        spec: float | None = None
        if "spec_accepted_tokens" in v and "spec_draft_tokens" in v:
            acc, drafts = v["spec_accepted_tokens"], v["spec_draft_tokens"]
            spec = round(acc / drafts * 100, 1) if drafts > 0 else None
        running, waiting = gauge("running"), gauge("waiting")
        gen = self._rate("generation_tokens", RATE_WINDOW_S)
        prompt = self._rate("prompt_tokens", RATE_WINDOW_S)
        pre = self._rate("preemptions", self.window_s, per=60.0)
        return {
            "gen_tok_s": None if gen is None else round(gen, 2),
            "prompt_tok_s": None if prompt is None else round(prompt, 2),
            "running": None if running is None else int(running),
            "waiting": None if waiting is None else int(waiting),
            "kv_usage_pct": None if kv is None else round(kv * 100, 2),
            "preemptions_per_min": None if pre is None else round(pre, 2),
            "ttft_ms": self._latency_ms("ttft"),
            "itl_ms": self._latency_ms("itl"),
            "e2e_ms": self._latency_ms("e2e"),
            "prefix_cache_hit_pct": hit_rate,
            "spec_acceptance_pct": spec,
            "spec_accept_length": gauge("spec_accept_length"),
            "window_s": round(new.at - self.samples[0].at, 1),
            "counters": {k: v[k] for k in COUNTERS if k in v},
            "not_reported": sorted(k for k in (*COUNTERS, *GAUGES, *HISTOGRAMS)
                                   if k not in v and k not in new.hists),
            "names": dict(new.names),
            "source": "/metrics",
        }


def serving_words(sv: Mapping[str, Any]) -> str:
    """The figures on one line, as `status` and the dashboard say them ("not reported" where the
    engine exports none)."""
    def fig(v: Any, unit: str = "") -> str:
        return "not reported" if v is None else f"{v:,.1f}{unit}" if isinstance(v, float) else f"{v}{unit}"

    def lat(d: Any) -> str:
        if not d:
            return "not reported"
        if d.get("p50") is None:
            return "none in the window"
        return f"{d['p50']:,.0f}/{d['p99']:,.0f} ms"

    note = sv.get("note")  # why the last scrape gave nothing (too large, no answer in time)
    if note and "gen_tok_s" not in sv:
        return f"/metrics: {note}"
    return (f"/metrics: gen {fig(sv.get('gen_tok_s'), ' tok/s')} · prompt {fig(sv.get('prompt_tok_s'), ' tok/s')}"
            f" · run {fig(sv.get('running'))} wait {fig(sv.get('waiting'))} · KV {fig(sv.get('kv_usage_pct'), ' %')}"
            f" · preempt {fig(sv.get('preemptions_per_min'), '/min')} · TTFT p50/p99 {lat(sv.get('ttft_ms'))}"
            f" · ITL {lat(sv.get('itl_ms'))}" + (f" · {note}" if note else ""))
