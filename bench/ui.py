"""Benchmark: the real TUI (`cockpit tui PROFILE`) in a real tmux pane, 140×45.

  keys   key-to-screen latency during a 20k lines/s flood: press `f` (cycle the log filter: the
         pane re-selects its whole ring buffer and repaints) and poll `tmux capture-pane` until the
         new filter's name is on screen; p50 / p99 over --presses presses. The flood is
         bench/_writer.py launched by the TUI itself as the profile's server, so the TUI process
         follows, parses and paints it while the keys are measured.
  idle   CPU of the TUI process (and of its helper processes: the telemetry agent and the log
         follower) over --idle-seconds with the server READY and quiet, telemetry at 1 Hz, for 8
         and for 64 ranks (64 simulated GPUs).
  frame  time from starting `cockpit tui` (picker) / `cockpit tui PROFILE` to the first frame on
         screen, median of --runs.
  memory (--only memory) RSS of the TUI process, sampled every second, while it follows 10M lines
         appended as fast as the writer can.

The alternative in the same run: `tail -F LOG | grep --line-buffered` in a tmux pane, its CPU
during the same kind of flood (it paints nothing but lines).

    python bench/ui.py                  # ~2 min
    python bench/ui.py --only keys --presses 60
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import children, free_port, median, pct, print_machine, proc_cpu_s, proc_rss_mb, writer_profile

FILTERS = ("memory", "errors", "batches", "all")


class Pane:
    def __init__(self, tmp: Path, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.socket = f"cockpit-bench-{os.getpid()}-{name}"
        self.session = name
        full = ["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "140", "-y", "45",
                "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        self.started = time.monotonic()
        subprocess.run(full, check=True, cwd=tmp)
        self.tmux("set-option", "-t", name, "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", self.session, "#{pane_pid}").strip())

    def wait(self, pattern: str, timeout: float, every: float = 0.1) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.text()
            if re.search(pattern, screen):
                return screen
            time.sleep(every)
        raise SystemExit(f"{pattern!r} not on screen after {timeout:.0f} s; last screen:\n{screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def tui_env(tmp: Path) -> dict[str, str]:
    env = {
        "HOME": str(tmp / "home"),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "COCKPIT_RUNS_ROOT": str(tmp / "runs"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TERM": "tmux-256color",
        "LANG": "C.UTF-8",
    }
    # PYTHONPATH passes through so that old code can be timed with the same bench
    # (PYTHONPATH=/path/to/old/checkout .venv/bin/python bench/ui.py).
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    for k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        Path(env[k]).mkdir(parents=True, exist_ok=True)
    return env


def cockpit(*args: str) -> list[str]:
    return [sys.executable, "-m", "cockpit", *args]


def down(tmp: Path, name: str, env: dict[str, str]) -> None:
    subprocess.run(cockpit("down", str(tmp / f"{name}.yaml"), "--timeout", "5"), env=env, cwd=tmp,
                   capture_output=True, timeout=60, check=False)


def keys_during_flood(tmp: Path, presses: int, rate: float) -> dict[str, Any]:
    env = tui_env(tmp)
    sim = tmp / "flood-gpus"
    seconds = presses * 0.6 + 30
    writer_profile(tmp, "flood", ["--rate", str(int(rate)), "--hz", "20", "--seconds", str(seconds), "--delay", "4",
                                  "--sim-gpus", str(sim), "--sim-count", "8", "--linger", "60"], sim_dir=sim,
                   port=free_port())
    pane = Pane(tmp, "flood", cockpit("tui", str(tmp / "flood.yaml")), env)
    lat: list[float] = []
    try:
        pane.wait(r"\bREADY\b", 60)
        pane.wait(r"Decode batch", 30)  # the flood has reached the screen
        time.sleep(2.0)
        pid = pane.pid()
        cpu0, t0 = proc_cpu_s(pid), time.monotonic()
        screen = pane.text()
        m = re.search(r"Log \[(\w+)\]", screen)
        cur = m.group(1) if m else "all"
        for _ in range(presses):
            nxt = FILTERS[(FILTERS.index(cur) + 1) % len(FILTERS)] if cur in FILTERS else "memory"
            want = f"Log [{nxt}]"
            t = time.perf_counter()
            pane.keys("f")
            while want not in pane.text():
                if time.perf_counter() - t > 10:
                    raise SystemExit(f"{want} not on screen 10 s after the key")
                time.sleep(0.003)  # each capture is a process; polling flat out would starve the TUI
            lat.append(time.perf_counter() - t)
            cur = nxt
            time.sleep(random.uniform(0.2, 0.4))
        cpu_share = (proc_cpu_s(pid) - cpu0) / (time.monotonic() - t0)
        rss = proc_rss_mb(pid)
        screen = pane.text()
        dropped = re.search(r"(\d+) lines dropped", screen)
    finally:
        down(tmp, "flood", env)
        pane.close()
    return {"presses": presses, "rate": rate, "p50_s": pct(lat, 50), "p99_s": pct(lat, 99), "max_s": max(lat),
            "tui_cpu_share": cpu_share, "tui_rss_mb": rss, "dropped_on_screen": int(dropped.group(1)) if dropped else 0,
            "slowest_ms": [round(x * 1e3) for x in sorted(lat)[-5:]]}


def grep_flood_cpu(tmp: Path, rate: float, seconds: float) -> dict[str, Any]:
    """tail -F | grep --line-buffered painting the batch lines of the same flood in a tmux pane."""
    log = tmp / "grep-flood.log"
    log.touch()
    env = tui_env(tmp)
    pane = Pane(tmp, "grep", ["sh", "-c", f"tail -F -n 0 {log} | grep --line-buffered 'Decode batch'"], env)
    try:
        time.sleep(0.5)
        with open(log, "ab") as out:
            w = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_writer.py")), "--rate", str(int(rate)),
                                  "--hz", "20", "--seconds", str(seconds)], stdout=out)
            time.sleep(2.0)
            kids = children(pane.pid())
            c0, t0 = sum(proc_cpu_s(p) for p in kids), time.monotonic()
            w.wait()
            share = (sum(proc_cpu_s(p) for p in kids) - c0) / (time.monotonic() - t0)
    finally:
        pane.close()
    return {"cpu_share": share}


def idle_cpu(tmp: Path, ranks: int, seconds: float) -> dict[str, Any]:
    env = tui_env(tmp)
    name = f"idle{ranks}"
    sim = tmp / f"{name}-gpus"
    writer_profile(tmp, name, ["--ranks", str(ranks), "--seconds", "0", "--linger", str(seconds + 120),
                               "--sim-gpus", str(sim), "--sim-count", str(ranks)], ranks=ranks, sim_dir=sim,
                   port=free_port())
    pane = Pane(tmp, name, cockpit("tui", str(tmp / f"{name}.yaml")), env)
    try:
        pane.wait(r"\bREADY\b", 60)
        pane.wait(rf"TP{min(ranks, 8) - 1}\b", 30)
        time.sleep(5.0)  # the first telemetry samples, the first diagnosis
        pid = pane.pid()
        helpers = children(pid)
        c0, h0, t0 = proc_cpu_s(pid), sum(proc_cpu_s(p) for p in helpers), time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        cpu = (proc_cpu_s(pid) - c0) / wall
        hcpu = (sum(proc_cpu_s(p) for p in helpers) - h0) / wall
        rss = proc_rss_mb(pid)
        screen = pane.text()
    finally:
        down(tmp, name, env)
        pane.close()
    return {"ranks": ranks, "seconds": seconds, "tui_pct": cpu * 100, "helpers_pct": hcpu * 100, "tui_rss_mb": rss,
            "helpers": len(helpers), "rank_rows_on_screen": len(re.findall(r"^\s*\S*\s*TP\d+ ", screen, re.M))}


def tui_memory(tmp: Path, lines: int) -> dict[str, Any]:
    """RSS of the TUI process while it follows `lines` lines appended as fast as possible."""
    env = tui_env(tmp)
    sim = tmp / "mem-gpus"
    times = tmp / "mem.times.json"
    writer_profile(tmp, "mem", ["--rate", "0", "--lines", str(lines), "--delay", "4", "--times", str(times),
                                "--sim-gpus", str(sim), "--sim-count", "8", "--linger", "600"], sim_dir=sim,
                   port=free_port())
    pane = Pane(tmp, "mem", cockpit("tui", str(tmp / "mem.yaml")), env)
    samples: list[tuple[float, float]] = []
    try:
        pane.wait(r"\bREADY\b", 60)
        pid = pane.pid()
        t0 = time.monotonic()
        cpu0 = last_cpu = proc_cpu_s(pid)
        quiet = 0
        while time.monotonic() - t0 < 900:
            time.sleep(1.0)
            samples.append((time.monotonic() - t0, proc_rss_mb(pid)))
            cpu = proc_cpu_s(pid)
            # done: the writer has finished and the TUI has gone quiet (caught up)
            quiet = quiet + 1 if times.exists() and cpu - last_cpu < 0.2 else 0
            last_cpu = cpu
            if quiet >= 3:
                break
        wall = time.monotonic() - t0
        cpu_used = proc_cpu_s(pid) - cpu0
    finally:
        down(tmp, "mem", env)
        pane.close()
    rss = [mb for _, mb in samples]
    return {"lines": lines, "wall_s": wall, "cpu_s": cpu_used, "rss_max_mb": max(rss), "rss_end_mb": rss[-1],
            "rss_at_quarters_mb": [rss[min(len(rss) - 1, len(rss) * q // 4)] for q in (0, 1, 2, 3, 4)]}


def first_frame(tmp: Path, runs: int) -> dict[str, Any]:
    env = tui_env(tmp)
    writer_profile(tmp, "frame", ["--seconds", "0", "--linger", "300"])
    picker: list[float] = []
    dash: list[float] = []
    picker_cpu: list[float] = []
    dash_cpu: list[float] = []
    for i in range(runs):
        for kind, argv, pattern, into, cpu_into in (
            ("picker", cockpit("tui"), r"\S", picker, picker_cpu),
            ("dashboard", cockpit("tui", str(tmp / "frame.yaml")), r"Log \[", dash, dash_cpu),
        ):
            t = time.monotonic()
            pane = Pane(tmp, f"{kind}{i}", argv, env)
            try:
                pid = pane.pid()
                pane.wait(pattern, 30, every=0.005)
                into.append(time.monotonic() - t)
                # CPU the process spent up to its first frame: what the wall time would be on an idle core
                cpu_into.append(proc_cpu_s(pid))
            finally:
                pane.close()
            if kind == "dashboard":
                down(tmp, "frame", env)
    return {"runs": runs, "picker_median_s": median(picker), "dashboard_median_s": median(dash),
            "picker_max_s": max(picker), "dashboard_max_s": max(dash),
            "picker_cpu_median_s": median(picker_cpu), "dashboard_cpu_median_s": median(dash_cpu)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presses", type=int, default=40)
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--idle-seconds", type=float, default=20)
    ap.add_argument("--runs", type=int, default=5, help="first-frame runs")
    ap.add_argument("--only", choices=("keys", "idle", "frame", "memory"), default=None)
    ap.add_argument("--memory-lines", type=int, default=10_000_000, help="lines for --only memory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed")
    print_machine()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-ui-") as d:
        tmp = Path(d)
        if args.only in (None, "frame"):
            f = out["frame"] = first_frame(tmp, args.runs)
            print(f"first frame: picker median {f['picker_median_s']:.2f} s, dashboard median "
                  f"{f['dashboard_median_s']:.2f} s (must < 1 s; max {f['picker_max_s']:.2f} / {f['dashboard_max_s']:.2f} s); "
                  f"CPU spent by then {f['picker_cpu_median_s']:.2f} / {f['dashboard_cpu_median_s']:.2f} s", flush=True)
        if args.only in (None, "keys"):
            k = out["keys"] = keys_during_flood(tmp, args.presses, args.rate)
            g = out["keys_tail_grep"] = grep_flood_cpu(tmp, args.rate, 10)
            print(f"keys during a {args.rate:,.0f} lines/s flood: p50 {k['p50_s'] * 1e3:.0f} ms, p99 {k['p99_s'] * 1e3:.0f} ms, "
                  f"max {k['max_s'] * 1e3:.0f} ms over {k['presses']} presses (must p99 < 150 ms); TUI at "
                  f"{k['tui_cpu_share'] * 100:.0f}% of a core, RSS {k['tui_rss_mb']:.0f} MB, {k['dropped_on_screen']} lines "
                  f"dropped; slowest {k['slowest_ms']} ms; tail -F | grep in a pane: {g['cpu_share'] * 100:.0f}% of a core", flush=True)
        if args.only in (None, "idle"):
            for ranks in (8, 64):
                i = out[f"idle_{ranks}"] = idle_cpu(tmp, ranks, args.idle_seconds)
                limit = 3 if ranks == 8 else 8
                print(f"idle, {ranks} ranks READY, telemetry at 1 Hz, {args.idle_seconds:g} s: TUI process "
                      f"{i['tui_pct']:.1f}% of a core (must < {limit}%), its {i['helpers']} helper processes "
                      f"{i['helpers_pct']:.1f}%, RSS {i['tui_rss_mb']:.0f} MB", flush=True)
        if args.only == "memory":
            m = out["memory"] = tui_memory(tmp, args.memory_lines)
            print(f"TUI following {m['lines']:,} lines appended at full speed ({m['wall_s']:.0f} s, "
                  f"{m['cpu_s']:.1f} CPU-s in the TUI process): RSS max "
                  f"{m['rss_max_mb']:.0f} MB, at 0/25/50/75/100 % of the run "
                  f"{' / '.join(f'{x:.0f}' for x in m['rss_at_quarters_mb'])} MB (must < 200 MB, flat)", flush=True)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
