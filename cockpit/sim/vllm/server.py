"""The vLLM simulator: `cockpit sim --sim-backend vllm serve MODEL [vLLM flags] [--sim-*]`.

Real processes and a real port, simulated GPUs. The main process plays vLLM's API server and
EngineCore and writes every log line in vLLM's exact format (shared/reference/vllm.md §2, §3, §7,
§8) with the pids of real worker processes, one per GPU, which hold the simulated GPU memory in the
files the telemetry agent reads (cockpit/sim/gpus.py) and die with the main process.

The port is bound at once but listens only when start-up is over (vLLM's connection-refused phase);
then `/health`, `/version`, `/v1/models`, `/v1/completions`, `/v1/chat/completions` and `/metrics`
(`vllm:` names) answer. With --sim-traffic, built-in clients load the engine; a prefill chunk whose
activations do not fit in what start-up left free dies with a CUDA OOM, the vLLM failure chain, exit 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from cockpit.sim import gpus
from cockpit.sim.clock import Clock
from cockpit.sim.output import write_raw
from cockpit.sim.process import die_with_parent, set_process_name
from cockpit.sim.traffic import arrivals
from cockpit.sim.vllm.config import BLOCK_SIZE, CUDA_CONTEXT_GIB, VllmSimConfig
from cockpit.sim.vllm.engine import Engine, EngineOom
from cockpit.sim.vllm.http import make_handler

GIB = 2**30
STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL


class VLog:
    """vLLM's record format; a multi-line message repeats the whole header on every line."""

    def record(self, proc: str | None, level: str, where: str, msg: str) -> None:
        head = f"({proc}) " if proc else ""
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        write_raw("".join(f"{head}{level} {stamp} [{where}] {part}\n" for part in msg.split("\n")))

    def bare(self, text: str, proc: str | None = None, prefixed: bool = False) -> None:
        head = f"({proc}) " if proc and prefixed else ""
        write_raw("".join(f"{head}{part}\n" for part in text.split("\n")))


def _oom_text(req: float, gpu: int, total: float, free: float) -> str:
    used = total - free
    return (f"CUDA out of memory. Tried to allocate {req:.2f} GiB. GPU {gpu} has a total capacity of {total:.2f} GiB of "
            f"which {free:.2f} GiB is free. Including non-PyTorch memory, this process has {used:.2f} GiB memory in use. "
            f"Of the allocated memory {used - 1.5:.2f} GiB is allocated by PyTorch, with 1.63 GiB allocated in private "
            "pools (e.g., CUDA Graphs), and 402.50 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-"
            "usage-with-pytorch-cuda-alloc-conf)")


def _holder(conn: Connection, directory: Any, gpu_index: int, name: str) -> None:
    """A worker process: holds its GPU memory (a proc file) until told to stop or its parent dies."""

    die_with_parent()
    set_process_name(name)
    proc = gpus.ProcFile(directory, gpu_index)
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "mem":
                proc.set(float(msg[1]), msg[2] if len(msg) > 2 else None)
            elif msg[0] == "exit":
                break
    finally:
        proc.remove()


