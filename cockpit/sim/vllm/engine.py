"""The vLLM simulator's engine: continuous batching over the KV cache, in simulated seconds.

A fluid model, not a kernel: every tick admits waiting requests while the KV cache has room (and
fewer than --max-num-seqs run), prefills them in chunks of at most --max-num-batched-tokens, and
decodes the rest. What matters for the story is the largest step: its activations need
`run_act_gib_per_8k × tokens / 8192` GiB on every GPU, out of what start-up left free; more than
that is a CUDA OOM (EngineOom), as in vLLM when the util budget leaves too little room.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from cockpit.sim.histogram import Histogram
from cockpit.sim.vllm.config import VllmSimConfig

PREFILL_TOKENS_PER_S = 12000.0  # simulated seconds, per engine
DECODE_TOKENS_PER_S = 35.0  # per running request
OOM_MARGIN_GIB = 0.1  # the allocator's own slack
# vLLM 0.32's own bucket bounds (vllm/v1/metrics/buckets.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)


class EngineOom(Exception):
    def __init__(self, need: float, free: float, chunk: int, prompt: int, req_id: str):
        super().__init__(f"CUDA out of memory: {need:.2f} GiB needed, {free:.2f} GiB free")
        self.need, self.free, self.chunk, self.prompt, self.req_id = need, free, chunk, prompt, req_id


@dataclass
class Req:
    rid: str
    prompt: int
    max_new: int
    cached: int
    t_arrive: float
    done_prompt: int = 0
    generated: float = 0.0
    finished: threading.Event = field(default_factory=threading.Event)
    e2e: float | None = None
    ttft: float | None = None

    @property
    def kv_tokens(self) -> int:
        return self.done_prompt + int(self.generated)


class Engine:
    def __init__(self, cfg: VllmSimConfig, capacity: int, free_after_gib: float, per_token_bytes: float):
        self.cfg = cfg
        self.capacity = capacity
        self.free_after = free_after_gib
        self.per_token_bytes = per_token_bytes
        self.lock = threading.Lock()
        # notified after every step (under `lock`): a streaming answer waits on it for new tokens
        self.stepped = threading.Condition(self.lock)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.ids = itertools.count()
        self.now = 0.0
        self.prompt_total = 0
        self.gen_total = 0.0
        self.queries = 0
        self.hits = 0
        self.preemptions = 0
        self.success = 0
        self._interval = {"prompt": 0, "gen": 0.0, "preempt": 0}
        self.e2e = Histogram(E2E_BUCKETS)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def usage(self) -> float:
        return min(1.0, sum(r.kv_tokens for r in self.running) / self.capacity) if self.capacity else 0.0

    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    def add(self, prompt: int, max_new: int, cached: int = 0) -> Req:
        with self.lock:
            r = Req(f"cmpl-sim{next(self.ids):06x}-0", max(1, prompt), max(1, max_new), min(cached, prompt), self.now)
            self.waiting.append(r)
            return r

    def take_interval(self) -> dict[str, float]:
        with self.lock:
            out = dict(self._interval)
            self._interval = {"prompt": 0, "gen": 0.0, "preempt": 0}
            return out

    def step(self, dt: float) -> None:
        with self.lock:
            self.now += dt
            used = sum(r.kv_tokens for r in self.running)
            while self.waiting and len(self.running) < self.cfg.max_num_seqs:
                r = self.waiting[0]
                if used + r.prompt > self.capacity:
                    break
                self.waiting.pop(0)
                self.running.append(r)
                used += r.prompt
                self.queries += r.prompt
                self.hits += r.cached
                r.done_prompt = r.cached
            decoding = [r for r in self.running if r.done_prompt >= r.prompt]
            prefilling = [r for r in self.running if r.done_prompt < r.prompt]
            # the largest step of this tick: decodes plus as much prefill as one step holds
            remaining = sum(r.prompt - r.done_prompt for r in prefilling)
            step_tokens = min(self.cfg.max_num_batched_tokens, len(decoding) + remaining)
            need = self.cfg.model.run_act_gib_per_8k * step_tokens / 8192
            if prefilling and need > self.free_after - OOM_MARGIN_GIB:
                big = max(prefilling, key=lambda r: r.prompt - r.done_prompt)
                raise EngineOom(round(need * 0.6, 2), round(max(0.0, self.free_after - need * 0.45), 2),
                                step_tokens, big.prompt, big.rid)
            budget = PREFILL_TOKENS_PER_S * dt
            for r in prefilling:
                take = int(min(budget, r.prompt - r.done_prompt))
                r.done_prompt += take
                budget -= take
                self.prompt_total += take
                self._interval["prompt"] += take
                if budget <= 0:
                    break
            for r in decoding:
                inc = min(DECODE_TOKENS_PER_S * dt, r.max_new - r.generated)
                if r.generated == 0 and inc > 0:
                    r.ttft = self.now - r.t_arrive
                    self.ttft.observe(r.ttft)
                r.generated += inc
                self.gen_total += inc
                self._interval["gen"] += inc
                if r.generated >= r.max_new:
                    self._finish(r)
            self.stepped.notify_all()

    def _finish(self, r: Req) -> None:
        self.running.remove(r)
        self.success += 1
        r.e2e = self.now - r.t_arrive
        self.e2e.observe(r.e2e)
        gaps = int(r.generated) - 1
        if gaps > 0 and r.ttft is not None:  # vLLM observes each token's gap; here they are equal
            itl = (r.e2e - r.ttft) / gaps
            self.itl.observe(itl, gaps)
        r.finished.set()

