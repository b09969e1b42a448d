"""Benchmark: the live follow path (host program reads the log → frames → SGLangLogParser →
RunState → batched LogBatch/RunSnapshot, exactly what the TUI consumes) against
`tail -F | grep --line-buffered` on the same kind of growing file.

Three measurements, each run several times (medians; the machine is shared and noisy):

  capacity  a writer appends N lines as fast as it can; how many lines/s reach the consumer, and
            how many lines per CPU-second the cockpit process spends (its one core).
  burst     a writer appends 20k lines/s in 20 writes a second for S seconds; how long after each
            write its lines reach the consumer (p50 / p99 / max), and the CPU share it costs.
  memory    (--memory) follow 10M lines at full speed and sample the cockpit process's RSS.

The "server" is bench/_writer.py launched through the real launch path (`Supervisor.launch()` on
a throw-away profile: detached, stdout appended to the log, telemetry agent and readiness probe
running as in the TUI). tail/grep follow a log the same writer appends to.

    python bench/follow.py                 # capacity 1M lines ×3, burst 10 s ×3  (~1.5 min)
    python bench/follow.py --memory        # + RSS while following 10M lines   (~+1.5 min)
    python bench/follow.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    WRITER,
    children,
    cmdline,
    load,
    median,
    pct,
    print_machine,
    proc_cpu_s,
    proc_rss_mb,
    writer_profile,
)

GREP_WORDS = "Decode batch"  # an operator watching batch lines; matches ~1/3 of serving lines


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _follow_pids() -> list[int]:
    return [p for p in children(os.getpid()) if '"op":"follow"' in cmdline(p)]


class Seen:
    """What the consumer (the TUI's place) received: (arrival time, highest line number) per batch."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, int]] = []
        self.top = 0
        self.lines_delivered = 0
        self.dropped = 0
        self.crashed_at: float | None = None

    def on_logs(self, batch: Any) -> None:
        if batch.lines:
            n = batch.lines[-1].number
            self.top = max(self.top, n)
            self.arrivals.append((time.monotonic(), self.top))
        self.lines_delivered += len(batch.lines)
        self.dropped += batch.dropped

    def on_snapshot(self, snap: Any) -> None:
        if self.crashed_at is None and snap.state.phase == "crashed":
            self.crashed_at = time.monotonic()

    def delivered_at(self, line: int) -> float | None:
        tops = [a[1] for a in self.arrivals]
        i = bisect.bisect_left(tops, line)
        return self.arrivals[i][0] if i < len(self.arrivals) else None


async def cockpit_run(tmp: Path, name: str, writer_args: list[str], *, total_from_times: bool = True,
                      rss_every: float = 0.0, timeout: float = 300.0, transports: Any = None,
                      ssh: str = "local", python: str | None = None) -> dict[str, Any]:
    """Launch the writer as the profile's server, follow it with a real Supervisor until every line
    it wrote has been delivered (or the crash seen), then stop it. Returns timings and CPU."""
    from cockpit.supervisor.supervisor import Supervisor

    times_path = tmp / f"{name}.times.json"
    prof = load(writer_profile(tmp, name, [*writer_args, "--times", str(times_path)], ssh=ssh, python=python))
    seen = Seen()
    sup = Supervisor(prof, on_logs=seen.on_logs, on_snapshot=seen.on_snapshot, runs_root=str(tmp / "runs"),
                     transports=transports)
    await sup.launch(attach=False)
    cpu0, t0 = self_cpu(), time.monotonic()
    task = asyncio.create_task(sup.run())
    rss: list[tuple[int, float]] = []
    follow_cpu = 0.0
    deadline = time.monotonic() + timeout
    last_rss = 0.0
    want_crash = "--crash" in writer_args
    fp: list[int] = []
    info: dict[str, Any] | None = None
    polls = 0
    try:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            polls += 1
            if not fp and polls % 10 == 1:  # scanning /proc costs CPU in this process: rarely
                fp = _follow_pids()
            if fp:
                follow_cpu = max(follow_cpu, sum(proc_cpu_s(p) for p in fp))
            if rss_every and time.monotonic() - last_rss >= rss_every:
                last_rss = time.monotonic()
                rss.append((seen.top, proc_rss_mb(os.getpid())))
            if info is None:
                if not times_path.exists():
                    continue
                info = json.loads(times_path.read_text())
            if want_crash:
                if seen.crashed_at is not None:
                    break
            elif seen.top >= info["lines"]:
                break
        else:
            raise SystemExit(f"{name}: not finished after {timeout:.0f} s (seen line {seen.top})")
        wall, cpu = time.monotonic() - t0, self_cpu() - cpu0
        if rss_every:
            rss.append((seen.top, proc_rss_mb(os.getpid())))
    finally:
        await sup.stop(timeout=5)
        await sup.close()
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
        gc.collect()  # finalise subprocess transports while their loop is still open
    info = json.loads(times_path.read_text())
    return {"info": info, "seen": seen, "wall_s": wall, "cpu_s": cpu, "follow_cpu_s": follow_cpu, "rss": rss}


class GrepFollow:
    """`tail -F -n +1 LOG | grep --line-buffered -n WORDS`, read by a thread in big reads."""

    def __init__(self, log: Path) -> None:
        self.tail = subprocess.Popen(["tail", "-F", "-n", "+1", str(log)], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.grep = subprocess.Popen(["grep", "--line-buffered", "-n", GREP_WORDS], stdin=self.tail.stdout,
                                     stdout=subprocess.PIPE)
        assert self.tail.stdout is not None
        self.tail.stdout.close()
        self.arrivals: list[tuple[float, int]] = []
        self.top = 0
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.grep.stdout is not None
        fd = self.grep.stdout.fileno()
        rest = b""
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            buf = rest + data
            end = buf.rfind(b"\n")
            if end < 0:
                rest = buf
                continue
            start = buf.rfind(b"\n", 0, end) + 1
            self.top = int(buf[start : buf.index(b":", start)])
            self.arrivals.append((time.monotonic(), self.top))
            rest = buf[end + 1 :]

    def cpu_s(self) -> float:
        return proc_cpu_s(self.tail.pid) + proc_cpu_s(self.grep.pid)

    def close(self) -> None:
        for p in (self.tail, self.grep):
            p.kill()
            p.wait()
        self._t.join(5)
        if self.grep.stdout is not None:
            self.grep.stdout.close()

    def delivered_at(self, line: int) -> float | None:
        tops = [a[1] for a in self.arrivals]
        i = bisect.bisect_left(tops, line)
        return self.arrivals[i][0] if i < len(self.arrivals) else None


def grep_run(tmp: Path, name: str, writer_args: list[str], timeout: float = 300.0) -> dict[str, Any]:
    log = tmp / f"{name}.log"
    log.touch()
    times_path = tmp / f"{name}.times.json"
    g = GrepFollow(log)
    time.sleep(0.2)  # tail is up before the first line
    t0 = time.monotonic()
    with open(log, "ab") as out:
        w = subprocess.run([sys.executable, str(WRITER), *writer_args, "--times", str(times_path)], stdout=out,
                           check=False)
    if w.returncode not in (0, 1):
        raise SystemExit(f"writer failed ({w.returncode})")
    info = json.loads(times_path.read_text())
    # a sentinel after the writer's last line, so the end of the file is visible through the grep
    sentinel = info["lines"] + 1
    with open(log, "ab") as out:
        out.write(b"[2026-01-01 00:00:00 TP0] Decode batch, sentinel\n")
    deadline = time.monotonic() + timeout
    while g.top < sentinel and time.monotonic() < deadline:
        time.sleep(0.01)
    wall = time.monotonic() - t0
    cpu = g.cpu_s()
    g.close()
    return {"info": info, "seen": g, "wall_s": wall, "cpu_s": cpu}


def lags(info: dict[str, Any], seen: Any) -> list[float]:
    out = []
    for line, t in info["chunks"][1:]:
        at = seen.delivered_at(int(line))
        if at is not None:
            out.append(max(0.0, at - t))
    return out


def capacity(tmp: Path, runs: int, lines: int) -> dict[str, Any]:
    args = ["--rate", "0", "--lines", str(lines)]
    ck, gr = [], []
    for i in range(runs):
        r = asyncio.run(cockpit_run(tmp, f"cap{i}", args))
        first_t = r["info"]["chunks"][0][1]
        end_t = r["seen"].delivered_at(r["info"]["lines"])
        writer_s = r["info"]["chunks"][-1][1] - first_t
        ck.append({"lines_per_s": lines / (end_t - first_t), "lines_per_cpu_s": lines / r["cpu_s"],
                   "cpu_s": r["cpu_s"], "follow_cpu_s": r["follow_cpu_s"], "writer_s": writer_s,
                   "delivered": r["seen"].lines_delivered, "dropped": r["seen"].dropped})
        g = grep_run(tmp, f"capg{i}", args)
        gfirst = g["info"]["chunks"][0][1]
        gend = g["seen"].delivered_at(g["info"]["lines"] + 1)
        gr.append({"lines_per_s": lines / (gend - gfirst), "lines_per_cpu_s": lines / g["cpu_s"], "cpu_s": g["cpu_s"],
                   "writer_s": g["info"]["chunks"][-1][1] - gfirst})
        print(f"  run {i + 1}: cockpit {ck[-1]['lines_per_s'] / 1e3:.0f}k lines/s "
              f"({ck[-1]['lines_per_cpu_s'] / 1e3:.0f}k per CPU-s, host follower {r['follow_cpu_s']:.2f} CPU-s); "
              f"tail|grep {gr[-1]['lines_per_s'] / 1e3:.0f}k lines/s ({gr[-1]['lines_per_cpu_s'] / 1e3:.0f}k per CPU-s); "
              f"writer alone {lines / writer_s / 1e3:.0f}k lines/s", flush=True)
    res = {k: median(x[k] for x in ck) for k in ck[0]}
    gres = {k: median(x[k] for x in gr) for k in gr[0]}
    return {"lines": lines, "runs": runs, "cockpit": res, "tail_grep": gres}


def burst(tmp: Path, runs: int, seconds: float, rate: float) -> dict[str, Any]:
    args = ["--rate", str(int(rate)), "--hz", "20", "--seconds", str(seconds)]
    ck, gr = [], []
    for i in range(runs):
        r = asyncio.run(cockpit_run(tmp, f"burst{i}", args))
        lg = lags(r["info"], r["seen"])
        ck.append({"lag_p50_s": pct(lg, 50), "lag_p99_s": pct(lg, 99), "lag_max_s": max(lg),
                   "cpu_share": r["cpu_s"] / r["wall_s"], "follow_cpu_share": r["follow_cpu_s"] / r["wall_s"],
                   "dropped": r["seen"].dropped})
        g = grep_run(tmp, f"burstg{i}", args)
        glg = lags(g["info"], g["seen"])
        gr.append({"lag_p50_s": pct(glg, 50), "lag_p99_s": pct(glg, 99), "lag_max_s": max(glg),
                   "cpu_share": g["cpu_s"] / g["wall_s"]})
        print(f"  run {i + 1}: cockpit lag p50 {ck[-1]['lag_p50_s'] * 1e3:.0f} ms p99 {ck[-1]['lag_p99_s'] * 1e3:.0f} ms "
              f"max {ck[-1]['lag_max_s'] * 1e3:.0f} ms, {ck[-1]['cpu_share'] * 100:.0f}% of a core "
              f"(+{ck[-1]['follow_cpu_share'] * 100:.0f}% host follower); tail|grep p50 {gr[-1]['lag_p50_s'] * 1e3:.0f} ms "
              f"p99 {gr[-1]['lag_p99_s'] * 1e3:.0f} ms, {gr[-1]['cpu_share'] * 100:.0f}% of a core", flush=True)
    res = {k: median(x[k] for x in ck) for k in ck[0]}
    gres = {k: median(x[k] for x in gr) for k in gr[0]}
    return {"rate": rate, "seconds": seconds, "runs": runs, "cockpit": res, "tail_grep": gres}


def memory(tmp: Path, lines: int) -> dict[str, Any]:
    r = asyncio.run(cockpit_run(tmp, "mem", ["--rate", "0", "--lines", str(lines)], rss_every=1.0, timeout=900))
    samples = r["rss"]
    first_t = r["info"]["chunks"][0][1]
    end_t = r["seen"].delivered_at(r["info"]["lines"])
    after_1m = [mb for n, mb in samples if n >= 1_000_000]
    return {"lines": lines, "samples": samples, "rss_end_mb": samples[-1][1], "rss_max_mb": max(mb for _, mb in samples),
            "rss_growth_after_1m_mb": (after_1m[-1] - after_1m[0]) if after_1m else None,
            "lines_per_s": lines / (end_t - first_t), "lines_per_cpu_s": lines / r["cpu_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines of the capacity run")
    ap.add_argument("--rate", type=float, default=20000, help="lines/s of the burst")
    ap.add_argument("--seconds", type=float, default=10, help="length of the burst")
    ap.add_argument("--memory", action="store_true", help="also follow --memory-lines and sample RSS")
    ap.add_argument("--memory-lines", type=int, default=10_000_000)
    ap.add_argument("--only", choices=("capacity", "burst", "memory"), default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("tail") is None or shutil.which("grep") is None:
        raise SystemExit("tail and grep are needed")
    print_machine()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-follow-") as d:
        tmp = Path(d)
        os.environ["COCKPIT_RUNS_ROOT"] = str(tmp / "runs")
        if args.only in (None, "capacity"):
            print(f"capacity: {args.lines:,} lines appended as fast as possible, {args.runs} runs")
            c = out["capacity"] = capacity(tmp, args.runs, args.lines)
            print(f"capacity (median): cockpit {c['cockpit']['lines_per_s'] / 1e3:.0f}k lines/s, "
                  f"{c['cockpit']['lines_per_cpu_s'] / 1e3:.0f}k lines per CPU-second (goal ≥ 500k); "
                  f"tail|grep {c['tail_grep']['lines_per_s'] / 1e3:.0f}k lines/s, "
                  f"{c['tail_grep']['lines_per_cpu_s'] / 1e3:.0f}k per CPU-s; "
                  f"ratio (cockpit CPU / tail|grep CPU) {c['tail_grep']['lines_per_cpu_s'] / c['cockpit']['lines_per_cpu_s']:.1f}x",
                  flush=True)
            for f in tmp.glob("*.log"):
                f.unlink()
            shutil.rmtree(tmp / "work", ignore_errors=True)
        if args.only in (None, "burst"):
            print(f"burst: {args.rate:,.0f} lines/s in 20 writes/s for {args.seconds:g} s, {args.runs} runs")
            b = out["burst"] = burst(tmp, args.runs, args.seconds, args.rate)
            print(f"burst (median): cockpit lag p50 {b['cockpit']['lag_p50_s'] * 1e3:.0f} ms, "
                  f"p99 {b['cockpit']['lag_p99_s'] * 1e3:.0f} ms, max {b['cockpit']['lag_max_s'] * 1e3:.0f} ms "
                  f"(must < 1000 ms), {b['cockpit']['cpu_share'] * 100:.0f}% of a core → "
                  f"≈{args.rate / max(b['cockpit']['cpu_share'], 1e-9) / 1e3:.0f}k lines/s on one core at this chunk size; "
                  f"tail|grep p50 {b['tail_grep']['lag_p50_s'] * 1e3:.0f} ms, p99 {b['tail_grep']['lag_p99_s'] * 1e3:.0f} ms, "
                  f"{b['tail_grep']['cpu_share'] * 100:.0f}% of a core", flush=True)
            for f in tmp.glob("*.log"):
                f.unlink()
            shutil.rmtree(tmp / "work", ignore_errors=True)
        if args.memory or args.only == "memory":
            print(f"memory: following {args.memory_lines:,} lines at full speed, RSS sampled every second")
            m = out["memory"] = memory(tmp, args.memory_lines)
            marks = [s for s in m["samples"]]
            step = max(1, len(marks) // 10)
            print("  lines seen → RSS: " + ", ".join(f"{n / 1e6:.1f}M→{mb:.0f} MB" for n, mb in marks[::step]))
            print(f"memory: RSS {m['rss_end_mb']:.0f} MB at the end, {m['rss_max_mb']:.0f} MB max (must < 200 MB), "
                  f"growth after the first 1M lines {m['rss_growth_after_1m_mb']:+.1f} MB; "
                  f"{m['lines_per_s'] / 1e3:.0f}k lines/s, {m['lines_per_cpu_s'] / 1e3:.0f}k per CPU-s", flush=True)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
