"""A stand-in SGLang server for the benchmarks: prints a realistic log to stdout (the launch path
appends stdout to the run's log) at a chosen rate, and records when it wrote what.

    _writer.py --ranks 8 --rate 20000 --seconds 10 --times /tmp/t.json [--crash] [--linger 30]
    _writer.py --rate 0 --lines 2000000          # as fast as it can

It ignores SGLang's own flags (the command builder appends them). `--times` gets a JSON list of
[last line number written, time.monotonic() after the write] per chunk, and "crash_line" /
"crash_at" for the decisive OOM line. `--sim-gpus DIR --sim-count N` declares N simulated GPUs and
one idle child process holding memory on each (what the telemetry agent's sim source reads), so a
64-rank run shows 64 bars without 64 busy processes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import _ts, crash_lines, serving_line, startup_lines

POOL = 50_000  # distinct serving lines, cycled (generating each line would cost more than printing it)


def sim_gpus(directory: Path, count: int) -> list[subprocess.Popen[bytes]]:
    from cockpit.sim.gpus import atomic_write_json, write_devices
    from cockpit.sim.presets import GPUS

    gpu = GPUS["rtx-pro-6000"]
    write_devices(directory, gpu, count)
    kids = []
    for i in range(count):
        kid = subprocess.Popen(["sleep", "86400"])
        kids.append(kid)
        atomic_write_json(directory / f"proc-{kid.pid}.json",
                          {"pid": kid.pid, "gpu_index": i, "used_mib": 89.5 * 1024, "updated": time.time()})
    return kids


def serve_health(port: int) -> None:
    """A READY server's HTTP side: every GET answers 200 (the readiness probe's view of SGLang)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the stdlib's spelling
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # the log is the flood's, not the probe's
            pass

    try:
        httpd = ThreadingHTTPServer(("127.0.0.1", port), Ok)
    except OSError as exc:  # taken, or a privileged port: the probe then sees "refused"
        print(f"bench writer: no HTTP on port {port}: {exc}", file=sys.stderr)
        return
    threading.Thread(target=httpd.serve_forever, daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20000, help="serving lines per second; 0 = as fast as possible")
    ap.add_argument("--hz", type=float, default=20, help="writes per second at a fixed rate")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--lines", type=int, default=0, help="stop after this many serving lines (rate 0)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between the startup and the serving lines")
    ap.add_argument("--times", type=Path, default=None)
    ap.add_argument("--crash", action="store_true", help="end with a prefill CUDA OOM on TP3")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to stay alive after the last line")
    ap.add_argument("--sim-gpus", type=Path, default=None)
    ap.add_argument("--sim-count", type=int, default=0)
    # SGLang's own --port (the command builder passes the profile's): answer HTTP 200 there, as a READY server would
    ap.add_argument("--port", type=int, default=0)
    args, _sglang_flags = ap.parse_known_args()
    if args.port:
        serve_health(args.port)

    kids = sim_gpus(args.sim_gpus, args.sim_count) if args.sim_gpus and args.sim_count else []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = sys.stdout.buffer
    head = startup_lines(args.ranks)
    out.write(("\n".join(head) + "\n").encode())
    out.flush()
    written = len(head)
    times: list[list[float]] = [[written, time.monotonic()]]
    rnd = random.Random(7)
    ts = _ts(time.time())
    pool = [(serving_line(rnd, ts) + "\n").encode() for _ in range(POOL)]
    if args.delay:
        time.sleep(args.delay)
    i = 0
    try:
        if args.rate <= 0:
            # as fast as possible, in 1 MiB-ish writes
            per = 8000
            target = args.lines or int(1e12)
            end = time.monotonic() + args.seconds if not args.lines else float("inf")
            while written - len(head) < target and time.monotonic() < end:
                n = min(per, target - (written - len(head)))
                block = b"".join(pool[(i + k) % POOL] for k in range(n))
                i += n
                out.write(block)
                out.flush()
                written += n
                times.append([written, time.monotonic()])
        else:
            per = max(1, round(args.rate / args.hz))
            start = time.monotonic()
            k = 0
            while time.monotonic() - start < args.seconds:
                block = b"".join(pool[(i + j) % POOL] for j in range(per))
                i += per
                due = start + k / args.hz
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                out.write(block)
                out.flush()
                written += per
                times.append([written, time.monotonic()])
                k += 1
        result: dict[str, object] = {"chunks": times, "lines": written}
        if args.crash:
            lines = crash_lines(_ts(time.time()))
            out.write((lines[0] + "\n").encode())
            out.flush()
            written += 1
            time.sleep(0.3)  # let the follower settle so the decisive lines arrive on their own
            # "Scheduler hit an exception" is the decisive line: the clock starts before it is written
            result["crash_at"] = time.monotonic()
            result["crash_line"] = written + 1
            out.write(("\n".join(lines[1:]) + "\n").encode())
            out.flush()
            written += len(lines) - 1
        result["lines"] = written
        if args.times:
            tmp = args.times.with_suffix(".tmp")
            tmp.write_text(json.dumps(result))
            os.replace(tmp, args.times)
        if args.linger:
            time.sleep(args.linger)
    finally:
        for kid in kids:
            kid.kill()
    return 1 if args.crash else 0


if __name__ == "__main__":
    sys.exit(main())
