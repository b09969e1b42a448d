"""Benchmark: `cockpit diagnose --json` on a busy SGLang (or vLLM) log vs `grep -E` for the usual error words.

The promise (docs and brief): diagnosing a busy log costs at most 3x (goal 2x) what the operator's
old grep costs on the same file. The log is generated here: the startup of 8 ranks (0.5.9 format),
then hours of serving — uvicorn access lines, prefill and decode batch lines, a few KV retractions —
and one crash at the end (a prefill CUDA OOM on TP3, SIGQUIT, Killed). Both commands run as
subprocesses on the same file, several times; the medians are compared.

    python bench/log_pipeline.py                  # 1M lines
    python bench/log_pipeline.py --lines 10000000 # 10M lines (about 1.4 GB)
    python bench/log_pipeline.py --engine vllm    # a busy vLLM log (its parser's bulk path)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GREP_PATTERN = "max_total_num|Allocating|READY|Error|error|OOM|avail mem|CUDA out of memory|RuntimeError|Traceback"
RANKS = [f"TP{i}" for i in range(8)]


def _ts(t: int) -> str:
    day, rest = divmod(t, 86400)
    return f"2026-02-{24 + day:02d} {rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def startup(t: int) -> list[str]:
    out = [f"[{_ts(t)}] server_args=ServerArgs(model_path='/models/Kimi-K2.5', trust_remote_code=True, "
           "mem_fraction_static=0.93, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size=8, dp_size=1, "
           "port=8000, host='0.0.0.0', enable_hierarchical_cache=True, hicache_size=48, cuda_graph_max_bs=256)"]
    pre = {r: 94.60 if r == "TP3" else 95.00 for r in RANKS}
    for r in RANKS:
        out.append(f"[{_ts(t + 8)} {r}] Init torch distributed begin.")
    for r in RANKS:
        out.append(f"[{_ts(t + 11)} {r}] Init torch distributed ends. elapsed=2.87 s, mem usage=0.97 GB")
    for r in RANKS:
        out.append(f"[{_ts(t + 11)} {r}] Load weight begin. avail mem={pre[r]:.2f} GB")
    out.append("\r".join(f"Loading safetensors checkpoint shards: {p:3d}% Completed | {p * 64 // 100}/64 [00:16<00:24,  1.36s/it]"
                         for p in (0, 50, 100)))
    for r in RANKS:
        out.append(f"[{_ts(t + 80)} {r}] Load weight end. elapsed=68.10 s, type=KimiK25ForConditionalGeneration, "
                   f"dtype=torch.bfloat16, avail mem={pre[r] - 71.82:.2f} GB, mem usage=71.82 GB.")
    for r in RANKS:
        out.append(f"[{_ts(t + 81)} {r}] KV Cache is allocated. #tokens: 246890, KV size: 16.16 GB")
    for r in RANKS:
        out.append(f"[{_ts(t + 81)} {r}] Memory pool end. avail mem={pre[r] - 90.03:.2f} GB")
    for r in RANKS:
        out.append(f"[{_ts(t + 82)} {r}] Capture cuda graph begin. This can take up to several minutes. "
                   f"avail mem={pre[r] - 90.03:.2f} GB")
    for r in RANKS:
        out.append(f"[{_ts(t + 96)} {r}] Capture cuda graph end. Time elapsed: 13.98 s. mem usage=3.75 GB. "
                   f"avail mem={pre[r] - 93.78:.2f} GB.")
    out.append(f"[{_ts(t + 97)} TP0] max_total_num_tokens=246890, chunked_prefill_size=8192, max_prefill_tokens=16384, "
               "max_running_requests=2048, context_len=262144, available_gpu_mem=1.22 GB")
    for r in RANKS:
        out.append(f"[{_ts(t + 97)} {r}] Allocating 48.00 GB host memory for hierarchical KV cache.")
    out.append(f"[{_ts(t + 99)}] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
    out.append(f'[{_ts(t + 100)}] INFO:     127.0.0.1:51744 - "GET /model_info HTTP/1.1" 200 OK')
    out.append(f'[{_ts(t + 101)}] INFO:     127.0.0.1:51750 - "POST /generate HTTP/1.1" 200 OK')
    out.append(f"[{_ts(t + 101)}] The server is fired up and ready to roll!")
    return out


def crash(t: int) -> list[str]:
    return [
        f"[{_ts(t)} TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        '  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend',
        "    return self.model.forward(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a total capacity of 94.97 GiB "
        "of which 412.56 MiB is free. Including non-PyTorch memory, this process has 94.55 GiB memory in use.",
        "",
        f"[{_ts(t)}] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "Killed",
    ]


_VLLM_CRASH = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log"


def generate_vllm(path: Path, lines: int, seed: int = 1) -> None:
    """A busy vLLM >= 0.11 log: the start-up of tests/data's TP=2 prefill-OOM log up to its first
    request, then ~40 requests a second (uvicorn's access lines behind vLLM's `(APIServer pid=N)`
    prefix) with vLLM's stats line every 10 s, then that log's crash, moved to the traffic's end."""
    rnd = random.Random(seed)
    src = _VLLM_CRASH.read_text(encoding="utf-8").splitlines()
    cut = next(i for i, line in enumerate(src) if "HTTP/1.1" in line)
    head, tail = src[:cut], src[cut:]
    tail = [line for line in tail if "HTTP/1.1" not in line and "throughput" not in line]
    n = max(0, lines - len(head) - len(tail))
    t0 = 10 * 3600
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(head) + "\n")
        buf: list[str] = []
        for i in range(n):
            if i % 400 == 399:
                t = t0 + i // 40
                buf.append(f"(APIServer pid=41877) INFO 11-29 {t // 3600 % 24:02d}:{t % 3600 // 60:02d}:{t % 60:02d} "
                           f"[loggers.py:335] Engine 000: Avg prompt throughput: {rnd.uniform(1000, 3000):.1f} tokens/s, "
                           f"Avg generation throughput: {rnd.uniform(500, 1500):.1f} tokens/s, Running: {rnd.randrange(1, 64)} "
                           f"reqs, Waiting: 0 reqs, GPU KV cache usage: {rnd.uniform(5, 60):.1f}%, Prefix cache hit rate: "
                           f"{rnd.uniform(10, 60):.1f}%\n")
            else:
                r = rnd.random()
                path_ = "/v1/chat/completions" if r < 0.9 else ("/health" if r < 0.96 else "/metrics")
                buf.append(f'(APIServer pid=41877) INFO:     10.0.{rnd.randrange(4)}.{rnd.randrange(2, 250)}:'
                           f'{rnd.randrange(30000, 61000)} - "{"POST" if path_.startswith("/v1") else "GET"} {path_} '
                           f'HTTP/1.1" 200 OK\n')
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
        end = t0 + n // 40
        stamp = f"11-29 {end // 3600 % 24:02d}:{end % 3600 // 60:02d}:{end % 60:02d}"
        f.write("\n".join(line.replace("11-29 10:02:10", stamp) for line in tail) + "\n")


