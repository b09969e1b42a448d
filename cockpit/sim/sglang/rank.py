"""One simulated scheduler process per GPU rank: SGLang's start-up memory lifecycle, then serving.

Every rank prints its own lifecycle lines with its own prefix and measures "avail mem" from the
simulated-GPU directory (total minus every live process's memory on its GPU), so foreign or
leftover processes show up in its numbers. Collective steps (the all-reduce of free memory that
SGLang does at distributed init and after loading weights) go through the main process, which
also keeps the ranks in step. TP0 additionally runs the batch scheduler and decides, for every
prefill, whether some rank lacks the transient memory for it; that rank then dies the way SGLang's
scheduler does: `Scheduler hit an exception: Traceback …`, then SIGQUIT to the main process.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import random
import signal
import time
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from cockpit.sim import gpus
from cockpit.sim.clock import Clock
from cockpit.sim.perf import perf_model
from cockpit.sim.presets import gpu_index_extra_gib
from cockpit.sim.process import die_with_parent, set_process_name
from cockpit.sim.sglang import crashes, hicache
from cockpit.sim.sglang.config import SimConfig
from cockpit.sim.sglang.logfmt import Log
from cockpit.sim.sglang.scheduler import KvPoolExhausted, Req, SchedParams, Scheduler
from cockpit.sim.traffic import arrivals

GIB = 2**30
# how often TP0's loop runs (real seconds) while real clients wait for answers
EXTERNAL_TICK_S = 0.005
MAX_EXTERNAL_TICK_S = 0.2
# how far (simulated seconds) the scheduler may run ahead of the clock so that answers leave on
# time; a request that arrives meanwhile waits for the next batch, as it would for an iteration
MAX_LOOKAHEAD_S = 0.05
class _Hang(Exception):
    """This rank is blocked in a collective whose peer died: wait to be killed."""


class RankProcess:
    def __init__(self, cfg: SimConfig, local_rank: int, conn: Connection, clock: Clock, main_pid: int):
        self.cfg = cfg
        self.local = local_rank
        self.rank = cfg.first_rank + local_rank
        self.tp_rank = self.rank % cfg.tp
        # batch lines and the scheduler: DP group 0's TP0 (other replicas' schedulers stay idle)
        self.conn = conn
        self.clock = clock
        self.main_pid = main_pid
        self.gpu_index = cfg.gpu_index(local_rank)
        self.prefix = cfg.rank_prefix(self.rank)
        self.log = Log(self.prefix)
        self.proc = gpus.ProcFile(cfg.sim_dir, self.gpu_index, job=cfg.job, node=cfg.node_rank)
        self.rng = random.Random(cfg.seed * 1000 + self.rank)
        self.is_tp0 = self.rank == 0
        self.static_gib = 0.0  # context, NCCL, weights, KV, workspace, graphs
        self.reserved_gib = 0.0  # the caching allocator's high-water mark of prefill activations
        self.weights_gib = cfg.model.weights_gib(cfg.tp, cfg.pp)
        self.kv_gib = 0.0
        self.kv_tokens = 0
        self.graph_gib = 0.0
        self.graph_prefill_gib = 0.0
        self.after_capture_gib = 0.0
        self.max_running = 0
        self.reserve_seq = 0
        self.hicache_gb = 0.0  # host memory this rank pinned for its HiCache pool (decimal GB)
        self.inbox: list[tuple[Any, ...]] = []
        self.margin = max(0.3, 0.06 * cfg.startup_speed)  # keeps TP0's tqdm line ahead of its peers' lines

    # ---- plumbing ----
    def free(self) -> float:
        return gpus.free_gib(self.cfg.sim_dir, self.gpu_index, self.cfg.gpu.total_mib, self.cfg.job, self.cfg.node_rank)

    def mem(self, static_delta: float = 0.0, util: float | None = None) -> None:
        self.static_gib += static_delta
        self.proc.set(self.static_gib + self.reserved_gib, util)

    def send(self, *msg: Any) -> None:
        try:
            self.conn.send(msg)
        except (OSError, ValueError):
            os._exit(1)

    def recv(self, timeout: float | None, *, skip_inbox: bool = False) -> tuple[Any, ...] | None:
        """The next message: first what a collective set aside, then the pipe from the main process."""
        if self.inbox and not skip_inbox:
            return self.inbox.pop(0)
        try:
            if timeout is not None and not self.conn.poll(timeout):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            # the main process is gone; SGLang's schedulers die with it
            os._exit(1)

    def allreduce_min(self, tag: str, value: float) -> tuple[float, float]:
        """(min over ranks, the simulated time the last rank arrived): a gloo all_reduce(MIN)."""
        self.send("allreduce", tag, self.local, value)
        while True:
            # read the pipe itself: messages set aside stay in order for the serving loop
            msg = self.recv(None, skip_inbox=True)
            assert msg is not None
            if msg[0] == "allreduce_result" and msg[1] == tag:
                return float(msg[2]), float(msg[3])
            self.inbox.append(msg)

    def fail(self, traceback_text: str, *, delay_real: float = 0.0) -> NoReturn:
        """SGLang's scheduler exception path: log, SIGQUIT the main process, wait to be killed."""
        if delay_real:
            time.sleep(delay_real)
        self.log.info(f"Scheduler hit an exception: {traceback_text}")
        with contextlib.suppress(OSError):
            os.kill(self.main_pid, signal.SIGQUIT)
        self.hang()

    def hang(self) -> NoReturn:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.5)
        os._exit(1)

    def on_sigterm(self, signum: int, frame: Any) -> None:
        # tearing down CUDA and NCCL takes a moment: the memory is released when the process exits
        time.sleep(min(2.0, max(0.05, self.clock.real(2.0))))
        self.proc.remove()
        with contextlib.suppress(OSError):
            for name in os.listdir(self.cfg.sim_dir):
                if name.startswith(f".proc-{os.getpid()}.json."):
                    (self.cfg.sim_dir / name).unlink()
        os._exit(0)

    # ---- start-up ----
    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        set_process_name("sglang::scheduler")
        die_with_parent()
        if os.getppid() != self.main_pid:
            os._exit(1)
        try:
            self.startup()
            if self.is_tp0:
                self.serve_tp0()
            else:
                self.serve_peer()
        except _Hang:
            self.hang()

    def startup(self) -> None:
        cfg, gpu, model, clock = self.cfg, self.cfg.gpu, self.cfg.model, self.clock
        new = cfg.new_format
        # the process starts, imports torch and creates its CUDA context
        t = 6.0 + self.rng.uniform(0.0, 0.6)
        clock.sleep_until(t)
        self.mem(gpu.context_gib)
        self.log.info("Init parallel begin." if new else "Init torch distributed begin.")
        before = self.free()
        init_elapsed = 2.6 + self.rng.uniform(0.0, 0.5)
        clock.sleep_until(t + init_elapsed)
        self.mem(gpu.init_gib + gpus_extra(self.gpu_index))
        local = self.free()
        min_mem, t_sync = self.allreduce_min("init", local)
        if new:
            self.log.info(f"Init parallel ends. elapsed={init_elapsed:.2f} s")
            self.log.info(f"Memory baseline taken. mem usage={before - local:.2f} GB")
        else:
            self.log.info(f"Init torch distributed ends. elapsed={init_elapsed:.2f} s, mem usage={before - local:.2f} GB")
        if min_mem < local * 0.9:
            name = "pre_model_load_memory" if new else "min_per_gpu_memory"
            self.log.info(
                "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                f"{name}={min_mem!r}, local_gpu_memory={local!r}, local_gpu_memory * 0.9={local * 0.9!r}"
            )

        # ---- weights ----
        t_load = t_sync + 0.05
        clock.sleep_until(t_load + self.rng.uniform(0.0, 0.03))
        self.log.info(f"Load weight begin. avail mem={self.free():.2f} GB")
        # TP0's tqdm bar stays open (no newline) while it loads: barriers on both sides of the bar
        # keep every other rank's lines out of it, however late a busy machine runs a process
        self.allreduce_min("weights_begin", 0.0)
        load_s = model.shards * model.load_s_per_shard
        free = self.free()
        if self.weights_gib > free:
            # the weights do not fit at all: torch fails part-way through loading
            self.clock.sleep_until(t_load + 0.1 + load_s * free / self.weights_gib)
            self.mem(max(0.0, free - 0.3))
            self.fail(crashes.crash_text("weights-oom", cfg.version, oom=self._oom_text(0.5, self.free())))
        self._load_weights(t_load + 0.1, load_s)
        # TP0's progress bar has no newline until it completes: nobody prints before it does
        self.allreduce_min("weights_loaded", 0.0)
        clock.sleep_until(t_load + 0.1 + load_s + self.margin + self.rng.uniform(0.0, 0.2))
        avail = self.free()
        elapsed = load_s + self.margin + self.rng.uniform(0.0, 0.1)
        if new:
            quant = f"{model.quant}, " if model.quant else ""
            self.log.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={model.architecture}, {quant}"
                f"avail mem={avail:.2f} GB, mem usage={self.weights_gib:.2f} GB."
            )
        else:
            self.log.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={model.architecture}, dtype=torch.bfloat16, "
                f"avail mem={avail:.2f} GB, mem usage={self.weights_gib:.2f} GB."
            )

        # ---- KV pool: sized from the minimum over ranks ----
        a_min, t_sync = self.allreduce_min("weights", avail)
        clock.sleep_until(t_sync + 0.3)
        budget = a_min - min_mem * (1 - cfg.mfs)
        cell = model.cell_bytes(cfg.attn_tp) * cfg.kv_bytes // model.kv_bytes
        tokens = int(budget * GIB // cell) if budget > 0 else 0
        if tokens // cfg.page_size <= 0:
            # every rank computes the same negative budget and raises
            text = crashes.crash_text("not-enough-memory", cfg.version, mfs=cfg.mfs, **crashes.not_enough_memory_fields(a_min, min_mem))
            self.fail(text, delay_real=0.01 * self.local)
        if cfg.max_total_tokens:
            if cfg.max_total_tokens > tokens:
                if not new:
                    self.log.info(
                        f"max_total_tokens={cfg.max_total_tokens} is larger than the profiled value {tokens}. "
                        "Use the profiled value instead."
                    )
            else:
                tokens = int(cfg.max_total_tokens)
        tokens = max(cfg.page_size, tokens // cfg.page_size * cfg.page_size)
        self.kv_tokens = tokens
        self.kv_gib = tokens * cell / GIB
        self.mem(self.kv_gib + model.pool_extra_gib)
        label = f"dtype: {cfg.kv_dtype}, " if new else ""
        if model.attention == "MLA":
            self.log.info(f"KV Cache is allocated. {label}#tokens: {tokens}, KV size: {self.kv_gib:.2f} GB")
        else:
            half = self.kv_gib / 2
            self.log.info(f"KV Cache is allocated. {label}#tokens: {tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB")
        self.log.info(f"Memory pool end. avail mem={self.free():.2f} GB")
        if new and self.is_tp0 and tokens < cfg.context_len:
            self.log.info(
                f"KV pool holds {tokens} tokens, fewer than --context-length {cfg.context_len}. One full-length "
                "request cannot fit, so long requests will be refused or truncated at serving time. Lower "
                "--context-length, raise --mem-fraction-static, or free memory taken before the pool is sized."
            )

        # ---- attention workspace, then CUDA graphs ----
        t_cap = t_sync + 0.8
        clock.sleep_until(t_cap)
        free = self.free()
        if model.workspace_gib > free:
            self._startup_oom(model.workspace_gib, free)
        self.mem(model.workspace_gib, util=60.0)
        if new:
            if cfg.prefill_graph:
                t_cap = self._capture_prefill(t_cap)
            if cfg.decode_graph:
                t_cap = self._capture_decode(t_cap)
        elif cfg.decode_graph:
            t_cap = self._capture_decode(t_cap)
        self.after_capture_gib = self.free()
        self.mem(util=0.0)
        _, t_sync = self.allreduce_min("capture", 0.0)
        clock.sleep_until(t_sync + 0.4)

        ctx = cfg.context_len
        n_req = min(4096, max(2048, int(tokens / ctx * 512)))
        user = cfg.max_running_requests_arg
        if new:
            self.max_running = min(int(user) // (cfg.dp if cfg.dp_attention else 1), tokens // 2) if user else min(n_req, tokens // 2)
        else:
            self.max_running = min(int(user) // max(1, cfg.dp), n_req) if user else min(tokens // 2, n_req)
        self.max_running = max(1, self.max_running)
        if self.is_tp0:
            self.log.info(
                f"max_total_num_tokens={tokens}, chunked_prefill_size={cfg.chunked_prefill_size}, "
                f"max_prefill_tokens={cfg.max_prefill_tokens}, max_running_requests={self.max_running}, "
                f"context_len={ctx}, available_gpu_mem={self.free():.2f} GB"
            )
        if cfg.hicache:
            self._hicache(t_sync + 0.6)
        info = {
            "weight": round(self.weights_gib, 2),
            "kvcache": round(self.kv_gib, 2),
            "token_capacity": tokens,
            "graph": round(self.graph_gib + self.graph_prefill_gib, 2),
            "graph_prefill": round(self.graph_prefill_gib, 2),
            "graph_decode": round(self.graph_gib, 2),
            "startup_available": round(self.after_capture_gib, 2),
            "max_running_requests": self.max_running,
            "startup_time": round(self.clock.now(), 2),
            "hicache_gb": round(self.hicache_gb, 2),
        }
        self.send("ready", self.local, info)

    def _load_weights(self, t0: float, load_s: float) -> None:
        model = self.cfg.model
        base = self.static_gib
        steps = model.shards
        bar_every = max(1, steps // 32)
        start_wall = time.monotonic()
        for i in range(1, steps + 1):
            self.clock.sleep_until(t0 + load_s * i / steps)
            if i % max(1, steps // 8) == 0 or i == steps:
                self.static_gib = base + self.weights_gib * i / steps
                self.mem()
            if self.is_tp0 and (i % bar_every == 0 or i == steps):
                el = (time.monotonic() - start_wall) * self.cfg.startup_speed
                rate = el / i
                left = rate * (steps - i)
                bar = (
                    f"\rLoading safetensors checkpoint shards: {100 * i // steps:3d}% Completed | {i}/{steps} "
                    f"[{_mmss(el)}<{_mmss(left)}, {rate:5.2f}s/it]"
                )
                self.log.raw(bar + ("\n" if i == steps else ""))
        self.static_gib = base + self.weights_gib
        self.mem()

    def _graph_progress(self, t0: float, dur: float, total_gib: float, sizes: list[int], label: str, bar: bool = True) -> None:
        """Capture graphs largest first; memory grows as they are captured; TP0 draws the tqdm bar."""
        n = len(sizes)
        base = self.static_gib
        start_free = self.free()
        if total_gib > start_free - 0.02:
            done = max(0, int(n * start_free / total_gib) - 1)
            self.clock.sleep_until(t0 + dur * done / max(1, n))
            self.static_gib = base + total_gib * done / max(1, n)
            self.mem()
            self._capture_oom(total_gib / max(1, n) + 0.25, self.free(), prefill=label == "prefill")
        order = list(reversed(sizes))
        steps = min(n, 26)
        for j in range(1, steps + 1):
            self.clock.sleep_until(t0 + dur * j / steps)
            k = n * j // steps
            self.static_gib = base + total_gib * k / n
            self.mem()
            if self.is_tp0 and bar:
                avail = self.free()
                size = order[min(k, n - 1)]
                pct = 100 * k // n
                fill = "█" * (pct // 10) + (" " * (10 - pct // 10))
                if label == "prefill":
                    desc = f"Capturing prefill shape (num_tokens={size} avail_mem={avail:.2f} GB)"
                else:
                    desc = f"Capturing batches (bs={size} avail_mem={avail:.2f} GB)"
                self.log.raw(f"\r{desc}: {pct:3d}%|{fill}| {k}/{n} [00:00<00:00]" + ("\n" if j == steps else ""))

    def _capture_decode(self, t_cap: float) -> float:
        cfg, model = self.cfg, self.cfg.model
        sizes = cfg.cuda_graph_bs
        graph = model.graph_gib(max(sizes))
        dur = model.capture_s * max(0.1, len(sizes) / 52)
        avail = self.free()
        if cfg.new_format:
            self.log.info(f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem={avail:.2f} GB")
        else:
            self.log.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
            if self.is_tp0:
                self.log.info(f"Capture cuda graph bs {sizes}")
        # the minimum spare memory over ranks: if some rank will fail, TP0 draws no bar that its
        # traceback could land in
        spare, _ = self.allreduce_min("decode_capture_begin", self.free() - graph)
        self._graph_progress(t_cap + self.margin, dur, graph, sizes, "decode", bar=spare > 0.02)
        self.allreduce_min("decode_captured", 0.0)
        self.graph_gib = graph
        end = t_cap + 2 * self.margin + dur
        self.clock.sleep_until(end + self.rng.uniform(0.0, 0.05))
        elapsed = dur + self.rng.uniform(0.0, 0.1)
        avail = self.free()
        if cfg.new_format:
            self.log.info(
                f"Capture target decode CUDA graph end. bs={sizes}, elapsed={elapsed:.2f} s, "
                f"mem usage={graph:.2f} GB, avail mem={avail:.2f} GB."
            )
        else:
            self.log.info(f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={graph:.2f} GB. avail mem={avail:.2f} GB.")
        return end + 0.1

    def _capture_prefill(self, t_cap: float) -> float:
        cfg, model = self.cfg, self.cfg.model
        sizes = cfg.prefill_graph_sizes
        graph = 0.3 * model.graph_gib(cfg.cuda_graph_max_bs)
        dur = 0.85 * model.capture_s
        avail = self.free()
        self.log.info(f"Capture target prefill CUDA graph begin. backend=breakable, num_tokens={sizes}, avail mem={avail:.2f} GB")
        spare, _ = self.allreduce_min("prefill_capture_begin", self.free() - graph)
        self._graph_progress(t_cap + self.margin, dur, graph, sizes, "prefill", bar=spare > 0.02)
        self.allreduce_min("prefill_captured", 0.0)
        self.graph_prefill_gib = graph
        end = t_cap + 2 * self.margin + dur
        self.clock.sleep_until(end + self.rng.uniform(0.0, 0.05))
        elapsed = dur + self.rng.uniform(0.0, 0.1)
        self.log.info(
            f"Capture target prefill CUDA graph end. elapsed={elapsed:.2f} s, mem usage={graph:.2f} GB, "
            f"avail mem={self.free():.2f} GB."
        )
        return end + 0.1

    def _oom_text(self, alloc_gib: float, free_gib: float) -> str:
        total = self.cfg.gpu.total_gib
        alloc = alloc_gib * GIB
        free_bytes = max(0.0, free_gib * GIB) % alloc if alloc and free_gib * GIB > alloc else max(0.0, free_gib * GIB)
        process = self.static_gib + self.reserved_gib + (free_gib * GIB - free_bytes) / GIB
        graph = self.graph_gib + self.graph_prefill_gib
        unalloc = min(1.5, 0.02 + 0.3 * self.reserved_gib)
        allocated = max(0.0, process - self.cfg.gpu.context_gib - graph - unalloc)
        return crashes.cuda_oom_text(
            alloc_bytes=alloc,
            gpu_index=self.gpu_index,
            total_gib=total,
            free_bytes=free_bytes,
            process_gib=process,
            allocated_gib=allocated,
            graph_gib=graph,
            reserved_unallocated_gib=unalloc,
        )

    def _startup_oom(self, need: float, free: float) -> NoReturn:
        self.fail(crashes.crash_text("workspace-oom", self.cfg.version, oom=self._oom_text(min(need, free + 0.5), free)))

    def _capture_oom(self, need: float, free: float, prefill: bool) -> NoReturn:
        text = self._oom_text(max(need, free + 0.01), free)
        self.fail(crashes.crash_text("prefill-graph-capture-oom" if prefill else "graph-capture-oom", self.cfg.version, oom=text))

    def _hicache(self, t_pool: float) -> None:
        cfg = self.cfg
        size_gb = cfg.hicache_size_gb if cfg.hicache_size_gb > 0 else cfg.hicache_ratio * self.kv_gib * GIB / 1e9
        plan = hicache.plan(cfg.version, cfg.local_ranks, size_gb, cfg.opts.host_mem_gb)
        my_check = t_pool + plan.check_at(self.local)
        self.clock.sleep_until(my_check)
        if not cfg.new_format and size_gb * 1e9 <= self.kv_gib * GIB:
            self.fail(crashes.crash_text("hicache-smaller-than-device", cfg.version), delay_real=0.01 * self.local)
        if plan.fail_rank is not None and (cfg.new_format or plan.fail_rank == self.local):
            # 0.5.23 fails every rank against its share; 0.5.9 fails the rank that checked too late
            self.fail(crashes.crash_text("hicache-host-memory", cfg.version, requested_gb=size_gb, free_gb=plan.fail_free_gb), delay_real=0.02 * self.local)
        if plan.fail_rank is not None and self.local > plan.fail_rank:
            raise _Hang()  # killed with the others before it gets there
        if cfg.new_format:
            cell = self.cfg.model.cell_bytes(cfg.attn_tp) * cfg.kv_bytes // self.cfg.model.kv_bytes
            host_tokens = int(size_gb * 1e9 // cell)
            self.log.info(f"Allocating kv hierarchical KV host pool: {host_tokens} tokens, {size_gb:.2f} GB host memory.")
        else:
            self.log.info(f"Allocating {size_gb:.2f} GB host memory for hierarchical KV cache.")
        if plan.victim is not None:
            if plan.victim == self.local:
                self.clock.sleep_until(t_pool + plan.oom_at)
                # the kernel's OOM-killer: no Python output at all
                os.kill(os.getpid(), signal.SIGKILL)
            self.clock.sleep_until(t_pool + plan.pinned_at(self.local))
            raise _Hang()  # blocked on the dead peer at the next collective
        self.clock.sleep_until(t_pool + plan.pinned_at(self.local))
        self.hicache_gb = size_gb

    # ---- serving ----
    def serve_peer(self) -> None:
        while True:
            msg = self.recv(2.0)
            if msg is not None:
                self.handle_common(msg)
            self.proc.refresh()

    def handle_common(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "reserve":
            self.reserved_gib = float(msg[1])
            self.mem()
            self.allreduce_min(f"reserve-{msg[2]}", 0.0)  # TP0 waits until every GPU shows it
        elif kind == "util":
            self.mem(util=float(msg[1]))
        elif kind == "oom":
            self.prefill_oom(msg[1])
        elif kind == "stop":
            self.on_sigterm(signal.SIGTERM, None)

    def prefill_oom(self, info: dict[str, Any]) -> NoReturn:
        new_tokens = int(info["new_tokens"])
        alloc = new_tokens * self.cfg.model.hidden_size * 4 / GIB
        free = self.free()
        oom = self._oom_text(max(alloc, 1 / 1024), free)
        arch_file = {"MLA": "deepseek_v2.py"}.get(self.cfg.model.attention, f"{self.cfg.model.model_type.split('_')[0]}.py")
        self.fail(crashes.crash_text("prefill-oom", self.cfg.version, arch_file=arch_file, oom=oom))

    def serve_tp0(self) -> None:
        cfg, model, clock = self.cfg, self.cfg.model, self.clock
        speed_factor = cfg.gpu.tflops
        params = SchedParams(
            version=cfg.version,
            pool_tokens=self.kv_tokens,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_prefill_tokens=cfg.max_prefill_tokens,
            max_running_requests=self.max_running,
            decode_log_interval=cfg.decode_log_interval,
            cuda_graph_max_bs=cfg.cuda_graph_max_bs,
            decode_graph=cfg.decode_graph,
            prefill_graph_max_tokens=max(cfg.prefill_graph_sizes) if cfg.prefill_graph_sizes else 0,
            prefill_tok_per_s=model.prefill_tok_per_s * speed_factor,
            decode_step_s=model.decode_step_ms / 1000 / speed_factor,
            decode_per_req_s=model.decode_per_req_ms / 1000 / speed_factor,
            context_len=cfg.context_len,
            perf=perf_model(model, cfg.gpu, tp=cfg.tp, pp=cfg.pp, attn_tp=cfg.attn_tp),
        )
        self.finished: list[Req] = []
        sched = Scheduler(params, log=self.log.info, on_prefill=self.on_prefill, on_finish=self.finished.append)
        sched.t = clock.now()
        self.sched = sched
        traffic = None
        traffic_start = 0.0
        nxt = None
        last_stats = 0.0
        # Answers to real clients are held until the simulated time they happen at, so that a
        # client's clock sees the scheduler's timing (TTFT, inter-token gaps, end-to-end). While
        # clients wait, the loop runs every EXTERNAL_TICK_S real seconds and the scheduler runs that
        # far ahead of "now", so nothing is reported late.
        held: list[tuple[float, int, tuple[Any, ...]]] = []
        seq = 0
        streams: dict[str, list[Any]] = {}  # rid -> [Req, tokens reported]
        externals = 0

        def hold(t: float, *msg: Any) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(held, (t, seq, msg))

        while True:
            while True:
                msg = self.recv(0)
                if msg is None:
                    break
                kind = msg[0]
                if kind == "req":
                    rid, prompt, max_new, cached = msg[1:5]
                    # the arrival is when the API received it (the main process stamps it), as
                    # SGLang's tokenizer manager does, not when this loop got round to reading it
                    arrival = min(float(msg[6]), clock.now()) if len(msg) > 6 else clock.now()
                    streamed = bool(len(msg) > 5 and msg[5])
                    req = Req(rid, arrival, int(prompt), int(max_new), int(cached), external=True,
                              itl=streamed or not cfg.new_format)
                    externals += 1
                    if streamed:
                        streams[rid] = [req, 0]
                    sched.add(req)
                elif kind == "traffic":
                    traffic = arrivals(cfg.opts.traffic, cfg.seed)
                    traffic_start = float(msg[1])
                    nxt = next(traffic, None)
                elif kind == "stats_req":
                    last_stats = time.monotonic()
                    self.send("stats", self.stats_snapshot())
                else:
                    self.handle_common(msg)
            now = clock.now()
            # many streams: a coarser tick (more tokens per chunk) keeps the HTTP side's CPU bounded
            tick = min(MAX_EXTERNAL_TICK_S, EXTERNAL_TICK_S * max(1.0, len(streams) / 4))
            ahead = min(tick * cfg.speed, MAX_LOOKAHEAD_S) if externals else 0.0
            while traffic is not None and nxt is not None and traffic_start + nxt.t <= now + ahead:
                sched.add(Req(f"sim-{sched.stats.num_requests_total}-{nxt.t:.3f}", traffic_start + nxt.t,
                              nxt.prompt_tokens, nxt.max_new_tokens, nxt.cached_tokens))
                nxt = next(traffic, None)
            try:
                sched.advance(now + ahead)
            except KvPoolExhausted as exc:
                self.fail(crashes.crash_text("kv-pool-exhausted", cfg.version, message=str(exc)))
            for rid, entry in streams.items():
                r, told = entry
                n = r.output_tokens
                if r.first_token_at is not None and told == 0 and n > 0:
                    hold(r.first_token_at, "tok", rid, 1)
                    told = 1
                if n > told and r.finished_at is None:
                    hold(sched.t, "tok", rid, n)
                    told = n
                entry[1] = told
            for r in self.finished:
                if r.external:
                    externals -= 1
                    streams.pop(r.rid, None)
                    hold(r.finished_at if r.finished_at is not None else now, "done", r.rid, {
                        "prompt_tokens": r.prompt_tokens,
                        "completion_tokens": r.output_tokens,
                        "cached_tokens": r.cached_tokens,
                        "e2e_latency": (r.finished_at or now) - r.arrival,
                        "ttft": None if r.first_token_at is None else r.first_token_at - r.arrival,
                        "error": r.error,
                        "status": r.error_status,
                        "finish_reason": "length",
                    })
            self.finished.clear()
            now = clock.now()
            while held and held[0][0] <= now:
                self.send(*heapq.heappop(held)[2])
            wall = time.monotonic()
            if wall - last_stats >= 0.5:
                last_stats = wall
                self.send("stats", self.stats_snapshot())
            util = (92.0 + self.rng.uniform(0, 6)) if (sched.running or sched.waiting or sched.chunked) else 0.0
            if (util > 0) != bool(self.proc.util_pct):
                self.mem(util=util)
                peers = [r for r in range(cfg.local_ranks) if r != self.local]
                if peers:
                    self.send("bcast", peers, ("util", util))
            self.proc.refresh()
            busy = sched.busy() or traffic is not None
            wait = 0.1 if busy else 1.0
            if externals or held:
                wait = tick
                if held:
                    wait = min(wait, max(0.0, clock.real(held[0][0] - clock.now())))
            with contextlib.suppress(OSError, EOFError):
                self.conn.poll(wait)

    def stats_snapshot(self) -> dict[str, Any]:
        s = self.sched
        st = s.stats
        return {
            "num_running_reqs": len(s.running),
            "num_queue_reqs": len(s.waiting) + len(s.pending),
            "token_usage": round(s.token_usage, 4),
            "num_used_tokens": s.tokens_used,
            "gen_throughput": round(st.last_gen_throughput, 2),
            "new_token_ratio": round(s.new_token_ratio, 4),
            "is_cuda_graph": 1.0 if s.running and len(s.running) <= self.cfg.cuda_graph_max_bs else 0.0,
            "max_total_num_tokens": self.kv_tokens,
            "num_requests_total": st.num_requests_total,
            "prompt_tokens_total": st.prompt_tokens_total,
            "generation_tokens_total": st.generation_tokens_total,
            "cached_tokens_total": st.cached_tokens_total,
            "num_retracted_requests_total": st.num_retracted_requests_total,
            "cuda_graph_passes_total": st.cuda_graph_passes_total,
            "ttft": st.ttft.to_json(),
            "e2e": st.e2e.to_json(),
            "itl": st.itl.to_json(),
        }

    def group(self) -> range:
        """The local ranks that run TP0's batches: its own TP x PP group (not other DP replicas)."""
        return range(min(self.cfg.local_ranks, self.cfg.tp * self.cfg.pp))

    def on_prefill(self, new_tokens: int) -> None:
        """Does every rank have the activation memory for this prefill? If not, the worst one dies."""
        need = self.cfg.model.act_gib(new_tokens)
        if need <= self.reserved_gib + 1e-9:
            return
        extra = need - self.reserved_gib
        fractions: dict[int, float] = {}
        for local in self.group():
            free = gpus.free_gib(self.cfg.sim_dir, self.cfg.gpu_index(local), self.cfg.gpu.total_mib,
                                 self.cfg.job, self.cfg.node_rank)
            if free < extra:
                fractions[local] = free / extra
        if fractions:
            # the rank that runs out at the earliest layer raises; its peers block in the next
            # all-reduce and never get to their own OOM
            worst = min(fractions.values())
            losers = [r for r, f in fractions.items() if math.isclose(f, worst, rel_tol=1e-6, abs_tol=1e-9)]
            info = {"new_tokens": new_tokens, "need_gib": need}
            others = [r for r in losers if r != self.local]
            if others:
                self.send("bcast", others, ("oom", info))
            if self.local in losers:
                self.prefill_oom(info)
            raise _Hang()
        self.reserved_gib = need
        self.mem()
        # every rank, other DP replicas too (their own traffic grows their activations alike);
        # the collective below counts all local ranks
        peers = [r for r in range(self.cfg.local_ranks) if r != self.local]
        if peers:
            # the next OOM decision reads every rank's file: wait until they all show the new mark
            self.reserve_seq += 1
            self.send("bcast", peers, ("reserve", need, self.reserve_seq))
            self.allreduce_min(f"reserve-{self.reserve_seq}", 0.0)


def gpus_extra(index: int) -> float:

    return gpu_index_extra_gib(index)


def _mmss(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"
