"""Cockpit's tuning against the crash-driven descent, on the story's simulator.

    .venv/bin/python bench/tune.py                  # ~6 min on the 2-core VM
    .venv/bin/python bench/tune.py --speed 10 --duration 20 --json out.json

The story: Kimi-K2.5 on 8 simulated RTX PRO 6000, TP8, SGLang 0.5.9, the profile at
--mem-fraction-static 0.93, headroom target 5 GiB (warn 3). Both contenders run the same load
(`cockpit bench`: 64 requests in flight, 512-token prompts, 1024 output tokens):

- Cockpit: `cockpit tune` (launch budget 4).
- The crash-driven descent (vLLM's auto_tune.sh): start at 0.98, launch, bench, and after every
  crash (at start-up or under load) lower by 0.01; stop at the first setting that survives.

Reported for each: launches, crashes, simulated time to the best setting ((launch-to-ready +
bench) wall seconds × --sim-speed), the headroom it ends at, its throughput measured live, and its
throughput in the simulator's own model (an in-process run of the same scheduler and throughput
model, closed loop, same load): the machine this runs on is shared, and live tok/s swing with its
load; the model's do not. The best the simulator allows under the 5 GiB target is the model's
maximum over --mem-fraction-static, --cuda-graph-max-bs and --chunked-prefill-size.
Benchmarks print; they assert nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cockpit.sim.perf import perf_model  # noqa: E402
from cockpit.sim.presets import GPUS, MODELS  # noqa: E402
from cockpit.sim.sglang.config import decode_capture_sizes  # noqa: E402
from cockpit.sim.sglang.scheduler import Req, SchedParams, Scheduler  # noqa: E402

PY = sys.executable
MODEL, GPU = MODELS["kimi-k2.5"], GPUS["rtx-pro-6000"]
P_WORST = 94.60  # GiB free before weights on the worst rank (TP3), the story's P
TARGET, WARN = 5.0, 3.0
CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 64, 512, 1024
CHUNKS = (2048, 4096, 8192, 16384)


# ---- the simulator's own model, in process ---------------------------------------------------
def graph_gib(max_bs: int) -> float:
    return MODEL.graph_gib(max(decode_capture_sizes(max_bs)))


def headroom(mfs: float, max_bs: int) -> float:
    """Free GiB after capture on the worst rank: P·(1 − mfs) − workspace − graphs (SIMULATOR.md)."""
    return P_WORST * (1 - mfs) - MODEL.workspace_gib - graph_gib(max_bs)


def kv_tokens(mfs: float) -> int:
    weights = MODEL.weights_gib(8, 1)
    kv = (P_WORST - weights) - P_WORST * (1 - mfs)
    return int(kv * 2**30 // MODEL.cell_bytes(8))


def model_tok_s(mfs: float, max_bs: int = 512, chunk: int = 8192, horizon_s: float = 900.0,
                warmup_s: float = 120.0) -> float | None:
    """Output tok/s (simulated seconds) of a closed loop of CONCURRENCY clients; None when the
    setting dies (no room for the graphs, or a prefill chunk's activations above the headroom)."""
    h = headroom(mfs, max_bs)
    if h <= 0 or MODEL.act_gib(chunk) > h:
        return None
    tokens = kv_tokens(mfs)
    params = SchedParams(version="0.5.9", pool_tokens=tokens, chunked_prefill_size=chunk, max_prefill_tokens=16384,
                         max_running_requests=min(tokens // 2, 2048), decode_log_interval=40,
                         cuda_graph_max_bs=max_bs, decode_graph=True, prefill_graph_max_tokens=0,
                         prefill_tok_per_s=0.0, decode_step_s=0.0, decode_per_req_s=0.0,
                         context_len=MODEL.context_len, perf=perf_model(MODEL, GPU, tp=8))
    n = [0]

    def new(t: float) -> Req:
        n[0] += 1
        return Req(f"r{n[0]}", t, INPUT_LEN, OUTPUT_LEN)

    sched: Scheduler

    def finished(r: Req) -> None:
        sched.add(new(r.finished_at or sched.t))

    sched = Scheduler(params, log=lambda _line: None, on_prefill=lambda _n: None, on_finish=finished)
    for _ in range(CONCURRENCY):
        sched.add(new(0.0))
    sched.advance(warmup_s)
    start = sched.stats.generation_tokens_total
    sched.advance(horizon_s)
    return (sched.stats.generation_tokens_total - start) / (sched.t - warmup_s)


def model_best() -> tuple[dict[str, Any], float]:
    """The best the model allows under the target: for each graph size and chunk the highest
    two-decimal mfs that keeps the target (more KV never lowers throughput at a fixed graph size)."""
    best: tuple[dict[str, Any], float] = ({}, 0.0)
    sizes = sorted({*range(8, 257, 8), *range(272, 513, 16)})
    for bs in sizes:
        mfs = math.floor((1 - (TARGET + MODEL.workspace_gib + graph_gib(bs)) / P_WORST) * 100 + 1e-9) / 100
        for chunk in CHUNKS:
            if MODEL.act_gib(chunk) > headroom(mfs, bs):
                continue
            v = model_tok_s(mfs, bs, chunk, horizon_s=600.0)
            if v is not None and v > best[1]:
                best = ({"mem-fraction-static": mfs, "cuda-graph-max-bs": bs, "chunked-prefill-size": chunk}, v)
    return best


def model_of(flags: dict[str, Any]) -> float | None:
    return model_tok_s(float(flags["mem-fraction-static"]), int(flags.get("cuda-graph-max-bs") or 512),
                       int(flags.get("chunked-prefill-size") or 8192))


# ---- live runs ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_env(root: Path, speed: float) -> dict[str, str]:
    sim_dir = root / "gpus"
    sim_dir.mkdir(parents=True)
    (root / "profiles").mkdir()
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-model", "kimi-k2.5", "--sim-speed",
               f"{speed:g}", "--sim-traffic", "none", "--sim-dir", str(sim_dir)]
    (root / "profiles" / "story.yaml").write_text(
        "name: story\nbackend: sglang\nversion: 0.5.9\nhosts:\n  - ssh: local\n"
        f"program: {json.dumps(program)}\nworkdir: {root / 'work'}\nlog: logs/sglang.log\n"
        "server:\n  model-path: /models/Kimi-K2.5\n  tp: 8\n  trust-remote-code: true\n"
        f"  mem-fraction-static: 0.93\n  port: {free_port()}\n  enable-metrics: true\n"
        f"policy:\n  target-headroom-gb: {TARGET}\n  warn-headroom-gb: {WARN}\n")
    env = dict(os.environ)
    env.update({"XDG_DATA_HOME": str(root / "xd"), "XDG_CONFIG_HOME": str(root / "xc"),
                "COCKPIT_RUNS_ROOT": str(root / "runs"), "COCKPIT_SIM_GPU_DIR": str(sim_dir),
                "PYTHONPATH": str(REPO)})
    return env


def cockpit(env: dict[str, str], root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "cockpit", *args], env=env, cwd=root, capture_output=True, text=True,
                          timeout=timeout)


