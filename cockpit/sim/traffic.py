"""Built-in clients for --sim-traffic: deterministic request streams in simulated seconds.

steady: ~4 requests/s of chat-sized prompts sharing a 256-token system prompt (cached after the
        first), plus one long document (12k tokens) every 240 s. The long document is the "first
        large prefill batch" of the story: with ~0.8 GiB free it OOMs, with ~5.5 GiB it fits.
burst:  a light background, and every 60 s a burst of 48 long requests at once (big chunked
        prefill batches, KV pool pressure and retraction when the pool is small).
none:   nothing; only the warmup request and real HTTP clients.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

SYSTEM_PROMPT_TOKENS = 256
STEADY_RATE = 4.0
LONG_DOC_EVERY_S = 240.0
LONG_DOC_TOKENS = 12000
BURST_EVERY_S = 90.0
BURST_FIRST_S = 20.0
BURST_SIZE = 32


@dataclass(frozen=True)
class Arrival:
    t: float  # simulated seconds since traffic started
    prompt_tokens: int
    max_new_tokens: int
    cached_tokens: int  # prefix already in the radix cache


def arrivals(mode: str, seed: int = 0) -> Iterator[Arrival]:
    """An endless, time-ordered stream of requests for the given mode."""
    if mode == "none":
        return
    rng = random.Random(seed * 7919 + 17)
    if mode == "steady":
        t = 0.0
        next_doc = LONG_DOC_EVERY_S
        first = True
        while True:
            t += rng.expovariate(STEADY_RATE)
            if t >= next_doc:
                yield Arrival(next_doc, LONG_DOC_TOKENS + rng.randint(0, 800), rng.randint(200, 400), 0)
                next_doc += LONG_DOC_EVERY_S
            user = rng.randint(150, 800)
            cached = 0 if first else SYSTEM_PROMPT_TOKENS
            first = False
            yield Arrival(t, SYSTEM_PROMPT_TOKENS + user, rng.randint(120, 420), cached)
        return
    if mode == "burst":
        t = 0.0
        next_burst = BURST_FIRST_S
        while True:
            t += rng.expovariate(0.5)
            while t >= next_burst:
                for i in range(BURST_SIZE):
                    yield Arrival(next_burst + i * 0.01, rng.randint(1500, 4000), rng.randint(300, 1000), 0)
                next_burst += BURST_EVERY_S
            yield Arrival(t, rng.randint(200, 900), rng.randint(100, 300), 0)
        return
    raise ValueError(f"unknown traffic mode {mode!r}")
