"""TP0's scheduler: SGLang's batching loop in simulated time, with no I/O of its own.

Requests wait in a queue; each loop either runs a prefill batch (new requests up to the chunked
prefill size, admitted against the KV pool with SGLang's new-token-ratio reservation) or a decode
step for every running request. Decode steps are run in bulk between events so that thousands of
iterations per simulated second cost almost nothing. The caller supplies callbacks: `log` for batch
lines, `on_prefill` (which may raise to simulate a CUDA OOM on some rank), `on_finish`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cockpit.sim.histogram import Histogram
from cockpit.sim.perf import MIN_PREFILL_PASS_S, PerfModel, attention_context

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096


class KvPoolExhausted(RuntimeError):
    """SGLang's own KV accounting ran out with nothing left to retract (a scheduler crash)."""


@dataclass
class Req:
    rid: str
    arrival: float
    prompt_tokens: int
    max_new_tokens: int
    cached_tokens: int = 0
    external: bool = False
    # observed in inter_token_latency_seconds: 0.5.23 observes it per output chunk, which a
    # non-streaming request never has (measured against the real engine, issue 34)
    itl: bool = True
    prefilled: int = 0  # prompt tokens already in the KV pool (cached ones count)
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    retractions: int = 0
    generated_before_retract: int = 0  # a retracted request re-prefills its output so far
    error: str | None = None
    error_status: int = 400

    @property
    def remaining_prompt(self) -> int:
        return self.prompt_tokens + self.generated_before_retract - self.prefilled

    @property
    def output_tokens(self) -> int:
        return self.generated_before_retract + self.generated

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + self.generated


@dataclass
class SchedParams:
    version: str
    pool_tokens: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    max_running_requests: int
    decode_log_interval: int
    cuda_graph_max_bs: int
    decode_graph: bool
    prefill_graph_max_tokens: int  # 0 when prefill graphs are off (0.5.9)
    prefill_tok_per_s: float
    decode_step_s: float
    decode_per_req_s: float
    context_len: int = 1 << 30
    perf: PerfModel | None = None  # the full throughput model; None: the three figures above alone

    def model(self) -> PerfModel:
        if self.perf is not None:
            return self.perf
        return PerfModel(self.prefill_tok_per_s, MIN_PREFILL_PASS_S, self.decode_step_s, self.decode_per_req_s,
                         0.0, attn_context_tokens=0.0)


TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
# SGLang's default inter-token-latency buckets (srt/metrics/collector.py TokenizerMetricsCollector)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0,
               250.0, 300.0, 350.0, 500.0, 1000.0)


@dataclass
class Stats:
    num_requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    cached_tokens_total: int = 0
    num_retracted_requests_total: int = 0
    cuda_graph_passes_total: int = 0
    last_gen_throughput: float = 0.0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))