class VllmSim:
    def __init__(self, cfg: VllmSimConfig):
        self.cfg = cfg
        self.log = VLog()
        self.clock = Clock(cfg.speed, startup_speed=cfg.startup_speed)
        self.pid = os.getpid()
        self.api = f"APIServer pid={self.pid}"
        self.core = f"EngineCore pid={self.pid}" if cfg.new else f"EngineCore_DP0 pid={self.pid}"
        self.conns: list[Connection] = []
        self.pids: list[int] = []
        self.used: list[float] = []
        self.engine: Engine | None = None
        self.dead = False
        self.started_wall = time.time()
        self.httpd: ThreadingHTTPServer | None = None
        self.figures: dict[str, float] = {}

    # ---- names as vLLM prints them ----
    def worker(self, r: int, named: bool = True) -> str:
        if self.cfg.world == 1:
            return self.core  # TP = PP = 1: the worker runs inside EngineCore
        if not named:
            return f"Worker pid={self.pids[r]}"
        pp, tp = divmod(r, self.cfg.tp)
        tags = (f"_PP{pp}" if self.cfg.pp > 1 else "") + (f"_TP{tp}" if self.cfg.tp > 1 else "")
        return f"Worker{tags} pid={self.pids[r]}"

    def wait(self, sim_s: float) -> None:
        self.clock.sleep(sim_s)

    def mem(self, r: int, gib: float) -> None:
        self.used[r] = gib
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conns[r].send(("mem", gib))

    # ---- lifecycle ----
    def run(self) -> int:
        cfg = self.cfg
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        api = self.api
        if cfg.new:
            self.log.record(api, "INFO", "utils.py:299", f"vLLM server version {cfg.version}, serving model {cfg.model_name}")
        else:
            self.log.record(api, "INFO", "api_server.py:1896", f"vLLM API server version {cfg.version}")
        nondefault = {"model_tag": cfg.model_name, **{k: v for k, v in cfg.args.items() if k != "model"}, "model": cfg.model_name}
        self.log.record(api, "INFO", "utils.py:233", f"non-default args: {nondefault!r}")
        # the API server binds its port first (no listen yet): a taken port fails right here
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((cfg.host, cfg.port))
        except OSError as exc:
            self.log.bare("Traceback (most recent call last):\n"
                          f'  File "/usr/local/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", line 1971, in run_server\n'
                          f"OSError: [Errno {exc.errno}] {exc.strerror or 'Address already in use'}")
            return 1
        self.log.record(api, "INFO", "model.py:1745", f"Using max model len {cfg.max_model_len}")
        self.log.record(api, "INFO", "scheduler.py:239",
                        f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.")
        cfg.sim_dir.mkdir(parents=True, exist_ok=True)
        gpus.prune_dead(cfg.sim_dir)
        gpus.write_devices(cfg.sim_dir, cfg.gpu, max(cfg.num_gpus or 0, 8, cfg.world))
        self.wait(4)
        self.log.record(self.core, "INFO", "core.py:98", f"Initializing a V1 LLM engine (v{cfg.version}) with config: "
                        f"model='{cfg.model_name}', tokenizer='{cfg.model_name}', dtype=torch.bfloat16, "
                        f"max_seq_len={cfg.max_model_len}, tensor_parallel_size={cfg.tp}, pipeline_parallel_size={cfg.pp}, "
                        f"data_parallel_size=1, enforce_eager={bool(cfg.args.get('enforce_eager'))}")
        self._spawn()
        try:
            code = self._startup()
        except _StartupFailed:
            self._stop_workers()
            return 1
        if code:
            return code
        return self._serve(sock)

    def _spawn(self) -> None:
        for r in range(self.cfg.world):
            child, parent = Pipe(duplex=False)  # the worker reads, the main process writes
            pid = os.fork()
            if pid == 0:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                code = 0
                try:
                    parent.close()
                    name = f"VLLM::Worker_TP{r}" if self.cfg.world > 1 else "VLLM::EngineCore"
                    _holder(child, self.cfg.sim_dir, r, name)
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            child.close()
            self.conns.append(parent)
            self.pids.append(pid)
            self.used.append(0.0)

    def _stop_workers(self) -> None:
        for c in self.conns:
            with contextlib.suppress(OSError, BrokenPipeError):
                c.send(("exit",))
        for pid in self.pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)

    def _on_term(self, signum: int, frame: Any) -> None:
        self.log.bare("INFO:     Shutting down", self.api, prefixed=not self.cfg.new)
        self._stop_workers()
        os._exit(0)

    # ---- start-up ----
    def _fail_worker(self, r: int, where: str, text: str, *, during_start: bool) -> None:
        cfg = self.cfg
        what = "WorkerProc failed to start." if during_start else "WorkerProc hit an exception."
        proc = self.worker(r, named=not during_start)
        if cfg.world > 1:
            self.log.record(proc, "ERROR", "multiproc_executor.py:1189",
                            f"{what}\nTraceback (most recent call last):\n{where}\n{text}")
            chain = ("Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
                     "trace for root cause.") if during_start else \
                f"RuntimeError: Worker failed with error '{text.split(': ', 1)[-1][:160]}', please check the stack trace above for the root cause"
            self.log.record(self.core, "ERROR", "core.py:1584", f"EngineCore failed to start.\n{chain}")
        else:
            self.log.record(self.core, "ERROR", "core.py:1584",
                            f"EngineCore failed to start.\nTraceback (most recent call last):\n{where}\n{text}")
        core = "EngineCore" if cfg.new else "EngineCore_DP0"
        self.log.bare(f"Process {core}:\nTraceback (most recent call last):\n{text}")
        self.log.bare("Traceback (most recent call last):\nRuntimeError: Engine core initialization failed. See root cause "
                      f"above. Failed core proc(s): {{'{core}': 1}}")
        raise _StartupFailed

    def _startup(self) -> int:
        cfg, m = self.cfg, self.cfg.model
        T = cfg.total_gib
        self.wait(8)
        free0: list[float] = []
        for r in range(cfg.world):
            others = gpus.used_mib(cfg.sim_dir, r) / 1024.0
            f0 = round(max(0.0, T - others - CUDA_CONTEXT_GIB), 2)
            free0.append(f0)
            self.mem(r, CUDA_CONTEXT_GIB)
            if cfg.world > 1:
                self.log.record(self.worker(r, named=False), "INFO", "parallel_state.py:1929",
                                f"world_size={cfg.world} rank={r} local_rank={r} distributed_init_method="
                                f"tcp://127.0.0.1:{40000 + self.pid % 20000} backend=nccl")
            else:
                self.log.record(self.core, "INFO", "parallel_state.py:1929", "world_size=1 rank=0 local_rank=0 "
                                f"distributed_init_method=tcp://127.0.0.1:{40000 + self.pid % 20000} backend=nccl")
        requested = cfg.util * T
        for r in range(cfg.world):
            if cfg.kv_cache_bytes is None and free0[r] + CUDA_CONTEXT_GIB < requested:
                self._fail_worker(r, '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 256, in init_device',
                                  f"ValueError: Free memory on device cuda:{r} ({free0[r] + CUDA_CONTEXT_GIB:.2f}/{T:.2f} GiB) on "
                                  f"startup is less than desired GPU memory utilization ({cfg.util}, {requested:.2f} GiB). "
                                  "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                                  during_start=True)
        w0 = self.worker(0)
        if cfg.new:
            self.log.record(w0, "INFO", "model_runner.py:131", "Using V2 Model Runner")
        self.log.record(w0, "INFO", "model_runner.py:402", "Loading model from scratch...")
        shards = max(1, round(m.weights_gib / 3.6))
        steps = 4
        for i in range(steps + 1):
            n = shards * i // steps
            self.log.bare(f"Loading safetensors checkpoint shards: {100 * n // shards:3d}% Completed | {n}/{shards} "
                          f"[00:{int(m.load_s * i / steps):02d}<00:{int(m.load_s * (steps - i) / steps):02d}, "
                          f"{shards / m.load_s:.2f}it/s]", w0, prefixed=not cfg.new)
            W = m.weights_gib / cfg.world
            for r in range(cfg.world):
                self.mem(r, CUDA_CONTEXT_GIB + W * i / steps)
            self.wait(m.load_s / steps)
        W = round(m.weights_gib / cfg.world, 2)
        N = m.non_torch_gib
        self.log.record(w0, "INFO", "default_loader.py:291", f"Loading weights took {m.load_s - 0.4:.2f} seconds")
        for r in range(cfg.world if cfg.new else 1):
            text = (f"Model loading took {W:g} GiB memory and {m.load_s + 0.19:.6f} seconds" if cfg.new
                    else f"Model loading took {W:.4f} GiB and {m.load_s + 0.19:.6f} seconds")
            self.log.record(self.worker(r), "INFO", "model_runner.py:428" if cfg.new else "gpu_model_runner.py:2602", text)
        for r in range(cfg.world):
            self.mem(r, CUDA_CONTEXT_GIB + W + N)
        # profile run and (0.20+) the graph estimate
        self.wait(6)
        scale = cfg.capture_size / 512
        A = round(m.act_gib_per_8k * cfg.max_num_batched_tokens / 8192, 2)
        g_est = round(m.graph_estimate_gib_512 * scale, 2) if cfg.estimate_graphs and cfg.capture_size else 0.0
        G = round(m.graph_gib_512 * scale, 2) if cfg.capture_size else 0.0
        if cfg.new and cfg.capture_size:
            self.log.bare("Capturing CUDA graphs (PIECEWISE): 100%|██████████| 51/51 [00:04<00:00, 11.02it/s]")
            for r in range(cfg.world):
                self.log.record(self.worker(r), "INFO", "model_runner.py:1163", f"Graph capturing finished in 5 secs, took {g_est:.2f} GiB")
        consumed = round(W + N, 2)
        if cfg.kv_cache_bytes is not None:
            kv = round(cfg.kv_cache_bytes / GIB, 2)
            self.log.record(w0, "INFO", "gpu_worker.py:351", f"Initial free memory {free0[0]:.2f} GiB, reserved {kv:.2f} GiB "
                            "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. "
                            "This does not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config "
                            "when you want manual control of KV cache memory size. If OOM'ed, check the difference of initial "
                            "free memory between the current run and the previous run where kv_cache_memory_bytes is suggested "
                            "and update it correspondingly.")
        else:
            kv = round(requested - consumed - A - g_est, 2)
            self.log.record(w0, "INFO", "gpu_worker.py:772", f"Available KV cache memory: {kv:g} GiB" if cfg.new
                            else f"Available KV cache memory: {kv:.2f} GiB")
        if kv <= 0:
            self._fail_engine("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                              "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
                              "backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                              "for more details.")
        if cfg.new and cfg.estimate_graphs and g_est:
            eq = cfg.util - g_est / T
            for r in range(cfg.world):
                self.log.record(self.worker(r), "INFO", "gpu_worker.py:787",
                                "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                                f"--gpu-memory-utilization={cfg.util:.4f} is equivalent to --gpu-memory-utilization={eq:.4f} "
                                "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, "
                                f"increase --gpu-memory-utilization to {cfg.util + g_est / T:.4f}. To disable, set "
                                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
        per_token = m.kv_bytes_per_token / cfg.tp
        tokens = int(kv * GIB / per_token) // BLOCK_SIZE * BLOCK_SIZE
        need = cfg.max_model_len * per_token / GIB
        if tokens < cfg.max_model_len:
            est = tokens // BLOCK_SIZE * BLOCK_SIZE
            self._fail_engine(
                f"ValueError: To serve at least one request with the model's max seq len ({cfg.max_model_len}), ({need:.2f} "
                f"GiB KV cache is needed, which is larger than the available KV cache memory ({kv:.2f} GiB). Based on the "
                f"available memory, the estimated maximum model length is {est}. Try increasing `gpu_memory_utilization` "
                "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
                "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        conc = tokens / cfg.max_model_len
        if cfg.new:
            self.log.record(self.core, "INFO", "kv_cache_utils.py:1147", f"GPU KV cache size: {tokens:,} tokens, Maximum "
                            f"concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x")
        else:
            self.log.record(self.core, "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {tokens:,} tokens")
            self.log.record(self.core, "INFO", "kv_cache_utils.py:1091",
                            f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x")
        for r in range(cfg.world):
            self.mem(r, CUDA_CONTEXT_GIB + consumed + kv)
        # the real capture
        if cfg.capture_size:
            free_before = min(free0) - consumed - kv
            transient = m.capture_transient_gib_512 * scale
            label = "FULL" if cfg.new else "decode, FULL"
            if free_before < G + transient:
                self.wait(5)
                self.log.bare(f"Capturing CUDA graphs ({label}):  94%|█████████▍| 48/51 [00:05<00:00,  9.02it/s]")
                req = round(transient / 2, 2)
                oom = _oom_text(req, 0, T, round(min(req - 0.05, max(0.05, free_before - G - req)), 2))
                self._fail_worker(0, '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu/model_runner.py", '
                                  "line 1116, in capture_model", f"torch.OutOfMemoryError: {oom}", during_start=False)
            self.log.bare(f"Capturing CUDA graphs ({'PIECEWISE' if cfg.new else 'mixed prefill-decode, PIECEWISE'}): "
                          "100%|██████████| 51/51 [00:04<00:00, 11.31it/s]", w0, prefixed=not cfg.new)
            self.log.bare(f"Capturing CUDA graphs ({label}): 100%|██████████| 51/51 [00:05<00:00,  9.41it/s]",
                          w0, prefixed=not cfg.new)
            self.wait(10)
            for r in range(cfg.world if cfg.new else 1):
                self.log.record(self.worker(r), "INFO", "model_runner.py:1163", f"Graph capturing finished in 10 secs, took {G:.2f} GiB")
            for r in range(cfg.world):
                self.mem(r, CUDA_CONTEXT_GIB + consumed + kv + G)
        else:
            self.log.record(w0, "INFO", "gpu_model_runner.py:4120", "Cudagraph is disabled under eager mode")
        free_after = [round(free0[r] - consumed - kv - G, 2) for r in range(cfg.world)]
        if cfg.new:
            for r in range(cfg.world):
                if g_est:
                    self.log.record(self.worker(r), "INFO", "gpu_worker.py:1003",
                                    f"CUDA graph pool memory: {G:g} GiB (actual), {g_est:g} GiB (estimated), difference: "
                                    f"{g_est - G:.2f} GiB ({100 * (g_est - G) / max(G, 0.01):.1f}%).")
                req_b = requested - consumed - (A + g_est) - G - 150 / 1024
                gpu_b = free0[r] + CUDA_CONTEXT_GIB - consumed - (A + g_est) - G - 150 / 1024
                self.log.record(self.worker(r), "INFO", "gpu_worker.py:1066",
                                f"Free memory on device ({free0[r]:.2f}/{T:.2f} GiB) on startup. Desired GPU memory utilization "
                                f"is ({cfg.util}, {requested:.2f} GiB). Actual usage is {consumed:.2f} GiB for consumed memory "
                                f"(weights + non-torch), {A + g_est:.2f} GiB for peak activation, and {G:.2f} GiB for CUDAGraph "
                                f"memory. Replace gpu_memory_utilization config with `--kv-cache-memory={int(req_b * GIB)}` "
                                f"({req_b:.2f} GiB) to fit into requested memory, or `--kv-cache-memory={int(gpu_b * GIB)}` "
                                f"({gpu_b:.2f} GiB) to fully utilize gpu memory. Current kv cache memory in use is {kv:.2f} GiB.")
        self.log.record(self.core, "INFO", "core.py:412", "init engine (profile, create kv cache, warmup model) took "
                        f"{self.clock.now():.2f} s" + (" (compilation: 31.20 s)" if cfg.new else ""))
        self.engine = Engine(cfg, tokens, min(free_after), per_token)
        self.figures = {"kv_gb": kv, "tokens": float(tokens), "free_after": min(free_after)}
        return 0

    def _fail_engine(self, text: str) -> None:
        self.log.record(self.core, "ERROR", "core.py:1584", "EngineCore failed to start.\nTraceback (most recent call last):\n"
                        '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 112, in __init__\n'
                        "    num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(vllm_config)\n" + text)
        core = "EngineCore" if self.cfg.new else "EngineCore_DP0"
        self.log.bare(f"Process {core}:\nTraceback (most recent call last):\n{text}\nTraceback (most recent call last):\n"
                      f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'{core}': 1}}")
        raise _StartupFailed

    # ---- serving ----
    def _serve(self, sock: socket.socket) -> int:
        cfg = self.cfg
        api = self.api
        self.log.record(api, "INFO", "api_server.py:2005", "Supported tasks: ['generate']")
        url = f"http://{cfg.host}:{cfg.port}"
        if cfg.new:
            self.log.record(api, "INFO", "entry.py:139", f"Starting vLLM server on {url}")
        else:
            self.log.record(api, "INFO", "api_server.py:1971", f"Starting vLLM API server 0 on {url}")

        httpd = ThreadingHTTPServer((cfg.host, cfg.port), make_handler(self), bind_and_activate=False)
        httpd.socket.close()
        httpd.socket = sock
        httpd.server_activate()
        httpd.daemon_threads = True
        self.httpd = httpd
        pre = not cfg.new
        self.log.bare(f"INFO:     Started server process [{self.pid}]", api, prefixed=pre)
        self.log.bare("INFO:     Waiting for application startup.", api, prefixed=pre)
        self.log.bare("INFO:     Application startup complete.", api, prefixed=pre)
        self.clock.serving()  # from here on at --sim-speed (a --sim-startup-speed ends here)
        threading.Thread(target=self._engine_loop, name="engine", daemon=True).start()
        httpd.serve_forever(poll_interval=0.25)
        return 1 if self.dead else 0

    def access(self, client: str, method: str, path: str, status: str) -> None:
        if self.cfg.args.get("disable_uvicorn_access_log"):
            return
        self.log.bare(f'INFO:     {client} - "{method} {path} HTTP/1.1" {status}', self.api, prefixed=not self.cfg.new)

    def _engine_loop(self) -> None:
        cfg = self.cfg
        eng = self.engine
        assert eng is not None
        stream = arrivals(cfg.traffic, cfg.seed)
        nxt = next(stream, None)
        t0 = self.clock.now()
        last_stats = t0
        tick = 0.25
        last_busy, last_sent = -1.0, 0.0
        try:
            while not self.dead:
                now = self.clock.now()
                while nxt is not None and t0 + nxt.t <= now:
                    eng.add(nxt.prompt_tokens, nxt.max_new_tokens, nxt.cached_tokens)
                    nxt = next(stream, None)
                eng.step(tick)
                busy = 85.0 if eng.busy else 0.0
                if busy != last_busy or time.monotonic() - last_sent >= 2.0:  # the files' freshness
                    last_busy, last_sent = busy, time.monotonic()
                    for r in range(cfg.world):
                        with contextlib.suppress(OSError, BrokenPipeError):
                            self.conns[r].send(("mem", self.used[r], busy))
                if now - last_stats >= STATS_INTERVAL_S:
                    self._stats(eng, now - last_stats)
                    last_stats = now
                self.clock.sleep(tick)
        except EngineOom as oom:
            self._die(oom)

    def _stats(self, eng: Engine, interval: float) -> None:
        s = eng.take_interval()
        if not self.cfg.log_stats or (s["prompt"] == 0 and s["gen"] == 0 and not eng.busy):
            return
        pre = f", Preemptions: {s['preempt']}" if s["preempt"] else ""
        hit = f", Prefix cache hit rate: {eng.hit_rate() * 100:.1f}%" if eng.queries else ""
        self.log.record(self.api, "INFO", "loggers.py:335" if self.cfg.new else "loggers.py:123",
                        f"Engine 000: Avg prompt throughput: {s['prompt'] / interval:.1f} tokens/s, Avg generation "
                        f"throughput: {s['gen'] / interval:.1f} tokens/s, Running: {len(eng.running)} reqs, Waiting: "
                        f"{len(eng.waiting)} reqs{pre}, GPU KV cache usage: {eng.usage() * 100:.1f}%{hit}")

    def _die(self, oom: EngineOom) -> None:
        cfg = self.cfg
        self.dead = True
        r = cfg.world - 1
        text = _oom_text(oom.need, r, cfg.total_gib, oom.free)
        new_reqs = (f"[NewRequestData(req_id={oom.req_id},prompt_token_ids_len={oom.prompt},mm_features=[],"
                    "sampling_params=SamplingParams(n=1, temperature=0.0),num_computed_tokens=0,lora_request=None)]")
        self.log.record(self.core, "ERROR", "dump_input.py:79",
                        f"Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs={new_reqs}, "
                        "scheduled_cached_reqs=CachedRequestData(req_ids=[], resumed_req_ids=set(), new_token_ids_lens=[], "
                        f"new_block_ids=[], num_computed_tokens=[], num_output_tokens=[]), num_scheduled_tokens={{{oom.req_id}: "
                        f"{oom.chunk}}}, total_num_scheduled_tokens={oom.chunk}, scheduled_spec_decode_tokens={{}}, "
                        "scheduled_encoder_inputs={}, num_common_prefix_blocks=[0], finished_req_ids=[], free_encoder_mm_hashes=[])")
        frame = ('  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu/model_runner.py", line 902, in execute_model\n'
                 "    hidden_states = self.model(input_ids, positions)")
        if cfg.world > 1:
            self.log.record(self.worker(r), "ERROR", "multiproc_executor.py:1189",
                            f"WorkerProc hit an exception.\nTraceback (most recent call last):\n{frame}\ntorch.OutOfMemoryError: {text}")
            self.log.record(self.core, "ERROR", "core.py:1021", "EngineCore encountered a fatal error.\nTraceback (most recent "
                            f"call last):\nRuntimeError: Worker failed with error '{text[:120]}', please check the stack trace "
                            "above for the root cause")
        else:
            self.log.record(self.core, "ERROR", "core.py:1021", "EngineCore encountered a fatal error.\nTraceback (most recent "
                            f"call last):\n{frame}\ntorch.OutOfMemoryError: {text}")
        self.log.record(self.api, "ERROR", "async_llm.py:527", "AsyncLLM output_handler failed.")
        self.log.bare("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
                      "for the root cause.")
        # the API server's watchdog notices within 5 s and shuts uvicorn down
        time.sleep(max(0.2, self.clock.real(5.0)))
        pre = not cfg.new
        self.log.bare("INFO:     Shutting down", self.api, prefixed=pre)
        self.log.bare("INFO:     Application shutdown complete.", self.api, prefixed=pre)
        self._stop_workers()
        os._exit(1)


class _StartupFailed(Exception):
    pass


def run_vllm(cfg: VllmSimConfig) -> int:
    return VllmSim(cfg).run()
