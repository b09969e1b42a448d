"""The tuning policy for SGLang: from what the launches so far measured, the next setting to launch.

Pure (no I/O): `cockpit tune` launches, measures and asks `next_move` again. The moves, in order:

1. Memory: move --mem-fraction-static to the highest two-decimal value whose headroom after
   capture keeps the target (δ·P: lowering mfs by δ frees δ·P GiB per GPU, one for one).
2. CUDA graphs: when the KV pool binds (high token usage or a queue) while the running batch stays
   far below --cuda-graph-max-bs, the graphs hold memory no batch uses: capture up to the batch the
   bigger pool will run (25 % margin; never past what bounds the batch: --max-running-requests, and
   the benchmark's concurrency unless other clients share the server), and
   give the freed memory to the KV pool in the same move.
   When batches run above the largest graph (eager), capture up to them if the headroom allows.
3. --max-running-requests: raised when the running batch sits at the cap with the pool half empty
   and requests queue.
4. --chunked-prefill-size: raised when prefill is the bottleneck (requests queue, the pool is
   not full, the batch is below the benchmark's concurrency), while the transient prefill memory
   stays inside the headroom above the target.

A crash is not a move of this module: the caller applies the diagnosis' advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cockpit.backends.sglang.memory import floor2
from cockpit.backends.tunepick import BaseStep, Move, meets_slo, objective_value, pick_best
from cockpit.core.numbers import as_float

GIB = 2**30
# graph memory is mostly proportional to the largest captured batch; assume this share of it
# is fixed, so that the memory freed by a smaller batch is never overestimated
GRAPH_FIXED_SHARE = 0.2
# capture up to 25 % above the batch predicted: a graph slot costs a few MiB, an eager batch 30 % speed
BS_MARGIN = 1.25
KV_BINDS_USAGE = 0.85
TIE = 0.03  # throughput within 3 % of the best measured is a tie (run-to-run spread on a busy host)  # token usage at which the pool is the limit
MFS_FLAG = "mem-fraction-static"
GRAPH_FLAG = "cuda-graph-max-bs"
RUNNING_FLAG = "max-running-requests"
CHUNK_FLAG = "chunked-prefill-size"
# transient (activation) memory of a prefill, GiB per token: a conservative figure for the
# chunk rule (the largest measured models need ~0.2-0.8 MiB per token)
ACT_GIB_PER_TOKEN = 1.0 / 1024


@dataclass(frozen=True)
class Step(BaseStep):
    """One launch as the tuner saw it. None: not measured."""

    cuda_graph_max_bs: int | None = None  # as the server resolved it
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None


def _num(flags: dict[str, Any], key: str) -> float | None:
    return as_float(flags.get(key))


def _version(text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (text or "").split(".")[:3])
    except ValueError:
        return ()


MEMORY_FLAG = MFS_FLAG  # what `cockpit tune` names a step by when no flag differs from the profile


def step_facts(state: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """The SGLang-specific fields of a Step from a run's state (for `cockpit tune`): the ranks'
    smallest free memory before loading and largest graph, the dump's decode-graph batch size, the
    scheduler's running-request cap and prefill chunk as its log printed them."""
    ranks = list(getattr(state, "ranks", {}).values())
    pre = [r.pre_load_avail_gb for r in ranks if r.pre_load_avail_gb is not None]
    graphs = [r.graph_gb for r in ranks if r.graph_gb is not None]
    args = getattr(state, "server_args", None) or {}
    bs = args.get("cuda_graph_max_bs") or args.get("cuda_graph_max_bs_decode")
    return {"pre_load_avail_gb": min(pre) if pre else None, "graph_gb": max(graphs) if graphs else None,
            "cuda_graph_max_bs": int(bs) if isinstance(bs, (int, float)) else None,
            "max_running_requests": state.running_requests_cap,
            "chunked_prefill_size": state.prefill_chunk_tokens}


def round_bs(n: float) -> int:
    """A batch size SGLang captures: multiples of 8 up to 256, of 16 above (its default ladder)."""
    step = 8 if n <= 256 else 16
    return max(8, int(math.ceil(n / step) * step))