class Scheduler:
    def __init__(
        self,
        params: SchedParams,
        log: Callable[[str], None],
        on_prefill: Callable[[int], None],
        on_finish: Callable[[Req], None],
    ):
        self.p = params
        self.perf = params.model()
        self.log = log
        self.on_prefill = on_prefill
        self.on_finish = on_finish
        self.t = 0.0
        self.pending: deque[Req] = deque()  # arrived in the future of self.t
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.decode_iters = 0
        self.stats = Stats()
        self._last_decode_log_t: float | None = None
        self._tokens_since_decode_log = 0
        self._last_prefill_log_t: float | None = None
        self._tokens_since_prefill_log = 0

    # ---- accounting ----
    @staticmethod
    def _used(reqs: list[Req]) -> int:
        # a cached prefix (the shared system prompt) lives once in the radix tree, not per request
        return sum(r.kv_tokens - r.cached_tokens for r in reqs) + max((r.cached_tokens for r in reqs), default=0)

    @property
    def tokens_used(self) -> int:
        return self._used([*self.running, *([self.chunked] if self.chunked is not None else [])])

    @property
    def token_usage(self) -> float:
        return self.tokens_used / self.p.pool_tokens if self.p.pool_tokens else 0.0

    def busy(self) -> bool:
        return bool(self.pending or self.waiting or self.running or self.chunked)

    def add(self, req: Req) -> None:
        """A request that arrives at req.arrival (queued in arrival order)."""
        limit = min(self.p.context_len, self.p.pool_tokens) - 1
        if req.prompt_tokens > limit:
            req.error = (
                f"Input length ({req.prompt_tokens} tokens) exceeds the maximum allowed length ({limit} tokens). "
                "Use a shorter input or enable --allow-auto-truncate."
            )
            req.finished_at = max(self.t, req.arrival)
            self.on_finish(req)
            return
        if self.pending and req.arrival < self.pending[-1].arrival:
            items = sorted([*self.pending, req], key=lambda r: r.arrival)
            self.pending = deque(items)
        else:
            self.pending.append(req)

    def _admit_arrivals(self) -> None:
        while self.pending and self.pending[0].arrival <= self.t:
            self.waiting.append(self.pending.popleft())

    # ---- the loop ----
    def advance(self, until: float) -> None:
        """Run batches until simulated time `until` (the last batch may end a little after it)."""
        guard = 0
        while self.t < until:
            guard += 1
            if guard > 200000:
                break
            self._admit_arrivals()
            if self._try_prefill():
                continue
            next_arrival = self.pending[0].arrival if self.pending else None
            if self.running:
                self._decode(until, next_arrival)
                continue
            self.t = until if next_arrival is None else min(until, max(self.t, next_arrival))

    def _reserved_future(self) -> float:
        return sum(min(r.max_new_tokens - r.generated, CLIP_MAX_NEW_TOKENS) for r in self.running) * self.new_token_ratio

    def _try_prefill(self) -> bool:
        if not self.waiting and self.chunked is None:
            return False
        budget = self.p.chunked_prefill_size if self.p.chunked_prefill_size > 0 else self.p.max_prefill_tokens
        budget = min(budget, self.p.max_prefill_tokens) if self.p.chunked_prefill_size <= 0 else budget
        rem_total = self.p.pool_tokens - self.tokens_used - self._reserved_future()
        batch: list[tuple[Req, int]] = []
        new_tokens = 0
        cached = 0
        if self.chunked is not None:
            r = self.chunked
            take = min(r.remaining_prompt, budget)
            batch.append((r, take))
            new_tokens += take
            rem_total -= take
        while self.waiting and new_tokens < budget:
            if len(self.running) + len(batch) >= self.p.max_running_requests:
                break
            r = self.waiting[0]
            hit = r.cached_tokens if r.prefilled == 0 else 0  # radix-cache hit: no compute needed
            need = r.remaining_prompt - hit
            future = min(r.max_new_tokens, CLIP_MAX_NEW_TOKENS) * self.new_token_ratio
            if need + future > rem_total and (self.running or batch):
                break
            self.waiting.popleft()
            r.prefilled += hit
            cached += hit
            take = min(need, budget - new_tokens)
            batch.append((r, take))
            new_tokens += take
            rem_total -= take + future
        if not batch:
            return False
        # SGLang logs the batch before running it; usage includes the tokens being allocated now
        context = attention_context([(r.prefilled, take) for r, take in batch])
        for r, take in batch:
            r.prefilled += take
        usage = self.tokens_used / self.p.pool_tokens if self.p.pool_tokens else 0.0
        now_t = self.t
        if self._last_prefill_log_t is None or now_t <= self._last_prefill_log_t:
            in_tps = 0.0
        else:
            in_tps = self._tokens_since_prefill_log / (now_t - self._last_prefill_log_t)
        graph = 0 < new_tokens <= self.p.prefill_graph_max_tokens
        queue = len(self.waiting)
        body = (
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {len(self.running)}, #queue-req: {queue}, "
        )
        if self.p.version == "0.5.23":
            pending = sum(r.remaining_prompt for r in self.waiting)
            body += f"#pending-token: {pending}, cuda graph: {graph}, input throughput (token/s): {in_tps:.2f}"
        else:
            body += f"input throughput (token/s): {in_tps:.2f}, cuda graph: {graph}"
        self.log(body)
        self._last_prefill_log_t = now_t
        self._tokens_since_prefill_log = 0
        # the forward pass: this is where a rank without enough free memory dies
        self.on_prefill(new_tokens)
        self.t += self.perf.prefill_s(new_tokens, context)
        self._tokens_since_prefill_log += new_tokens
        self.stats.cached_tokens_total += cached
        self.chunked = None
        for r, _take in batch:
            if r.remaining_prompt > 0:
                self.chunked = r
                continue
            # the prefill produces the first output token
            if r.first_token_at is None:
                r.first_token_at = self.t
                self.stats.ttft.observe(self.t - r.arrival)
                self.stats.num_requests_total += 1
                self.stats.prompt_tokens_total += r.prompt_tokens
            r.generated += 1
            self.stats.generation_tokens_total += 1
            self._tokens_since_decode_log += 1
            if r.generated >= r.max_new_tokens:
                self._finish(r)
            else:
                self.running.append(r)
        return True

    def _step_s(self, n: int) -> float:
        return self.perf.decode_step(n, self.tokens_used, self._graph(n))

    def _graph(self, n: int) -> bool:
        return self.p.decode_graph and n <= self.p.cuda_graph_max_bs

    def _decode(self, until: float, next_arrival: float | None) -> None:
        n = len(self.running)
        step = self._step_s(n)
        # how many iterations until something changes: a request finishes, a log line is due,
        # a new request arrives, the pool fills, or we reach `until`
        k = min(r.max_new_tokens - r.generated for r in self.running)
        k = min(k, self.p.decode_log_interval - self.decode_iters % self.p.decode_log_interval)
        horizon = until if next_arrival is None else min(until, max(next_arrival, self.t))
        k = min(k, max(1, math.ceil((horizon - self.t) / step)))
        free = self.p.pool_tokens - self.tokens_used
        if free < n:
            if self._retract():
                return
            if self.p.version == "0.5.23":
                # 0.5.23 aborts the last request instead of crashing the scheduler
                last = self.running.pop()
                self.log(f"retract_decode: aborted last request {last.rid} due to OOM")
                last.error = ("Out of memory even after retracting all other requests in the decode batch. "
                              "Aborting the last request.")
                last.error_status = 500
                self._finish(last)
                return
            raise KvPoolExhausted(
                "Decode out of memory. Try to lower your batch size.\n"
                f"Try to allocate {n} tokens.\n"
                f"Available tokens: {free} (available_size={free} + evictable_size=0)\n"
            )
        k = max(1, min(k, free // n))
        for r in self.running:
            r.generated += k
        self.decode_iters += k
        self.t += k * step
        self.stats.generation_tokens_total += n * k
        self._tokens_since_decode_log += n * k
        if self._graph(n):
            self.stats.cuda_graph_passes_total += k
        self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY * k)
        if self.decode_iters % self.p.decode_log_interval == 0:
            self._decode_line(n)
        done = [r for r in self.running if r.generated >= r.max_new_tokens]
        if done:
            self.running = [r for r in self.running if r.generated < r.max_new_tokens]
            for r in done:
                self._finish(r)

    def _decode_line(self, n: int) -> None:
        if self._last_decode_log_t is None or self.t <= self._last_decode_log_t:
            tps = 0.0
        else:
            tps = self._tokens_since_decode_log / (self.t - self._last_decode_log_t)
        self._last_decode_log_t = self.t
        self._tokens_since_decode_log = 0
        self.stats.last_gen_throughput = tps
        self.log(
            f"Decode batch, #running-req: {n}, #token: {self.tokens_used}, token usage: {self.token_usage:.2f}, "
            f"cuda graph: {self._graph(n)}, gen throughput (token/s): {tps:.2f}, #queue-req: {len(self.waiting)}"
        )

    def _retract(self) -> bool:
        """KV pool full in decode: give back requests until RETRACT_DECODE_STEPS steps fit (SGLang's rule)."""
        # SGLang retracts the requests with the least output first (ties: the longest prompt)
        order = sorted(self.running, key=lambda r: (r.generated, -r.prompt_tokens), reverse=True)
        retracted: list[Req] = []
        while len(order) > 1:
            need = len(order) * RETRACT_DECODE_STEPS
            if self.p.pool_tokens - self._used(order) >= need:
                break
            retracted.append(order.pop())
        if not retracted:
            return False
        gained = self.tokens_used - self._used(order)
        self.running = [r for r in self.running if r not in retracted]
        for r in reversed(retracted):
            r.generated_before_retract += r.generated
            r.max_new_tokens -= r.generated
            r.generated = 0
            r.prefilled = 0
            r.cached_tokens = 0
            r.retractions += 1
            self.waiting.appendleft(r)
        total_decoded = sum(r.generated for r in self.running)
        total_max_new = sum(r.max_new_tokens for r in self.running) or 1
        old = self.new_token_ratio
        self.new_token_ratio = min(1.0, (total_decoded + RETRACT_DECODE_STEPS * len(self.running)) / total_max_new)
        self.new_token_ratio = max(self.new_token_ratio, old)
        self.stats.num_retracted_requests_total += len(retracted)
        self.log(
            f"KV cache pool is full. Retract requests. #retracted_reqs: {len(retracted)}, "
            f"#new_tokens_gained: {gained}, #new_token_ratio: {old:.4f} -> {self.new_token_ratio:.4f}"
        )
        return True

    def _finish(self, r: Req) -> None:
        r.finished_at = self.t
        self.stats.e2e.observe(self.t - r.arrival)
        gaps = r.generated - 1
        if r.first_token_at is not None and gaps > 0 and r.itl:
            self.stats.itl.observe((self.t - r.first_token_at) / gaps, gaps)
        self.on_finish(r)
