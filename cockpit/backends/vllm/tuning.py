"""The tuning policy for vLLM: from what the launches so far measured, the next setting to launch.

Pure (no I/O), the same interface as the SGLang policy (`Step`, `Move`, `next_move`, `best_step`):
`cockpit tune` launches, measures and asks `next_move` again. The moves, in order:

1. Memory: --gpu-memory-utilization is a fraction of the card's TOTAL memory T, so moving it by Δu
   moves Δu·T GiB between the KV cache and the free memory after start-up, one for one:
   Δu = (measured free after start-up − target) / T, rounded down to two decimals so the predicted
   headroom stays at or above the target. When the profile pins `--kv-cache-memory-bytes` (util is
   then ignored), the same ΔB moves the pinned bytes instead (rounded down to whole MiB).
2. --max-num-seqs: raised (doubled) when the running batch sits at the cap with the KV cache half
   empty and requests waiting.
3. --max-num-batched-tokens: raised (doubled) when prefill binds (requests wait, the KV cache is not
   the limit, the batch stays below the benchmark's concurrency and the seq cap). vLLM sizes the KV
   cache after a profile run of the largest step and leaves that peak A free, but a full step's
   run-time peak is larger (RUN_PEAK_FACTOR × A, assumed): the difference for the larger step is
   taken from the KV cache in the same move, and kept as a reserve on top of the target by later
   memory moves and by the choice of the best step.
4. CUDA graphs (--max-cudagraph-capture-size): raised when batches run above the largest captured
   size (eager), lowered when the KV cache binds while batches stay far below it (the graphs hold
   memory no batch uses; from 0.20 the graph estimate is inside the util budget, so the KV cache gets
   that memory back on the next launch; before, it shows as headroom and move 1 hands it over).

Graph growth is charged to the headroom in full (proportional to the largest size, a fixed share
never counted as freed), which is conservative with the estimate inside the budget. A move
predicted below the warn headroom is never proposed. A crash is not a move of this module: the
caller applies the vLLM diagnosis' advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cockpit.backends.base import FlagError
from cockpit.backends.tunepick import BaseStep, Move, meets_slo, objective_value, pick_best
from cockpit.backends.vllm.flags import canonical, default_util, human_bytes, version_key
from cockpit.backends.vllm.memory import UTIL_MAX, ceil2, default_max_num_seqs, floor2
from cockpit.core.numbers import as_float

GIB = 2**30
MIB = 2**20
UTIL_FLAG = "gpu-memory-utilization"
KV_BYTES_FLAG = "kv-cache-memory-bytes"
SEQS_FLAG = "max-num-seqs"
MBT_FLAG = "max-num-batched-tokens"
CAPTURE_FLAG = "max-cudagraph-capture-size"
MEMORY_FLAG = UTIL_FLAG  # what `cockpit tune` names a step by when no flag differs from the profile
TUNED_FLAGS = (UTIL_FLAG, KV_BYTES_FLAG, SEQS_FLAG, MBT_FLAG, CAPTURE_FLAG)
# the graph estimate is inside the util budget from 0.20 (shared/reference/vllm.md §4)
GRAPH_IN_BUDGET_SINCE = (0, 20, 0)
GRAPH_FIXED_SHARE = 0.2  # share of the graph pool assumed fixed: a smaller capture never frees more
BS_MARGIN = 1.25  # capture 25 % above the batch predicted
CAPTURE_MAX = 1024  # vLLM's ceiling (Blackwell data-centre cards); 512 elsewhere by default
KV_BINDS_USAGE = 0.85  # KV-cache usage at which the cache is the limit
# a full step's run-time peak over the profile run's (the profile run misses the sampler's and the
# allocator's share at run time); assumed, not measured: the simulator's model has 2.1
RUN_PEAK_FACTOR = 2.5
TIE = 0.03  # throughput within 3 % of the best measured is a tie (run-to-run spread on a busy host)


@dataclass(frozen=True)
class Step(BaseStep):
    """One launch as the tuner saw it, in vLLM's words. None: not measured."""

    total_gb: float | None = None  # T: the card's total memory (util is a fraction of it)
    activation_gb: float | None = None  # the profile run's peak activation A (left free after start-up)
    max_num_seqs: int | None = None  # as vLLM resolved it
    max_num_batched_tokens: int | None = None
    capture_size: int | None = None  # the largest CUDA-graph batch; 0 with --enforce-eager