def _graph_after(graph_gb: float, bs_old: int, bs_new: int) -> float:
    """Graph memory at bs_new, from what bs_old took: never below the proportional share, plus a
    fixed share, so that the memory a smaller capture frees is never overestimated."""
    fixed = GRAPH_FIXED_SHARE * graph_gb
    return fixed + (graph_gb - fixed) * bs_new / max(1, bs_old)


def mfs_for(step: Step, target: float, extra_free_gb: float = 0.0) -> float | None:
    """The highest two-decimal mfs whose headroom keeps `target`, given `extra_free_gb` freed elsewhere."""
    mfs = _num(step.flags, MFS_FLAG)
    if mfs is None or step.headroom_gb is None or not step.pre_load_avail_gb:
        return None
    return floor2(mfs + (step.headroom_gb + extra_free_gb - target) / step.pre_load_avail_gb + 1e-9)


def headroom_at(step: Step, mfs_new: float, graph_freed_gb: float = 0.0) -> float | None:
    mfs = _num(step.flags, MFS_FLAG)
    if mfs is None or step.headroom_gb is None or not step.pre_load_avail_gb:
        return None
    return step.headroom_gb + graph_freed_gb - (mfs_new - mfs) * step.pre_load_avail_gb


def _tried(history: list[Step], flags: dict[str, Any]) -> bool:
    keys = (MFS_FLAG, GRAPH_FLAG, GRAPH_FLAG + "-decode", RUNNING_FLAG, CHUNK_FLAG)
    want = {k: _num(flags, k) for k in keys}
    return any({k: _num(s.flags, k) for k in keys} == want for s in history)


def _batch_cap(s: Step) -> float:
    """What bounds the running batch: --max-running-requests, and the benchmark's concurrency when
    the benchmark is the server's only client (a batch above it means other clients share the
    server, and their share grows with the pool too: then only the cap bounds it)."""
    caps = [float(s.max_running_requests)] if s.max_running_requests else []
    if s.concurrency and (s.peak_running or 0.0) <= s.concurrency:
        caps.append(float(s.concurrency))
    return min(caps) if caps else float("inf")


def kv_binds(s: Step) -> bool:
    """The KV pool limits the batch: nearly full, or requests wait while the batch stays below both
    the benchmark's concurrency and --max-running-requests (admission reserves room for their
    future tokens, so the pool reads well below full when it binds)."""
    usage = s.peak_token_usage or 0.0
    if usage >= KV_BINDS_USAGE:
        return True
    caps = [float(x) for x in (s.concurrency, s.max_running_requests) if x]
    room = min(caps) if caps else float("inf")
    return bool(s.peak_queue) and usage >= 0.4 and (s.peak_running or 0) < 0.9 * room