def bench_args(duration: float) -> list[str]:
    return ["--concurrency", str(CONCURRENCY), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
            "--duration", f"{duration:g}", "--requests", "5000"]


def run_tune(speed: float, duration: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as d:
        root = Path(d)
        env = make_env(root, speed)
        out = cockpit(env, root, "tune", "story", "--max-launches", "4", *bench_args(duration), "--json")
        if out.returncode not in (0, 1):
            raise SystemExit(f"cockpit tune failed ({out.returncode}):\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout)
    best = r["best"]
    steps = r["steps"]
    upto = next((i for i, s in enumerate(steps) if best and s["run_id"] == best["run_id"]), len(steps) - 1)
    sim_s = sum((s.get("launch_s") or 0) + (s.get("bench_s") or 0) for s in steps[: upto + 1]) * speed
    return {"launches": r["launches"], "crashes": r["crashes"], "sim_s_to_best": round(sim_s),
            "best_flags": {k: v for k, v in (best or {}).get("flags", {}).items()
                           if k in ("mem-fraction-static", "cuda-graph-max-bs", "chunked-prefill-size")},
            "headroom_gb": (best or {}).get("headroom_gb"), "live_tok_s": (best or {}).get("output_tok_s"),
            "steps": [(s["flags"].get("mem-fraction-static"), s["flags"].get("cuda-graph-max-bs"), s["outcome"],
                       s["headroom_gb"], s["output_tok_s"], s["peak_running"], s["peak_queue"], s["peak_token_usage"])
                      for s in steps]}


def run_descent(speed: float, duration: float, start: float = 0.98, floor: float = 0.80) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-descent-") as d:
        root = Path(d)
        env = make_env(root, speed)
        mfs, launches, crashes, sim_s = start, 0, 0, 0.0
        steps: list[tuple[float, str, float | None, float | None]] = []
        while mfs >= floor:
            launches += 1
            t0 = time.monotonic()
            up = cockpit(env, root, "up", "story", "--set", f"mem-fraction-static={mfs:.2f}", "--wait", "ready",
                         "--timeout", "600", "--json")
            sim_s += (time.monotonic() - t0) * speed
            try:
                st = json.loads(up.stdout)
            except ValueError:
                st = {}
            h = min((r.get("avail_after_capture_gb") for r in st.get("ranks", []) if r.get("avail_after_capture_gb")
                     is not None), default=None)
            if up.returncode != 0:
                crashes += 1
                steps.append((mfs, "crashed at start-up", h, None))
                cockpit(env, root, "down", "story", "--timeout", "5")
                mfs = round(mfs - 0.01, 2)
                continue
            t1 = time.monotonic()
            b = cockpit(env, root, "bench", "story", *bench_args(duration), "--json")
            sim_s += (time.monotonic() - t1) * speed
            status = json.loads(cockpit(env, root, "status", "story", "--json").stdout)
            cockpit(env, root, "down", "story", "--timeout", "5")
            if status.get("phase") == "crashed" or b.returncode != 0:
                crashes += 1
                steps.append((mfs, "crashed under load", h, None))
                mfs = round(mfs - 0.01, 2)
                continue
            tps = json.loads(b.stdout)["output_tok_s"]
            steps.append((mfs, "survived", h, tps))
            return {"launches": launches, "crashes": crashes, "sim_s_to_best": round(sim_s),
                    "best_flags": {"mem-fraction-static": mfs}, "headroom_gb": h, "live_tok_s": tps, "steps": steps}
    return {"launches": launches, "crashes": crashes, "sim_s_to_best": round(sim_s), "best_flags": {},
            "headroom_gb": None, "live_tok_s": None, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", type=float, default=10.0, help="--sim-speed of the simulated server (default 10)")
    ap.add_argument("--duration", type=float, default=20.0, help="bench seconds per step (default 20)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--skip-live", action="store_true", help="only the model's figures")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; nproc {os.cpu_count()}")
    best_flags, best = model_best()
    print(f"best the simulator allows under {TARGET:g} GiB: {best:,.0f} tok/s at {best_flags} "
          f"(headroom {headroom(best_flags['mem-fraction-static'], best_flags['cuda-graph-max-bs']):.2f} GiB)")
    out: dict[str, Any] = {"model_best": {"flags": best_flags, "tok_s": round(best, 1)}}
    if not args.skip_live:
        for name, fn in (("cockpit tune", run_tune), ("crash-driven descent", run_descent)):
            r = fn(args.speed, args.duration)
            r["model_tok_s"] = model_of(r["best_flags"]) if r["best_flags"] else None
            r["of_best"] = round(r["model_tok_s"] / best, 4) if r["model_tok_s"] else None
            out[name] = r
            print(f"\n{name}: {r['launches']} launches, {r['crashes']} crashes, {r['sim_s_to_best']:,} simulated s "
                  f"to its best; {r['best_flags']} headroom {r['headroom_gb']} GiB; live "
                  f"{r['live_tok_s']} tok/s; model {r['model_tok_s'] and round(r['model_tok_s'])} tok/s "
                  f"= {r['of_best'] and round(r['of_best'] * 100, 1)} % of the best under the target"
                  + ("" if (r["headroom_gb"] or 0) >= TARGET else
                     f" — but at {r['headroom_gb']} GiB headroom, below the {TARGET:g} GiB target"))
            for s in r["steps"]:
                print("   ", s)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
