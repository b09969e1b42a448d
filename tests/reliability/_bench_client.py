"""Runs the load generator (`cockpit bench`'s `run_bench`) against a server in its own process and
reports what it cost: `python _bench_client.py BASE_URL SPEC_JSON` prints the result as `bench --json`
would hold it (plain json.dumps: a NaN or Infinity would show), then one line
{"peak_rss_mb", "wall_s"}. A crash is a traceback and exit 1.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

from cockpit.serving.loadgen import run_bench
from cockpit.serving.workload import BenchSpec


def _peak_rss_kib() -> int:
    """This program's own peak RSS: VmHWM belongs to its address space, which exec made new.
    (getrusage's ru_maxrss survives exec: a child forked from a 266 MB pytest reads 266 MB.)"""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> int:
    base, raw = sys.argv[1], json.loads(sys.argv[2])
    levels = raw.pop("levels", [2])
    spec = BenchSpec(**raw)
    t0 = time.monotonic()
    result = asyncio.run(run_bench(base, spec, levels))
    wall = time.monotonic() - t0
    print(json.dumps(result))
    print(json.dumps({"peak_rss_mb": round(_peak_rss_kib() / 1024, 1), "wall_s": round(wall, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
