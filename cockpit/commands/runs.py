"""`cockpit runs`: the journal of past runs — list, show one, compare several side by side."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cockpit.face_journal import (
    RUN_ROW_HEADER,
    UNKNOWN,
    Journal,
    RunRecord,
    backend_words,
    compare_rows,
    differing_flags,
    fmt_gb,
    fmt_int,
    fmt_outcome,
    fmt_secs,
    fmt_time,
    fmt_tps,
    run_rows,
    table,
)
from cockpit.face_light import BadInput, load_all_secret_flags, rank_sort_key, value_text


def run(args: argparse.Namespace) -> int:
    load_all_secret_flags()  # rows are masked as read: `api-k` of any engine's run too
    journal = Journal.open(readonly=True)  # listing runs never creates or writes anything
    try:
        sub = getattr(args, "runs_command", None)
        if sub == "show":
            return _show(journal, args.id, bool(args.json))
        if sub == "compare":
            return _compare(journal, list(args.ids), bool(args.json))
        return _list(journal, getattr(args, "profile", None), bool(args.json))
    finally:
        journal.close()


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
    rows = [[row[0] + _slurm_job(r), r.profile, *row[1:]] for r, row in zip(runs, run_rows(runs), strict=True)]
    print(table([RUN_ROW_HEADER[0], "PROFILE", *RUN_ROW_HEADER[1:]], rows))
    return 0


def _slurm_job(r: RunRecord) -> str:
    """A Slurm run's job id (its hosts carry `slurm job N`), shown next to the run id."""
    for h in r.hosts:
        if h.startswith("slurm job "):
            return f" (job {h.removeprefix('slurm job ')})"
    return ""


def _find(journal: Journal, run_id: str) -> RunRecord:
    rec = journal.get(run_id)
    if rec is None:
        raise BadInput(f"no run {run_id!r} in the journal ({journal.path})", hint="`cockpit runs` lists the ids")
    return rec


def _show(journal: Journal, run_id: str, as_json: bool) -> int:
    r = _find(journal, run_id)
    if as_json:
        _print_json(r.to_json(include_series=True))
        return 0
    kv = [
        ("run", r.id),
        ("profile", r.profile),
        ("hosts", ", ".join(r.hosts) or UNKNOWN),
        ("backend", backend_words(r)),
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
        ranks = sorted(r.headroom, key=rank_sort_key)
        print("  " + "  ".join(f"{rank} {fmt_gb(r.headroom[rank])}" for rank in ranks))
    print("\nflags as launched:")
    if r.flags:
        fw = max(len(k) for k in r.flags)
        for k in sorted(r.flags):
            print(f"  {k.ljust(fw)}  {value_text(r.flags[k])}")
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
                print(f"      {c.get('flag')} {value_text(c.get('from'))} → {value_text(c.get('to'))}")
    return 0


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
