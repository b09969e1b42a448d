"""Runs in the operator's words: the formatting and comparison `cockpit runs` and the TUI's
history screen share (pure functions over RunRecords, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cockpit.core.findings import value_text
from cockpit.journal.journal import RunRecord

UNKNOWN = "—"  # unknown is shown as unknown, never as 0


def fmt_gb(v: float | None) -> str:
    return UNKNOWN if v is None else f"{v:.2f} GiB"


def fmt_int(v: int | None) -> str:
    """`246,930`: token counts grouped as every other view prints them."""
    return UNKNOWN if v is None else f"{v:,}"


def fmt_tps(v: float | None) -> str:
    return UNKNOWN if v is None else f"{v:.0f}"


def fmt_secs(v: float | None) -> str:
    if v is None:
        return UNKNOWN
    s = round(v)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_time(iso: str | None) -> str:
    """ISO-8601 UTC as stored -> this machine's local time, to the second."""
    if not iso:
        return UNKNOWN
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if dt.tzinfo is not None:
        dt = dt.astimezone()
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def fmt_outcome(r: RunRecord) -> str:
    if r.outcome == "crashed" and r.crash_kind:
        where = ", ".join(x for x in (r.crash_phase, r.crash_rank) if x)
        return f"crashed: {r.crash_kind}" + (f" ({where})" if where else "")
    return r.outcome


RUN_ROW_HEADER = ("ID", "STARTED", "OUTCOME", "MIN HEADROOM", "KV TOKENS", "PEAK TOK/S", "READY IN", "CHANGED")


def run_rows(runs: Sequence[RunRecord]) -> list[list[str]]:
    """One row per run, as `cockpit runs` and the history screen list them (RUN_ROW_HEADER)."""
    changed = changes_by_run(runs)
    return [
        [r.id, fmt_time(r.started_at), fmt_outcome(r), fmt_gb(r.min_headroom_gb), fmt_int(r.max_total_num_tokens),
         fmt_tps(r.peak_gen_throughput), fmt_secs(r.time_to_ready_s), changed[r.id]]
        for r in runs
    ]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(header), *rows]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def differing_flags(runs: Sequence[RunRecord]) -> dict[str, list[Any]]:
    """Flags whose value is not the same in every run (absent counts as a value: unset)."""
    names: list[str] = []
    for r in runs:
        for k in r.flags:
            if k not in names:
                names.append(k)
    out: dict[str, list[Any]] = {}
    for k in names:
        values = [r.flags.get(k) for r in runs]
        if any(json.dumps(v, sort_keys=True, default=str) != json.dumps(values[0], sort_keys=True, default=str)
               for v in values[1:]) or any(k not in r.flags for r in runs):
            out[k] = values
    return out


def changed_since(prev: RunRecord | None, run: RunRecord) -> str:
    """`mem-fraction-static 0.93→0.88`: what this run changed relative to the previous run of its profile."""
    if prev is None:
        return ""
    diffs = differing_flags([prev, run])
    return ", ".join(f"{k} {value_text(a)}→{value_text(b)}" for k, (a, b) in diffs.items())


def backend_words(r: RunRecord) -> str:
    if r.backend_version and r.backend and r.backend_version.startswith(r.backend):
        return r.backend_version  # "sglang-0.5.9" already names the backend
    return " ".join(x for x in (r.backend, r.backend_version) if x) or UNKNOWN


Row = tuple[str, list[str]]


def compare_rows(runs: Sequence[RunRecord]) -> tuple[list[Row], list[Row]]:
    """The side-by-side rows (the measures, then the flags that differ), shared by the CLI and the
    history screen."""
    rows: list[Row] = [
        ("profile", [r.profile for r in runs]),
        ("started", [fmt_time(r.started_at) for r in runs]),
        ("outcome", [r.outcome for r in runs]),
        ("crash kind", [r.crash_kind or UNKNOWN if r.outcome == "crashed" else "none" for r in runs]),
        ("crash phase", [r.crash_phase or UNKNOWN if r.outcome == "crashed" else "none" for r in runs]),
        ("min headroom", [fmt_gb(r.min_headroom_gb) for r in runs]),
        ("KV tokens", [fmt_int(r.max_total_num_tokens) for r in runs]),
        ("peak gen tok/s", [fmt_tps(r.peak_gen_throughput) for r in runs]),
        ("median gen tok/s", [fmt_tps(r.median_gen_throughput) for r in runs]),
        ("time to ready", [fmt_secs(r.time_to_ready_s) for r in runs]),
    ]
    if any(r.bench for r in runs):
        rows += [
            ("bench output tok/s", [fmt_tps(bench_value(r, "output_tok_s")) for r in runs]),
            ("bench req/s", [_fmt_num(bench_value(r, "requests_per_s"), 2) for r in runs]),
            ("bench TTFT p50/p99 ms", [_fmt_pair(r, "ttft_ms") for r in runs]),
            ("bench ITL p50/p99 ms", [_fmt_pair(r, "itl_ms") for r in runs]),
            ("bench E2E p50/p99 ms", [_fmt_pair(r, "e2e_ms") for r in runs]),
            ("bench errors", [_fmt_num(bench_value(r, "errors"), 0) for r in runs]),
        ]
    if any(r.tune_session for r in runs):
        rows.append(("tune session", [r.tune_session or "none" for r in runs]))
    flags = [(f"--{flag.lstrip('-')}", [value_text(v) for v in values]) for flag, values in differing_flags(runs).items()]
    return rows, flags


def bench_value(r: RunRecord, key: str, sub: str | None = None) -> float | None:
    """A figure of the run's latest bench (None when it was never benched or the figure is unknown)."""
    if not r.bench:
        return None
    v = r.bench.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def _fmt_num(v: float | None, digits: int) -> str:
    return "not benched" if v is None else f"{v:,.{digits}f}"


def _fmt_pair(r: RunRecord, key: str) -> str:
    if not r.bench:
        return "not benched"
    a, b = bench_value(r, key, "p50"), bench_value(r, key, "p99")
    return f"{UNKNOWN if a is None else f'{a:,.0f}'} / {UNKNOWN if b is None else f'{b:,.0f}'}"


def changes_by_run(runs: Sequence[RunRecord]) -> dict[str, str]:
    """For each run (given newest first), what it changed relative to the previous run of its profile."""
    out: dict[str, str] = {}
    older: dict[str, RunRecord] = {}
    for r in reversed(runs):
        out[r.id] = changed_since(older.get(r.profile), r)
        older[r.profile] = r
    return out