def next_move(history: list[Step], base_flags: dict[str, Any], *, target: float, warn: float) -> Move | None:
    """The next setting to launch, or None when the measurements say nothing binds any more.
    `base_flags`: the profile's server flags (a move's overrides are relative to them)."""
    ready = [s for s in history if s.outcome == "ready" and s.headroom_gb is not None]
    if not ready:
        return None
    last = ready[-1]
    flags = dict(last.flags)

    def move(changes: dict[str, Any], why: str, predicted: float | None) -> Move | None:
        new = {**flags, **changes}
        if _tried(history, new):
            return None
        over = {k: v for k, v in new.items() if base_flags.get(k) != v}
        return Move(over, why, None if predicted is None else round(predicted, 2))

    # 0.5.23 split the decode and prefill graph sizes: the bare name is ambiguous there
    graph_flag = GRAPH_FLAG + "-decode" if _version(last.version) >= (0, 5, 23) or GRAPH_FLAG + "-decode" in flags \
        else GRAPH_FLAG
    mfs = _num(flags, MFS_FLAG)
    P = last.pre_load_avail_gb
    h = last.headroom_gb
    assert h is not None
    # 1. memory toward the target
    if mfs is not None and P:
        best = mfs_for(last, target)
        if best is not None and best != mfs and not (best > mfs and last.output_tok_s is None):
            pred = headroom_at(last, best)
            verb = "raise" if best > mfs else "lower"
            m = move({MFS_FLAG: best}, f"{verb} the memory setting to the highest value that keeps {target:g} GiB "
                     f"(measured {h:.2f} GiB at {mfs:g}; δ·P with P = {P:.1f} GiB)", pred)
            if m is not None:
                return m
    if last.output_tok_s is None:
        return None  # not benched (below the warn level): nothing more to learn from it
    # 2. CUDA graphs
    bs = last.cuda_graph_max_bs
    running = last.peak_running or 0.0
    if bs and last.graph_gb and mfs is not None and P and last.kv_tokens and last.kv_gb:
        if kv_binds(last) and running < 0.7 * bs:
            tokens_per_gib = last.kv_tokens / last.kv_gb
            new_bs, new_mfs, freed = bs, mfs, 0.0
            for _ in range(4):  # bs, freed memory and the pool it buys depend on each other: iterate
                cand_freed = last.graph_gb - _graph_after(last.graph_gb, bs, new_bs)
                cand_mfs = mfs_for(last, target, cand_freed)
                if cand_mfs is None:
                    break
                new_mfs, freed = cand_mfs, cand_freed
                gain = (new_mfs - mfs) * P * tokens_per_gib
                pred_running = running * (last.kv_tokens + gain) / last.kv_tokens
                # no batch exceeds what bounds it; the margin covers the prediction
                new_bs = min(bs, round_bs(min(pred_running, _batch_cap(last)) * BS_MARGIN))
            if new_bs < bs and new_mfs > mfs:
                pred = headroom_at(last, new_mfs, freed)
                m = move({graph_flag: new_bs, MFS_FLAG: new_mfs},
                         f"the KV pool binds (token usage {last.peak_token_usage or 0:.2f}) while batches peak at "
                         f"{running:.0f} of {bs} captured: capture up to {new_bs}, freeing ~{freed:.2f} GiB of "
                         f"graph memory for the pool", pred)
                if m is not None:
                    return m
        if running > bs and round_bs(min(running, _batch_cap(last)) * BS_MARGIN) > bs:
            new_bs = round_bs(min(running, _batch_cap(last)) * BS_MARGIN)
            cost = _graph_after(last.graph_gb, bs, new_bs) - last.graph_gb
            up_mfs = mfs_for(last, target, -cost)
            if up_mfs is not None:
                pred = headroom_at(last, up_mfs, -cost)
                m = move({graph_flag: new_bs, MFS_FLAG: up_mfs},
                         f"batches of {running:.0f} run without CUDA graphs (largest captured {bs}): capture up to {new_bs}",
                         pred)
                if m is not None and pred is not None and pred >= warn:
                    return m
    # 3. max running requests
    run_cap = last.max_running_requests
    if run_cap and running >= run_cap and (last.peak_token_usage or 0) < 0.5 and last.peak_queue:
        m = move({RUNNING_FLAG: int(run_cap * 2)}, f"the batch sits at --max-running-requests {run_cap} with the KV "
                 f"pool {last.peak_token_usage or 0:.0%} used and requests queued", h)
        if m is not None:
            return m
    # 4. chunked prefill
    chunk = last.chunked_prefill_size
    if chunk and last.peak_queue and not kv_binds(last) and running < (last.concurrency or 0) * 0.9:
        new_chunk = chunk * 2
        need = (new_chunk - chunk) * ACT_GIB_PER_TOKEN
        if h - need >= target:
            m = move({CHUNK_FLAG: new_chunk}, f"prefill binds (requests queue, pool not full): chunk {chunk} → "
                     f"{new_chunk} (≤ {need:.2f} GiB more transient memory)", h - need)
            if m is not None:
                return m
    return None


def best_step(history: list[Step], objective: str, slo: dict[str, float], target: float,
              tie: float = TIE) -> Step | None:
    """The best benched step that kept the headroom target and the SLO. Measurements within `tie`
    of the top are a tie on a loaded machine; the tie goes to the larger KV pool (the setting with
    the most room for a burst), then to the later step."""
    ok = [s for s in history if s.outcome == "ready" and s.headroom_gb is not None and s.headroom_gb >= target
          and objective_value(s, objective) is not None and meets_slo(s, slo)]
    return pick_best(ok, history, objective, tie)