def _num(flags: dict[str, Any], key: str) -> float | None:
    v = flags.get(key)
    if key == KV_BYTES_FLAG and isinstance(v, str):  # "20G" as vLLM reads a byte count
        try:
            return float(human_bytes(v))
        except ValueError:
            return None
    return as_float(v)


def _version(text: str | None) -> tuple[int, ...]:
    try:
        return version_key(text or "")
    except (ValueError, FlagError):
        return ()


def default_max_num_batched_tokens(total_gb: float | None) -> int | None:
    """vLLM's API-server default (shared/reference/vllm.md §5): 16384 on ≥ 160 GiB cards, 8192 on
    ≥ 70 GiB, else 2048; None when the card is unknown."""
    if total_gb is None:
        return None
    return 16384 if total_gb >= 160 else 8192 if total_gb >= 70 else 2048


def step_facts(state: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """The vLLM-specific fields of a Step from a run's state and launched flags (for `cockpit tune`).
    Settings the flags leave to vLLM are resolved by its rules from the card's size; unknown stays None."""
    ranks = list(getattr(state, "ranks", {}).values())
    totals = [r.total_gb for r in ranks if r.total_gb]
    pre = [r.pre_load_avail_gb for r in ranks if r.pre_load_avail_gb is not None]
    graphs = [r.figures["cudagraph_gb"] for r in ranks if "cudagraph_gb" in r.figures]
    acts = [r.figures["peak_activation_gb"] for r in ranks if "peak_activation_gb" in r.figures]
    total = min(totals) if totals else None
    seqs = _num(flags, SEQS_FLAG)
    seqs_i = int(seqs) if seqs else default_max_num_seqs(total)
    mbt = _num(flags, MBT_FLAG)
    cap = _num(flags, CAPTURE_FLAG)
    if flags.get("enforce-eager") is True:
        capture: int | None = 0
    elif cap:
        capture = int(cap)
    else:
        capture = min(seqs_i * 2, 512) if seqs_i else None
    return {"total_gb": total, "pre_load_avail_gb": min(pre) if pre else None, "graph_gb": max(graphs) if graphs else None,
            "activation_gb": max(acts) if acts else None, "max_num_seqs": seqs_i,
            "max_num_batched_tokens": int(mbt) if mbt else default_max_num_batched_tokens(total),
            "capture_size": capture}


def round_capture(n: float) -> int:
    """A capture size on vLLM's default ladder: multiples of 8 up to 256, of 16 above."""
    step = 8 if n <= 256 else 16
    return max(8, int(math.ceil(n / step) * step))


def _graph_after(graph_gb: float, size_old: int, size_new: int) -> float:
    fixed = GRAPH_FIXED_SHARE * graph_gb
    return fixed + (graph_gb - fixed) * size_new / max(1, size_old)


def reserve_gb(s: Step, history: list[Step]) -> float:
    """Headroom a step needs above the target for its larger --max-num-batched-tokens: the run-time
    peak's growth beyond the profile run's, against the smallest step launched in the session."""
    steps = [x.max_num_batched_tokens for x in history if x.max_num_batched_tokens] + \
        ([s.max_num_batched_tokens] if s.max_num_batched_tokens else [])
    if not s.max_num_batched_tokens or not s.activation_gb or not steps:
        return 0.0
    ref = min(steps)
    return (RUN_PEAK_FACTOR - 1.0) * s.activation_gb * max(0.0, 1.0 - ref / s.max_num_batched_tokens)


def util_of(s: Step) -> float | None:
    """The util a step ran with: the flag, or vLLM's default for its version."""
    u = _num(s.flags, UTIL_FLAG)
    return u if u is not None else default_util(s.version if _version(s.version) else None)


def util_for(s: Step, target: float) -> float | None:
    """The highest two-decimal util whose predicted free memory after start-up keeps `target`."""
    u = util_of(s)
    if u is None or s.headroom_gb is None or not s.total_gb:
        return None
    return min(UTIL_MAX, floor2(u + (s.headroom_gb - target) / s.total_gb + 1e-9))


def kv_bytes_for(s: Step, target: float) -> int | None:
    """The pinned KV bytes that keep `target`: ΔB = measured free − target, rounded down to MiB."""
    b = _num(s.flags, KV_BYTES_FLAG)
    if b is None or s.headroom_gb is None:
        return None
    return math.floor((b + (s.headroom_gb - target) * GIB) / MIB + 1e-9) * MIB


def _tried(history: list[Step], flags: dict[str, Any]) -> bool:
    want = {k: _num(flags, k) for k in TUNED_FLAGS}
    return any({k: _num(s.flags, k) for k in TUNED_FLAGS} == want for s in history)


def _batch_cap(s: Step) -> float:
    """What bounds the running batch: --max-num-seqs, and the benchmark's concurrency when it is the
    server's only client (a batch above it means other clients share the server)."""
    caps = [float(s.max_num_seqs)] if s.max_num_seqs else []
    if s.concurrency and (s.peak_running or 0.0) <= s.concurrency:
        caps.append(float(s.concurrency))
    return min(caps) if caps else float("inf")


def kv_binds(s: Step) -> bool:
    """The KV cache limits the batch: nearly full, or requests wait while the batch stays below both
    the benchmark's concurrency and --max-num-seqs."""
    usage = s.peak_token_usage or 0.0
    if usage >= KV_BINDS_USAGE:
        return True
    caps = [float(x) for x in (s.concurrency, s.max_num_seqs) if x]
    room = min(caps) if caps else float("inf")
    return bool(s.peak_queue) and usage >= 0.4 and (s.peak_running or 0) < 0.9 * room


def capture_flag(version: str | None) -> str | None:
    """The flag that sets the largest captured batch in this version (None: not a single-int flag)."""
    try:
        return canonical("--" + CAPTURE_FLAG, version if _version(version) else None).name.lstrip("-")
    except FlagError:
        return None


def next_move(history: list[Step], base_flags: dict[str, Any], *, target: float, warn: float) -> Move | None:
    """The next setting to launch, or None when the measurements say nothing binds any more.
    `base_flags`: the profile's server flags (a move's overrides are relative to them)."""
    ready = [s for s in history if s.outcome == "ready" and s.headroom_gb is not None]
    if not ready:
        return None
    last = ready[-1]
    flags = dict(last.flags)
    h = last.headroom_gb
    assert h is not None
    keep = ceil2(target + reserve_gb(last, history))  # the larger step's run-time peak is kept on top of the target

    def move(changes: dict[str, Any], why: str, predicted: float | None) -> Move | None:
        if predicted is not None and predicted < warn:
            return None
        new = {**flags, **changes}
        if _tried(history, new):
            return None
        over = {k: v for k, v in new.items() if base_flags.get(k) != v}
        # rounded down: a prediction is never shown above what the arithmetic gives
        return Move(over, why, None if predicted is None else math.floor(predicted * 100 + 1e-6) / 100)

    # 1. memory toward the target
    pinned = _num(flags, KV_BYTES_FLAG)
    if pinned is not None:
        new_b = kv_bytes_for(last, keep)
        if new_b is not None and new_b > 0 and new_b != int(pinned) and not (new_b > pinned and last.output_tok_s is None):
            pred = h - (new_b - pinned) / GIB
            verb = "raise" if new_b > pinned else "lower"
            m = move({KV_BYTES_FLAG: new_b}, f"{verb} the pinned KV cache to {new_b / GIB:.2f} GiB, the most that keeps "
                     f"{keep:g} GiB free (measured {h:.2f} GiB free after start-up at {pinned / GIB:.2f} GiB)", pred)
            if m is not None:
                return m
    else:
        u = util_of(last)
        best = util_for(last, keep)
        if u is not None and best is not None and best > 0 and best != u \
                and not (best > u and last.output_tok_s is None):
            assert last.total_gb is not None
            pred = h - (best - u) * last.total_gb
            verb = "raise" if best > u else "lower"
            m = move({UTIL_FLAG: best}, f"{verb} --gpu-memory-utilization to the highest value that keeps {keep:g} GiB "
                     f"(measured {h:.2f} GiB free at {u:g}; Δu = ΔB / T with T = {last.total_gb:.2f} GiB)", pred)
            if m is not None:
                return m
    if last.output_tok_s is None:
        return None  # not benched (below the warn level): nothing more to learn from it
    running = last.peak_running or 0.0
    usage = last.peak_token_usage or 0.0
    # 2. --max-num-seqs
    seqs = last.max_num_seqs
    if seqs and running >= 0.95 * seqs and usage < 0.5 and last.peak_queue:
        new_seqs = seqs * 2
        cost = 0.0
        # an unpinned capture size follows max-num-seqs (min(2 × seqs, 512)): its graphs grow too
        if last.graph_gb and last.capture_size and _num(flags, CAPTURE_FLAG) is None:
            new_cap = min(new_seqs * 2, 512)
            cost = max(0.0, _graph_after(last.graph_gb, last.capture_size, new_cap) - last.graph_gb)
        m = move({SEQS_FLAG: new_seqs}, f"the batch sits at --max-num-seqs {seqs} with the KV cache {usage:.0%} used "
                 "and requests waiting", h - cost)
        if m is not None:
            return m
    # 3. --max-num-batched-tokens
    mbt = last.max_num_batched_tokens
    act = last.activation_gb
    if mbt and act and last.peak_queue and not kv_binds(last) and running < 0.9 * _batch_cap(last):
        new_mbt = mbt * 2
        # the profile run's peak, taken as proportional to the step (an over-estimate: part of it is
        # fixed); vLLM leaves it free after start-up, which the prediction does not count on
        grow = act * (new_mbt - mbt) / mbt
        extra = (RUN_PEAK_FACTOR - 1.0) * grow  # what the run-time peak needs beyond that
        changes: dict[str, Any] = {MBT_FLAG: new_mbt}
        if pinned is not None:
            new_b = math.floor((pinned - extra * GIB) / MIB) * MIB
            freed = (pinned - new_b) / GIB
            if new_b > 0:
                changes[KV_BYTES_FLAG] = new_b
        else:
            u = util_of(last)
            freed = 0.0
            if u is not None and last.total_gb:  # the card unknown: no arithmetic, no move
                u_new = floor2(u - extra / last.total_gb + 1e-9)
                freed = (u - u_new) * last.total_gb
                if u_new > 0:
                    changes[UTIL_FLAG] = u_new
        if len(changes) == 2:
            m = move(changes, f"prefill binds (requests wait, the KV cache is not full): --max-num-batched-tokens "
                     f"{mbt} → {new_mbt}, with {freed:.2f} GiB less KV cache for the larger step's run-time peak "
                     f"(profiled {act:.2f} GiB at {mbt}, assumed ×{RUN_PEAK_FACTOR:g} at run time)", h + freed)
            if m is not None:
                return m
    # 4. the largest CUDA-graph batch
    cap = last.capture_size
    flag = capture_flag(last.version)
    if cap and flag and last.graph_gb:
        if running > cap:
            new_cap = min(CAPTURE_MAX, round_capture(min(running, _batch_cap(last)) * BS_MARGIN))
            if new_cap > cap:
                cost = _graph_after(last.graph_gb, cap, new_cap) - last.graph_gb
                m = move({flag: new_cap}, f"batches of {running:.0f} run without CUDA graphs (largest captured {cap}): "
                         f"capture up to {new_cap} (≤ {cost:.2f} GiB more graph memory)", h - cost)
                if m is not None:
                    return m
        elif kv_binds(last) and running < 0.7 * cap:
            new_cap = round_capture(min(running * 2, _batch_cap(last)) * BS_MARGIN)
            if new_cap < cap:
                freed = last.graph_gb - _graph_after(last.graph_gb, cap, new_cap)
                where = "the KV cache gets it back within the util budget" \
                    if _version(last.version) >= GRAPH_IN_BUDGET_SINCE else "the memory move hands it to the KV cache next"
                m = move({flag: new_cap}, f"the KV cache binds (usage {usage:.2f}) while batches peak at {running:.0f} "
                         f"of {cap} captured: capture up to {new_cap}, freeing ~{freed:.2f} GiB of graph memory "
                         f"({where})", h)
                if m is not None:
                    return m
    return None


def best_step(history: list[Step], objective: str, slo: dict[str, float], target: float,
              tie: float = TIE) -> Step | None:
    """The best benched step that kept the headroom target and the SLO; a near tie (within `tie`)
    goes to the larger KV cache, then to the later step."""
    ok = [s for s in history if s.outcome == "ready" and s.headroom_gb is not None
          and s.headroom_gb >= target + reserve_gb(s, history) - 1e-9
          and objective_value(s, objective) is not None and meets_slo(s, slo)]
    return pick_best(ok, history, objective, tie)