def generate(path: Path, lines: int, seed: int = 1) -> None:
    """About 136 bytes a line: half access lines, the rest batch lines, a retraction now and then."""
    rnd = random.Random(seed)
    t0 = 11 * 3600 + 50 * 60
    head = startup(t0)
    tail = crash(t0 + 120 + lines // 40)
    n = max(0, lines - len(head) - len(tail))
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(head) + "\n")
        buf: list[str] = []
        for i in range(n):
            t = _ts(t0 + 110 + i // 40)
            r = rnd.random()
            if r < 0.50:
                path_ = "/v1/chat/completions" if r < 0.45 else ("/health" if r < 0.48 else "/metrics")
                buf.append(f'[{t}] INFO:     10.0.{rnd.randrange(4)}.{rnd.randrange(2, 250)}:{rnd.randrange(30000, 61000)} - '
                           f'"{"POST" if path_.startswith("/v1") else "GET"} {path_} HTTP/1.1" 200 OK\n')
            elif r < 0.82:
                buf.append(f"[{t} TP0] Decode batch, #running-req: {rnd.randrange(1, 300)}, #token: {rnd.randrange(1000, 126000)}, "
                           f"token usage: 0.{rnd.randrange(10, 99)}, cuda graph: True, "
                           f"gen throughput (token/s): {rnd.uniform(800, 3100):.2f}, #queue-req: {rnd.randrange(0, 30)}\n")
            elif r < 0.9995:
                buf.append(f"[{t} TP0] Prefill batch, #new-seq: {rnd.randrange(1, 8)}, #new-token: {rnd.randrange(64, 8192)}, "
                           f"#cached-token: {rnd.randrange(0, 4096)}, token usage: 0.{rnd.randrange(10, 99)}, "
                           f"#running-req: {rnd.randrange(1, 300)}, #queue-req: {rnd.randrange(0, 30)}, "
                           f"input throughput (token/s): {rnd.uniform(1000, 30000):.2f}, cuda graph: False\n")
            else:
                buf.append(f"[{t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: {rnd.randrange(1, 5)}, "
                           f"#new_tokens_gained: {rnd.randrange(1000, 30000)}, #new_token_ratio: 0.4100 -> 0.7000\n")
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
        f.write("\n".join(tail) + "\n")


def _compile_bytecode() -> None:
    """Bring the package's .pyc files up to date, as `pip install` does. Where
    PYTHONDONTWRITEBYTECODE is set (it is on the development machine) a module edited since its
    last .pyc is otherwise compiled again in every timed run, 5-15 ms each."""
    import compileall

    import cockpit

    compileall.compile_dir(Path(cockpit.__file__).parent, quiet=1)


def _cockpit_argv() -> list[str]:
    exe = Path(sys.executable).with_name("cockpit")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cockpit"]


def _run_once(argv: list[str], ok: tuple[int, ...]) -> tuple[float, float, bytes]:
    """Wall seconds, CPU seconds (user + system, from the child's rusage: steadier than wall time
    on a shared machine) and standard output of one run."""
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=fout, stderr=ferr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in ok:
            ferr.seek(0)
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {ferr.read().decode(errors='replace')[-500:]}")
        fout.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, fout.read()


def time_pair(a: list[str], b: list[str], runs: int, ok: tuple[int, ...]) -> tuple[tuple[float, float], tuple[float, float], bytes]:
    """Medians (wall, CPU) of `a` and `b`, run alternately so that both see the same machine load."""
    aw: list[float] = []
    ac: list[float] = []
    bw: list[float] = []
    bc: list[float] = []
    out = b""
    for _ in range(runs):
        w, c, _ = _run_once(a, ok)
        aw.append(w)
        ac.append(c)
        w, c, out = _run_once(b, ok)
        bw.append(w)
        bc.append(c)
    med = statistics.median
    return (med(aw), med(ac)), (med(bw), med(bc)), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines in the generated log (default 1000000)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each command (median reported)")
    ap.add_argument("--log", type=Path, default=None, help="use (or keep) the log at this path instead of a temp file")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang",
                    help="whose busy log to generate (default sglang; vllm: the bulk path of its parser)")
    args = ap.parse_args(argv)
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found")
    tmp = None
    if args.log is None:
        tmp = tempfile.TemporaryDirectory(prefix="cockpit-bench-")
        path = Path(tmp.name) / "busy.log"
    else:
        path = args.log
    try:
        if not path.exists() or args.log is None:
            t = time.perf_counter()
            (generate_vllm if args.engine == "vllm" else generate)(path, args.lines)
            gen_s = time.perf_counter() - t
        else:
            gen_s = 0.0
        size = path.stat().st_size
        _compile_bytecode()
        # warm the page cache so both commands read from memory
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
        (grep_s, grep_cpu), (diag_s, diag_cpu), out = time_pair(
            [grep, "-E", GREP_PATTERN, str(path)], [*_cockpit_argv(), "diagnose", "--json", str(path)], args.runs, ok=(0, 1)
        )
        result = json.loads(out)
        crash = result.get("crash") or {}
        summary = {
            "lines": args.lines, "bytes": size, "runs": args.runs, "generate_s": round(gen_s, 2),
            "grep_median_s": round(grep_s, 3), "diagnose_median_s": round(diag_s, 3),
            "ratio": round(diag_s / grep_s, 2) if grep_s > 0 else None,
            "grep_median_cpu_s": round(grep_cpu, 3), "diagnose_median_cpu_s": round(diag_cpu, 3),
            "cpu_ratio": round(diag_cpu / grep_cpu, 2) if grep_cpu > 0 else None,
            "crash": {k: crash.get(k) for k in ("kind", "phase", "rank", "line")},
            "min_headroom_gb": result.get("min_headroom_gb"), "retractions": result.get("retractions"),
        }
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            print(f"log: {args.lines:,} lines, {size / 1e6:.0f} MB ({path})")
            print(f"grep -E (usual error words): median {grep_s:.3f} s wall, {grep_cpu:.3f} s CPU over {args.runs} runs")
            print(f"cockpit diagnose --json:     median {diag_s:.3f} s wall, {diag_cpu:.3f} s CPU over {args.runs} runs")
            print(f"ratio: {diag_s / grep_s:.2f}x wall, {diag_cpu / max(grep_cpu, 1e-9):.2f}x CPU  (limit 3x, goal 2x)")
            print(f"diagnosis: crash {crash.get('kind')} in {crash.get('phase')} on {crash.get('rank')} at line "
                  f"{crash.get('line')}, headroom {result.get('min_headroom_gb')} GiB, "
                  f"{result.get('retractions')} requests retracted")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    sys.exit(main())
