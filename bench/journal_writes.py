#!/usr/bin/env python3
"""Cockpit's footprint on the jump host: bytes an attached dashboard writes to disk an hour.

A Supervisor with the journal attached (what the TUI runs: its Recorder records every published
snapshot) follows a steady simulated run (SGLang simulator, 8 ranks, steady traffic) for
`--minutes`; the process's own writes are read from /proc/self/io before and after (`wchar`: bytes
handed to write(2)/pwrite(2), what SQLite writes; `write_bytes`: what reached the block layer), and
the journal's files (database, -wal, -journal) are measured. The server and the telemetry agent
are other processes: not counted.

    .venv/bin/python bench/journal_writes.py [--minutes 3]
    PYTHONPATH=/path/to/older/checkout .venv/bin/python bench/journal_writes.py   # before/after
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml


def io_counters() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = int(v)
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def journal_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-journal"))
               if p.exists())


async def measure(minutes: float, settle: float) -> dict[str, Any]:
    from cockpit.core.profile import load_profile
    from cockpit.journal import Journal
    from cockpit.supervisor.supervisor import Supervisor

    tmp = Path(tempfile.mkdtemp(prefix="cockpit-journal-writes-"))
    (tmp / "gpus").mkdir()
    os.environ["COCKPIT_RUNS_ROOT"] = str(tmp / "runs")
    os.environ["COCKPIT_SIM_GPU_DIR"] = str(tmp / "gpus")
    program = [sys.executable, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", "1",
               "--sim-startup-speed", "200", "--sim-traffic", "steady", "--sim-dir", str(tmp / "gpus")]
    doc = {"name": "jw", "version": "0.5.9", "hosts": [{"ssh": "local"}], "program": program,
           "workdir": str(tmp / "work"), "log": "logs/sglang.log", "env": {"COCKPIT_SIM_GPU_DIR": str(tmp / "gpus")},
           "server": {"model-path": "/models/Kimi-K2.5", "trust-remote-code": True, "tp": 8,
                      "mem-fraction-static": 0.88, "port": free_port(), "enable-metrics": True}}
    path = tmp / "jw.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    db = tmp / "journal.sqlite3"
    journal = Journal.open(db)
    sup = Supervisor(load_profile(path), journal=journal)
    info = await sup.start()
    if sup.recorder is not None:
        sup.recorder.started(info)
    runner = asyncio.create_task(sup.run())
    try:
        if not await sup.wait_until(lambda s: s.is_ready(), 120):
            raise SystemExit(f"not READY: {sup.state_phase}")
        await asyncio.sleep(settle)
        io0, size0, t0 = io_counters(), journal_bytes(db), time.monotonic()
        await asyncio.sleep(minutes * 60)
        io1, size1, elapsed = io_counters(), journal_bytes(db), time.monotonic() - t0
        lines = sup.fold.state.progress_lines
        mode = str(journal._conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        await sup.stop(timeout=10)
        await sup.close()
        await runner
        journal.close()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # the server is stopped: its files go with it
    per_hour = 3600.0 / elapsed
    wchar = (io1["wchar"] - io0["wchar"]) * per_hour
    return {
        "minutes": round(elapsed / 60, 2),
        "wchar_per_hour_mb": round(wchar / 1e6, 3),
        "wchar_per_day_mb": round(wchar * 24 / 1e6, 1),
        "write_bytes_per_hour_mb": round((io1["write_bytes"] - io0["write_bytes"]) * per_hour / 1e6, 3),
        "journal_growth_per_hour_kb": round((size1 - size0) * per_hour / 1e3, 1),
        "journal_mode": mode,
        "batch_lines_seen": lines,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = asyncio.run(measure(args.minutes, args.settle))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"attached dashboard, steady run, {out['minutes']} min: {out['wchar_per_hour_mb']} MB/h written "
              f"({out['wchar_per_day_mb']} MB/day; block layer {out['write_bytes_per_hour_mb']} MB/h), "
              f"journal files +{out['journal_growth_per_hour_kb']} kB/h ({out['journal_mode']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
