"""What every Cockpit benchmark shares: the machine's description, medians, realistic SGLang log
lines, a throw-away profile whose "server" is bench/_writer.py, and CPU/RSS readings of processes.

Benchmarks are commands, not tests: they print figures (and a ratio against the obvious
alternative run in the same process tree), they assert nothing.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
WRITER = BENCH_DIR / "_writer.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_1m": round(load[0], 2),
    }


def print_machine() -> None:
    m = machine()
    print(f"machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, Linux {m['kernel']}, "
          f"load {m['loadavg_1m']} at start")


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


# ---------------------------------------------------------------- processes: CPU and RSS


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE / 1e6
    except OSError:
        return float("nan")


def children(pid: int) -> list[int]:
    """Every descendant pid of `pid` (read from /proc, no psutil needed)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            parent[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError):
            continue
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- realistic SGLang lines


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def startup_lines(ranks: int, t0: float | None = None) -> list[str]:
    """SGLang 0.5.9's startup of `ranks` TP ranks (the Kimi-K2.5 story's numbers at 0.88), up to
    "ready to roll": what the reducer needs for per-rank memory and the READY phase."""
    t = time.time() if t0 is None else t0
    ts = _ts(t)
    names = [f"TP{i}" for i in range(ranks)]
    out = [f"[{ts}] server_args=ServerArgs(model_path='/models/Kimi-K2.5', trust_remote_code=True, "
           f"mem_fraction_static=0.88, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size={ranks}, "
           "dp_size=1, port=30000, host='127.0.0.1', cuda_graph_max_bs=256)"]
    out += [f"[{ts} {r}] Init torch distributed begin." for r in names]
    out += [f"[{ts} {r}] Init torch distributed ends. elapsed=2.87 s, mem usage=0.97 GB" for r in names]
    out += [f"[{ts} {r}] Load weight begin. avail mem=95.00 GB" for r in names]
    out += [f"[{ts} {r}] Load weight end. elapsed=68.10 s, type=KimiK25ForConditionalGeneration, "
            "dtype=torch.bfloat16, avail mem=23.18 GB, mem usage=71.82 GB." for r in names]
    out += [f"[{ts} {r}] KV Cache is allocated. #tokens: 174617, KV size: 11.43 GB" for r in names]
    out += [f"[{ts} {r}] Memory pool end. avail mem=9.26 GB" for r in names]
    out += [f"[{ts} {r}] Capture cuda graph begin. This can take up to several minutes. avail mem=9.26 GB"
            for r in names]
    out += [f"[{ts} {r}] Capture cuda graph end. Time elapsed: 13.98 s. mem usage=3.75 GB. avail mem=5.51 GB."
            for r in names]
    out.append(f"[{ts} TP0] max_total_num_tokens=174617, chunked_prefill_size=8192, max_prefill_tokens=16384, "
               "max_running_requests=2048, context_len=262144, available_gpu_mem=5.51 GB")
    out.append(f"[{ts}] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)")
    out.append(f'[{ts}] INFO:     127.0.0.1:51744 - "GET /model_info HTTP/1.1" 200 OK')
    out.append(f'[{ts}] INFO:     127.0.0.1:51750 - "POST /generate HTTP/1.1" 200 OK')
    out.append(f"[{ts}] The server is fired up and ready to roll!")
    return out


def serving_line(rnd: random.Random, ts: str) -> str:
    """One line of a busy server: half uvicorn access lines, the rest decode/prefill batch lines."""
    r = rnd.random()
    if r < 0.50:
        path = "/v1/chat/completions" if r < 0.45 else ("/health" if r < 0.48 else "/metrics")
        return (f'[{ts}] INFO:     10.0.{rnd.randrange(4)}.{rnd.randrange(2, 250)}:{rnd.randrange(30000, 61000)} - '
                f'"{"POST" if path.startswith("/v1") else "GET"} {path} HTTP/1.1" 200 OK')
    if r < 0.82:
        return (f"[{ts} TP0] Decode batch, #running-req: {rnd.randrange(1, 300)}, #token: {rnd.randrange(1000, 60000)}, "
                f"token usage: 0.{rnd.randrange(10, 99)}, cuda graph: True, "
                f"gen throughput (token/s): {rnd.uniform(800, 3100):.2f}, #queue-req: {rnd.randrange(0, 30)}")
    return (f"[{ts} TP0] Prefill batch, #new-seq: {rnd.randrange(1, 8)}, #new-token: {rnd.randrange(64, 8192)}, "
            f"#cached-token: {rnd.randrange(0, 4096)}, token usage: 0.{rnd.randrange(10, 99)}, "
            f"#running-req: {rnd.randrange(1, 300)}, #queue-req: {rnd.randrange(0, 30)}, "
            f"input throughput (token/s): {rnd.uniform(1000, 30000):.2f}, cuda graph: False")


def crash_lines(ts: str, rank: str = "TP3") -> list[str]:
    """A prefill CUDA OOM on `rank`; the decisive line (the reducer's crash) is index 1."""
    return [
        f"[{ts} {rank}] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.91, "
        "#running-req: 12, #queue-req: 3, input throughput (token/s): 21000.00, cuda graph: False",
        f"[{ts} {rank}] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        '  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a total capacity of "
        "94.97 GiB of which 412.56 MiB is free. Including non-PyTorch memory, this process has 94.55 GiB memory in use.",
        "",
    ]


# ---------------------------------------------------------------- a profile whose server is the writer


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def writer_profile(tmp: Path, name: str, writer_args: list[str], *, ssh: str = "local",
                   python: str | None = None, ranks: int = 8, sim_dir: Path | None = None,
                   port: int | None = None) -> Path:
    """A profile YAML in `tmp` that launches bench/_writer.py (through the real launch path: the
    host program, a detached process, its stdout appended to the log) instead of SGLang. The
    writer serves HTTP 200 on the profile's port, so the readiness probe sees a READY server."""
    workdir = tmp / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    # `up` refuses a model path that does not exist on the host (the writer never reads it)
    model = tmp / "models" / "Kimi-K2.5"
    model.mkdir(parents=True, exist_ok=True)
    env = {"COCKPIT_SIM_GPU_DIR": str(sim_dir)} if sim_dir else {}
    prog = [python or sys.executable, str(WRITER), *writer_args]
    lines = [
        f"name: {name}",
        "backend: sglang",
        "version: 0.5.9",
        "hosts:",
        f"  - ssh: {ssh}",
        f"program: {json.dumps(prog)}",
        f"workdir: {workdir}",
        "log: logs/sglang.log",
        f"env: {json.dumps(env)}",
        "server:",
        f"  model-path: {model}",
        f"  tp: {ranks}",
        "  mem-fraction-static: 0.88",
        # the command builder passes --port to the writer, which answers 200 there like a READY server
        f"  port: {port or free_port()}",
    ]
    path = tmp / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> Any:
    from cockpit.core.profile import load_profile

    return load_profile(str(path))


def show_table(title: str, head: list[str], rows: list[list[str]]) -> None:
    """A titled, column-aligned table of strings (the accuracy benchmarks' output)."""
    print(title)
    if not rows:
        print("  (no case)\n")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print()
