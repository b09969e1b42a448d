"""`cockpit bench` beside SGLang's own load tool (`python -m sglang.bench_serving`, from the same
install) against one real SGLang server (0.5.23, its CPU engine, tiny-llama): the same load —
random token ids sent as ids through SGLang's `/generate`, the same input/output lengths, the same
concurrency — and the figures side by side.

    COCKPIT_REAL_SGLANG_VENV=/root/.cache/cockpit-engines/sglang-0.5.23 \\
        .venv/bin/python bench/vs_sglang_bench.py [--input-len 128] [--output-len 32] [--concurrency 2]
        [--requests 64] [--rounds 4] [--engine-cpus 0] [--client-cpus 1] [--json] [--markdown FILE]

On a shared 2-core machine CPU contention swings either tool's figures by 2×, so the engine and
the load generator are pinned to separate cores (`taskset -c`; the engine's whole tree inherits
it), the tools run one after the other, alternating, `--rounds` times each, and each run's prompt
tokens are checked against the server's own counter (`sglang:prompt_tokens_total`, read before and
after; `--tokenize-prompt` makes bench_serving send ids, as cockpit does, so no re-tokenizing
changes a length). The engine is launched by `cockpit up --wait ready` and stopped by `cockpit
down`, under the real-engine tests' machine-wide lock.

Agreement asked (issue 34): output tok/s within 5 %, TTFT p50 within 15 % (means of the rounds).
Prints the figures and whether they agree; exit 0 either way (nothing in a timed test).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))

from bench._common import machine  # noqa: E402
from bench.vs_vllm_bench import fmt, isolated_env, timed  # noqa: E402
from tests.conftest import free_port  # noqa: E402

VENV = Path(os.environ.get("COCKPIT_REAL_SGLANG_VENV", "/root/.cache/cockpit-engines/sglang-0.5.23"))
MODEL = VENV.parent / "models" / "tiny-llama"


def profile(root: Path, port: int, engine_cpus: str) -> Path:
    doc = {
        "name": "vs-sglang-bench", "backend": "sglang", "version": "0.5.23", "hosts": [{"ssh": "local"}],
        "program": ["taskset", "-c", engine_cpus, str(VENV / "bin" / "python"), "-m", "sglang.launch_server"],
        "workdir": str(root / "work"), "log": "logs/sglang.log",
        "env": {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        "server": {"model-path": str(MODEL), "port": port, "host": "127.0.0.1", "device": "cpu",
                   "enable-metrics": True, "mem-fraction-static": 0.5, "max-total-tokens": 4096},
    }
    path = root / "vs-sglang-bench.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def prompt_tokens(port: int) -> float:
    """The server's prompt-token counter, read by the backend's own metric names."""
    from cockpit.backends import get_backend
    from cockpit.serving.servermetrics import parse_scrape

    m = get_backend("sglang").metrics
    assert m is not None
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}{m.path()}", timeout=30).read().decode()
    return float(parse_scrape(text, m.prefix(), m.serving()).get("prompt_tokens", 0.0))


def run_cockpit(a: argparse.Namespace, prof: Path, env: dict[str, str]) -> dict[str, Any]:
    proc, cpu, wall = timed(["taskset", "-c", a.client_cpus, sys.executable, "-m", "cockpit", "bench", str(prof),
                             "--api", "sglang", "--requests", str(a.requests), "--concurrency", str(a.concurrency),
                             "--input-len", str(a.input_len), "--output-len", str(a.output_len),
                             "--duration", "900", "--json"], env, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"cockpit bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout)
    return {"tool": "cockpit bench", "completed": r["requests"], "errors": r["errors"],
            "output_tok_s": r["output_tok_s"], "ttft_p50": r["ttft_ms"]["p50"], "ttft_p99": r["ttft_ms"]["p99"],
            "itl_p50": r["itl_ms"]["p50"], "cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def run_sglang(a: argparse.Namespace, port: int, env: dict[str, str], out_dir: Path, i: int) -> dict[str, Any]:
    out = out_dir / f"sglang-{i}.jsonl"
    proc, cpu, wall = timed([
        "taskset", "-c", a.client_cpus, str(VENV / "bin" / "python"), "-m", "sglang.bench_serving",
        "--backend", "sglang", "--base-url", f"http://127.0.0.1:{port}", "--model", str(MODEL),
        "--tokenizer", str(MODEL), "--dataset-name", "random-ids", "--tokenize-prompt",
        "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
        "--random-range-ratio", "1.0", "--num-prompts", str(a.requests), "--max-concurrency", str(a.concurrency),
        "--request-rate", "inf", "--seed", str(i), "--disable-tqdm", "--output-file", str(out)],
        {**env, "SGLANG_USE_CPU_ENGINE": "1"}, timeout=1200)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"sglang.bench_serving failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    r = json.loads(out.read_text().strip().splitlines()[-1])
    return {"tool": "sglang.bench_serving", "completed": r.get("completed"),
            "errors": a.requests - int(r.get("completed") or 0),
            "output_tok_s": round(float(r["output_throughput"]), 2),
            "ttft_p50": round(float(r["median_ttft_ms"]), 2), "ttft_p99": round(float(r.get("p99_ttft_ms", 0)), 2),
            "itl_p50": round(float(r["median_tpot_ms"]), 2) if "median_tpot_ms" in r else None,
            "cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def measure(a: argparse.Namespace, root: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]], float]:
    port = free_port()
    prof = profile(root, port, a.engine_cpus)
    up, _, up_wall = timed([sys.executable, "-m", "cockpit", "up", str(prof), "--wait", "ready", "--timeout", "900"],
                           env, timeout=1000)
    if up.returncode != 0:
        raise SystemExit(f"cockpit up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
    print(f"engine READY in {up_wall:.0f} s (SGLang {VENV.name}, tiny-llama, port {port}, CPUs {a.engine_cpus})",
          file=sys.stderr)
    rows: list[dict[str, Any]] = []
    try:
        for i in range(a.rounds):
            for run in (lambda: run_cockpit(a, prof, env), lambda i=i: run_sglang(a, port, env, root, i)):
                before = prompt_tokens(port)
                row = run()
                # each tool's one request before the load is counted too (see agreement())
                row["server_prompt_tokens"] = prompt_tokens(port) - before
                rows.append(row)
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        subprocess.run([sys.executable, "-m", "cockpit", "down", str(prof), "--timeout", "20"], env=env,
                       capture_output=True, timeout=180, cwd=REPO)
    return rows, up_wall


def agreement(a: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(tool: str, key: str) -> float:
        return statistics.fmean(float(r[key]) for r in rows if r["tool"] == tool)

    ours, theirs = "cockpit bench", "sglang.bench_serving"
    tok = mean(ours, "output_tok_s") / mean(theirs, "output_tok_s") - 1
    ttft = mean(ours, "ttft_p50") / mean(theirs, "ttft_p50") - 1
    want = a.requests * a.input_len
    # each tool sends one request of its own before the load, counted around its run too:
    # cockpit bench's check request (input_len + 2 tokens seen), sglang.bench_serving's warm-up (one
    # prompt of input_len)
    lengths = all(want + a.input_len <= r["server_prompt_tokens"] <= want + a.input_len + 8 for r in rows)
    return {"output_tok_s_diff_pct": round(tok * 100, 1), "ttft_p50_diff_pct": round(ttft * 100, 1),
            "output_tok_s_within_5pct": abs(tok) <= 0.05, "ttft_p50_within_15pct": abs(ttft) <= 0.15,
            "prompt_tokens_as_asked": lengths}


def table(rows: list[dict[str, Any]]) -> str:
    cols = [("tool", "tool"), ("completed", "done"), ("errors", "errors"), ("output_tok_s", "output tok/s"),
            ("ttft_p50", "TTFT p50 ms"), ("ttft_p99", "TTFT p99 ms"), ("itl_p50", "ITL/TPOT p50 ms"),
            ("server_prompt_tokens", "server prompt tokens"), ("cpu_s", "tool CPU s"), ("wall_s", "wall s")]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=2)
    # 64 × 4: at 16 requests a run lasts ~4 s and one tool's runs alone spread 180–262 tok/s on a
    # quiet machine (docs/PERFORMANCE.md); at 64 the two tools' means agree within the noise
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--engine-cpus", default="0")
    p.add_argument("--client-cpus", default="1")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", metavar="FILE")
    a = p.parse_args()
    if not (VENV / ".cockpit-installed").exists() or not (MODEL / "config.json").exists():
        raise SystemExit(f"no SGLang at {VENV} (run `bash scripts/real-engine.sh sglang`)")
    m = machine()
    with tempfile.TemporaryDirectory(prefix="vs-sglang-bench-") as tmp:
        root = Path(tmp)
        env = isolated_env(root)
        t_lock = time.monotonic()
        with open(VENV.parent / ".engine.lock", "a+") as lock:  # one real engine here at a time (the tests' lock)
            fcntl.flock(lock, fcntl.LOCK_EX)
            waited = time.monotonic() - t_lock
            rows, up_wall = measure(a, root, env)
    verdict = agreement(a, rows)
    head = (f"{m['nproc']} CPUs ({m['cpu']}), load {m['loadavg_1m']} at start; SGLang 0.5.23 CPU engine on CPUs "
            f"{a.engine_cpus}, load generators on CPUs {a.client_cpus}; tiny-llama, /generate with token ids, "
            f"input {a.input_len} / output {a.output_len} tokens, concurrency {a.concurrency}, {a.requests} requests "
            f"per run, {a.rounds} rounds alternating; engine READY in {up_wall:.0f} s (lock waited {waited:.0f} s)")
    if a.json:
        print(json.dumps({"machine": m, "args": vars(a), "rows": rows, "agreement": verdict}, indent=2))
    else:
        print(head)
        print(table(rows))
        print(json.dumps(verdict))
    if a.markdown:
        Path(a.markdown).write_text(head + "\n\n" + table(rows) + "\n\n" + json.dumps(verdict) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
