"""A separate process that writes runs into a journal in a loop (concurrency and kill tests).

usage: python _writer.py JOURNAL PREFIX COUNT
Prints the index of every run after its rows are committed, one per line, flushed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cockpit.core.state import RunState, SeriesPoint
from cockpit.journal import Journal
from cockpit.supervisor.api import RunInfo


def main() -> None:
    path, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    journal = Journal.open(path)
    for i in range(count if count > 0 else 10**9):
        run_id = f"{prefix}-{i:06d}"
        info = RunInfo(id=run_id, profile=prefix, hosts=("local",), pid=None, pgid=None,
                       started_at=f"2026-11-29T08:{i // 3600 % 60:02d}:{i % 60:02d}+00:00",
                       run_dir="/tmp/x", log_path="/tmp/x/log")
        journal.record_start(info, prefix, {"mem-fraction-static": 0.88, "tp": 8, "i": i})
        st = RunState(phase="ready", format="sglang-0.5.9", max_total_num_tokens=1000 + i)
        st.rank("TP0").avail_after_capture_gb = 5.5
        st.gen_throughput.append(SeriesPoint(ts="2026-11-29 08:00:00", value=float(i)))
        journal.record_progress(run_id, st, [])
        journal.record_end(run_id, "stopped", st, [])
        print(i, flush=True)
    journal.close()


if __name__ == "__main__":
    main()
