"""`cockpit runs`: the journal of past runs — list, show one, compare several side by side."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cockpit.errors import BadInput
from cockpit.journal import Journal, RunRecord

UNKNOWN = "—"  # unknown is shown as unknown, never as 0


def run(args: argparse.Namespace) -> int:
    journal = Journal.open()
    try:
        sub = getattr(args, "runs_command", None)
        if sub == "show":
            return _show(journal, args.id, bool(args.json))
        if sub == "compare":
            return _compare(journal, list(args.ids), bool(args.json))
        return _list(journal, getattr(args, "profile", None), bool(args.json))
    finally:
        journal.close()


# ---- formatting helpers (text only; JSON carries the raw values) ----
def fmt_gb(v: float | None) -> str:
    return UNKNOWN if v is None else f"{v:.2f} GB"


def fmt_int(v: int | None) -> str:
    return UNKNOWN if v is None else str(v)


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


def fmt_value(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def fmt_outcome(r: RunRecord) -> str:
    if r.outcome == "crashed" and r.crash_kind:
        where = ", ".join(x for x in (r.crash_phase, r.crash_rank) if x)
        return f"crashed: {r.crash_kind}" + (f" ({where})" if where else "")
    return r.outcome


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
    return ", ".join(f"{k} {fmt_value(a)}→{fmt_value(b)}" for k, (a, b) in diffs.items())


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# ---- subcommands ----
def _list(journal: Journal, profile: str | None, as_json: bool) -> int:
    runs = journal.list_runs(profile)
    if as_json:
        _print_json([r.to_json() for r in runs])
        return 0
    if not runs:
        where = f" of profile {profile}" if profile else ""
        print(f"no runs{where} in the journal yet ({journal.path}); `cockpit up PROFILE` records one")
        return 0
    # the previous run of the same profile, to say what each run changed (runs are newest first)
    previous: dict[str, RunRecord | None] = {}
    older: dict[str, RunRecord] = {}
    for r in reversed(runs):
        previous[r.id] = older.get(r.profile)
        older[r.profile] = r
    rows = [
        [
            r.id,
            r.profile,
            fmt_time(r.started_at),
            fmt_outcome(r),
            fmt_gb(r.min_headroom_gb),
            fmt_int(r.max_total_num_tokens),
            fmt_tps(r.peak_gen_throughput),
            fmt_secs(r.time_to_ready_s),
            changed_since(previous[r.id], r),
        ]
        for r in runs
    ]
    print(table(["ID", "PROFILE", "STARTED", "OUTCOME", "MIN HEADROOM", "KV TOKENS", "PEAK TOK/S",
                 "READY IN", "CHANGED"], rows))
    return 0


def _find(journal: Journal, run_id: str) -> RunRecord:
    rec = journal.get(run_id)
    if rec is None:
        raise BadInput(f"no run {run_id!r} in the journal ({journal.path})", hint="`cockpit runs` lists the ids")
    return rec


def _backend_words(r: RunRecord) -> str:
    if r.backend_version and r.backend and r.backend_version.startswith(r.backend):
        return r.backend_version  # "sglang-0.5.9" already names the backend
    return " ".join(x for x in (r.backend, r.backend_version) if x) or UNKNOWN


def _show(journal: Journal, run_id: str, as_json: bool) -> int:
    r = _find(journal, run_id)
    if as_json:
        _print_json(r.to_json(include_series=True))
        return 0
    kv = [
        ("run", r.id),
        ("profile", r.profile),
        ("hosts", ", ".join(r.hosts) or UNKNOWN),
        ("backend", _backend_words(r)),
        ("started", fmt_time(r.started_at)),
        ("ended", fmt_time(r.ended_at) if r.ended_at else "still running" if r.outcome in ("running", "ready")
         else UNKNOWN),
        ("outcome", fmt_outcome(r)),
        ("time to ready", fmt_secs(r.time_to_ready_s)),
        ("min headroom", fmt_gb(r.min_headroom_gb)),
        ("KV tokens", fmt_int(r.max_total_num_tokens)),
        ("gen tok/s", f"peak {fmt_tps(r.peak_gen_throughput)} · median {fmt_tps(r.median_gen_throughput)}"),
        ("peak token usage", UNKNOWN if r.peak_token_usage is None else f"{r.peak_token_usage:.2f}"),
        ("log", r.log_path or UNKNOWN),
    ]
    width = max(len(k) for k, _ in kv)
    for k, v in kv:
        print(f"{k.ljust(width)}  {v}")
    if r.headroom:
        print("\nfree after capture, per rank:")
        print("  " + "  ".join(f"{rank} {fmt_gb(gb)}" for rank, gb in r.headroom.items()))
    print("\nflags as launched:")
    if r.flags:
        fw = max(len(k) for k in r.flags)
        for k in sorted(r.flags):
            print(f"  {k.ljust(fw)}  {fmt_value(r.flags[k])}")
    else:
        print("  (none recorded)")
    if r.decisive_lines:
        print("\ncrash, the lines that decide it:")
        for line in r.decisive_lines:
            print(f"  {line}")
    if r.findings:
        print("\nfindings:")
        for f in r.findings:
            print(f"  [{f.get('severity', '?')}] {f.get('message', '')}")
            for c in f.get("changes", []):
                print(f"      {c.get('flag')} {fmt_value(c.get('from'))} → {fmt_value(c.get('to'))}")
    return 0


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
    flags = [(f"--{flag.lstrip('-')}", [fmt_value(v) for v in values]) for flag, values in differing_flags(runs).items()]
    return rows, flags


def _compare(journal: Journal, ids: list[str], as_json: bool) -> int:
    if len(ids) < 2:
        raise BadInput("compare needs at least two run ids", hint="cockpit runs compare ID ID …")
    runs = [_find(journal, i) for i in ids]
    if as_json:
        _print_json({"runs": [r.to_json() for r in runs], "differing_flags": differing_flags(runs)})
        return 0
    measures, flags = compare_rows(runs)
    body = [[name, *vals] for name, vals in measures]
    flag_rows = [[name, *vals] for name, vals in flags]
    header = ["", *[r.id for r in runs]]
    if flag_rows:
        body.append(["flags that differ:", *[""] * len(runs)])
        body.extend(flag_rows)
    else:
        body.append(["flags that differ:", "none", *[""] * (len(runs) - 1)])
    print(table(header, body))
    return 0
