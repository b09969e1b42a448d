"""The SGLang diagnosis rules for a crash: which finding a crash's kind, phase and message make
(OOM in a forward or in graph capture, not enough memory at init, the KV pool or the HiCache host
pool exhausted, a kill, NCCL, the port, start-up errors), with the flag change that follows from the
log's numbers where one does.

Why a module of its own: a crash's rules are most of the diagnosis and read apart from the rules of
a run's memory health and the entry point (diagnosis.py); the facts both read are rulecontext.py's.
"""

from __future__ import annotations

import re
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang import hicache, memory
from cockpit.backends.sglang.flags import graph_max_bs_flag, version_key
from cockpit.backends.sglang.memory import (
    SGLANG_HICACHE_RESERVE_GB,
    ceil2,
    hicache_budget,
    kv_pool_gib,
    mfs_floor,
)
from cockpit.backends.sglang.rulecontext import Context, as_int, mfs_finding, ranks_per_node
from cockpit.backends.sglang.textutil import lazy
from cockpit.core.crashstory import killed_finding_words
from cockpit.core.findings import Finding, FlagChange, quoted
from cockpit.core.numbers import as_float
from cockpit.core.state import HOST_CACHE_SMALL

# When a crash happened mid-capture the graphs' size is unknown; Kimi-K2.5 TP8 captured 3.75 GiB.
GRAPH_GB_GUESS = 4.0


# Raise mfs this far past the floor 1 − A/P so the KV pool gets a useful size, not a sliver.
FLOOR_MARGIN = memory.FLOOR_MARGIN


# Crashes whose advice is words only (no flag value follows from the log's numbers).
_PLAIN_CRASHES = {
    "nccl_error": (
        "NCCL failed{where} (line {line}): {message}. This is not a timeout: NCCL could not set up or use its "
        "transport (network interfaces, shared memory, GPU peer access). Rerun with NCCL_DEBUG=INFO and read the "
        "first WARN; check NCCL_SOCKET_IFNAME / NCCL_IB_* and the container's --shm-size."
    ),
    "watchdog_timeout": (
        "SGLang's scheduler watchdog fired{where} (line {line}): a forward pass made no progress for "
        "--watchdog-timeout seconds (a hung kernel or collective, or a peer that stalled). The lines before it "
        "name the batch; raise --watchdog-timeout only if a step is legitimately that slow."
    ),
    "startup_error": (
        "The server failed before serving{where} (line {line}): “{message}”. A launch problem (a missing package, "
        "a wrong path or argument), not a memory one: fix what the message names; no memory flag helps."
    ),
}


def crash_findings(ctx: Context) -> list[Finding]:
    crash = ctx.state.crash
    if crash is None:
        return []
    ranks = (crash.rank,) if crash.rank else ()
    where = f" on {crash.rank}" if crash.rank else ""
    kind = crash.kind
    if kind == "cuda_oom":
        if ctx.headroom is not None:
            lead = (
                f"CUDA out of memory in {_phase_words(crash.phase)}{where} (line {crash.line}); after graph capture the worst rank "
                f"({ctx.worst}) had only {ctx.headroom:.2f} GiB free for activations."
            )
            move = ctx.mfs_move(ctx.headroom, ctx.target)
        else:
            lead = (f"CUDA out of memory in {_phase_words(crash.phase)}{where} (line {crash.line}); the headroom after "
                    "capture is not in the log.")
            move = None
        return [mfs_finding(ctx, "oom_crash", "critical", ranks, lead, move)]
    if kind == "graph_capture_oom":
        return [_graph_capture_oom(ctx, ranks, where, crash.line)]
    if kind == "init_not_enough_memory":
        return [_init_not_enough(ctx, ranks, where, crash.message + "\n" + "\n".join(crash.decisive_lines))]
    if kind == "kv_pool_exhausted":
        return [_kv_exhausted(ctx, ranks, where, crash.line)]
    if kind == "killed_by_signal":
        return [Finding(kind, "critical", killed_finding_words(crash, _killed_who(crash.message), where), ranks)]
    if kind in ("hicache_host_memory", "host_oom_killed"):
        return [_hicache_crash(ctx, kind, ranks, where, crash.message)]
    if kind == HOST_CACHE_SMALL:
        return [hicache.crash_finding(ctx.flag, ctx.tokens, ctx.cell, ctx.version, f"{where} (line {crash.line})", ranks)]
    if kind == "nccl_timeout":
        msg = (
            f"A NCCL collective timed out{where} (line {crash.line}): a peer rank died or hung first, or the "
            "network between nodes stalled. Look for the first rank that failed above this line; raise "
            "--dist-timeout only if a slow but healthy step is expected."
        )
        return [Finding("nccl_timeout", "critical", msg, ranks)]
    if kind in _PLAIN_CRASHES:
        return [Finding(kind, "critical", _PLAIN_CRASHES[kind].format(where=where, line=crash.line,
                                                                      message=quoted(crash.message, 200)), ranks)]
    if kind == "port_in_use":
        port = as_int(ctx.flag("port")) or 30000
        msg = (
            f"Port {port} is already in use (line {crash.line}): another server (perhaps an earlier run that did "
            f"not stop) is listening. Stop it, or move this run to another port."
        )
        return [Finding("port_in_use", "critical", msg, ranks, (FlagChange("--port", port, port + 1),))]
    if kind == "warmup_failed":
        msg = (
            f"The warmup request failed{where} (line {crash.line}) after the model loaded; the server never "
            "became ready. The decisive lines above say why; --skip-server-warmup only hides the problem."
        )
        return [
            Finding(
                "warmup_failed",
                "critical",
                msg,
                ranks,
                (),
                {},
                None,
                (FlagChange("--skip-server-warmup", False, True),),
            )
        ]
    msg = f"The server died{where} (line {crash.line}) with no known signature: {quoted(crash.message, 200)}."
    return [Finding("crash_unclassified", "critical", msg, ranks)]
_RX_SUBPROCESS = re.compile(r"Subprocess (\S+) \(pid=(\d+)\)")


def _killed_who(message: str) -> str:
    """Which process SGLang says died: `Subprocess scheduler_0 (pid=N) crashed …` (the launcher's
    watch, 0.5.23), `Rank 6 scheduler …`; the server itself when only its exit told."""
    m = _RX_SUBPROCESS.search(message or "")
    if m:
        return f"SGLang's {m.group(1)} (pid {m.group(2)})"
    if "scheduler" in (message or ""):
        return "A scheduler process"
    return "The server process"


def _phase_words(phase: str) -> str:
    return "an unknown phase" if phase == "unknown" else phase


def _graph_capture_oom(ctx: Context, ranks: tuple[str, ...], where: str, line: int) -> Finding:
    # The capture that failed is the last one each rank began (0.5.23 captures prefill graphs, then
    # decode graphs): its start is what it had, not the first capture's start.
    before = [b for r in ctx.state.ranks.values()
              if (b := r.avail_at_capture_begin_gb if r.avail_at_capture_begin_gb is not None
                  else r.avail_before_capture_gb) is not None]
    second = any(r.captures_done > 0 for r in ctx.state.ranks.values())
    graphs = [r.graph_gb for r in ctx.state.ranks.values() if r.graph_gb]
    graph_need = max(graphs) if graphs else GRAPH_GB_GUESS
    gflag = graph_max_bs_flag(ctx.version)
    lead = f"Out of memory while capturing CUDA graphs{where} (line {line})."
    move = None
    if before:
        worst_before = min(before)
        which = "the capture that failed began with" if second else "were free before capture"
        lead += (
            f" Only {worst_before:.2f} GiB {which}; graphs need about {graph_need:.2f} GiB"
            f"{'' if graphs else ' (a guess)'} and {ctx.target:g} GiB should stay free after."
        )
        move = ctx.mfs_move(worst_before, ctx.target + graph_need)
    f = mfs_finding(ctx, "graph_capture_oom", "critical", ranks, lead, move)
    alts = list(f.alternatives)
    if version_key(ctx.version) >= version_key("0.5.23"):
        alts.append(
            FlagChange("--cuda-graph-backend-prefill", ctx.flag("cuda_graph_backend_prefill"), "disabled")
        )
    msg = f.message + f" Or capture fewer graphs: {gflag} smaller."
    return Finding(f.id, f.severity, msg, f.ranks, f.changes, f.predicted, f.arithmetic, tuple(alts))


# compiled on first use (only a crash that prints SGLang's advice needs them): ~0.2 ms of every diagnose
_RAISE_ABOVE = lazy(r"Raise --mem-fraction-static above (\d+(?:\.\d+)?)")
_MIN_VIABLE = lazy(r"minimum viable = 1 - available/pre = (\d+(?:\.\d+)?)")


def _init_not_enough(ctx: Context, ranks: tuple[str, ...], where: str, text: str) -> Finding:
    """RAISE mfs past the floor 1 − A/P: SGLang's own bound when it printed one, else A and P."""
    fid = "init_not_enough_memory"
    floor: float | None = None
    m = _MIN_VIABLE.search(text) or _RAISE_ABOVE.search(text)
    if m:
        floor = float(m.group(1))
    elif ctx.A is not None and ctx.P:
        floor = mfs_floor(ctx.A, ctx.P)
    now = f"{ctx.mfs:g}" if ctx.mfs is not None else "unknown (not in the log)"
    lead = (
        f"Startup failed{where}: the weights left no GPU memory for the KV pool at --mem-fraction-static "
        f"{now}. This is the opposite of an OOM: RAISE --mem-fraction-static (lowering it makes this worse)."
    )
    quoted = _engine_words(ctx, "--mem-fraction-static")
    more = " What would: more GPUs (higher TP), a quantized model, or a shorter --context-length."
    if floor is None:
        if ctx.mfs is None:
            msg = (lead + " Neither its value nor P and A are in the log, so no value can be computed: raise it "
                   "above the value the server ran with." + quoted)
            return Finding(fid, "critical", msg, ranks)
        new = min(ceil2(ctx.mfs + 0.05), memory.MFS_HIGHEST)
        if new <= ctx.mfs:
            return Finding(fid, "critical", lead + f" It is already {ctx.mfs:g}: no higher setting is left." + more + quoted,
                           ranks)
        msg = lead + " P and A are not in the log, so the floor 1 − A/P is unknown; try a higher value." + quoted
        return Finding(fid, "critical", msg, ranks, (FlagChange("--mem-fraction-static", ctx.mfs, new),))
    new = ceil2(floor + FLOOR_MARGIN)
    if ctx.mfs is not None:
        new = max(new, ceil2(ctx.mfs + 0.01))
    above = _RAISE_ABOVE.search(text)
    if above:  # SGLang's own bound is a strict "above": never propose less, nor the bound itself
        new = max(new, round(memory.floor2(float(above.group(1))) + 0.01, 2))
    arith = f"floor 1 − A/P = {floor:.4f}; + margin {FLOOR_MARGIN} → {new:.2f} (rounded up)"
    if ctx.A is not None and ctx.P:
        arith = f"floor 1 − A/P = 1 − {ctx.A:.2f}/{ctx.P:.2f} = {floor:.4f}; + margin {FLOOR_MARGIN} → {new:.2f} (rounded up)"
    if new > memory.MFS_HIGHEST:
        msg = (lead + f" The minimum viable value is 1 − A/P = {floor:.3f}: no setting of --mem-fraction-static "
               "leaves room for a KV pool and activations." + more + quoted)
        return Finding(fid, "critical", msg, ranks, (), {}, arith)
    verb = "use" if ctx.mfs is not None else "set it to"
    msg = lead + f" The minimum viable value is 1 − A/P = {floor:.3f}; {verb} {new:g}."
    predicted: dict[str, Any] = {}
    if ctx.P and ctx.A is not None:
        predicted["kv_pool_gb"] = round(kv_pool_gib(ctx.P, ctx.A, new), 2)
    if new >= 0.96:
        msg += " That leaves almost nothing for activations: the model barely fits; add GPUs (more TP) or quantize."
    return Finding(fid, "critical", msg + quoted, ranks, (FlagChange("--mem-fraction-static", ctx.mfs, new),),
                   predicted, arith)


def _engine_words(ctx: Context, flag: str) -> str:
    """SGLang's own advice about `flag`, quoted as SGLang's."""
    said = [a for a in ctx.state.engine_advice if flag in a]
    if not said:
        return ""
    text = said[0].split("] ", 1)[1] if said[0].startswith("[") and "] " in said[0] else said[0]
    return f" SGLang's own advice: “{text.strip()[:200]}”."


def _kv_exhausted(ctx: Context, ranks: tuple[str, ...], where: str, line: int) -> Finding:
    lead = (
        f"The KV pool ran out of tokens{where} (line {line}): "
        f"{ctx.tokens:,} tokens were not enough for the running requests."
        if ctx.tokens
        else f"The KV pool ran out of tokens{where} (line {line})."
    )
    mrr = ctx.state.running_requests_cap or as_int(ctx.flag("max_running_requests"))
    alts: list[FlagChange] = []
    if mrr:
        alts.append(FlagChange("--max-running-requests", mrr, max(1, mrr // 2)))
    if ctx.headroom is not None and ctx.mfs is not None and ctx.P and ctx.headroom > ctx.target + 0.5:
        spare = ctx.headroom - ctx.target
        new = min(round(ctx.mfs + spare / ctx.P - 0.005, 2), memory.MFS_HIGHEST)
        if new > ctx.mfs:
            msg = (
                f"{lead} There is {ctx.headroom:.2f} GiB free after capture, {spare:.2f} GiB above the target: "
                f"raise --mem-fraction-static {ctx.mfs:g} → {new:g} to grow the pool, or admit fewer requests."
            )
            predicted = {"headroom_gb": round(ctx.headroom - (new - ctx.mfs) * ctx.P, 2)}
            return Finding(
                "kv_pool_exhausted",
                "critical",
                msg,
                ranks,
                (FlagChange("--mem-fraction-static", ctx.mfs, new),),
                predicted,
                None,
                tuple(alts),
            )
    msg = (
        f"{lead} The GPU has no spare memory for a bigger pool: admit fewer requests at once "
        "(--max-running-requests), enable HiCache, or add GPUs."
    )
    return Finding("kv_pool_exhausted", "critical", msg, ranks, tuple(alts[:1]), {}, None, ())


def _hicache_crash(ctx: Context, kind: str, ranks: tuple[str, ...], where: str, message: str) -> Finding:
    flags = {**ctx.profile_flags, **ctx.state.server_args}
    size = ctx.state.host_cache_gb_per_rank or as_float(flags.get("hicache_size"))
    hicache_on = bool(flags.get("enable_hierarchical_cache")) or bool(size)
    n = ranks_per_node(flags)
    gpus = next((h.gpu_count for h in ctx.hosts if h.gpu_count), None)
    if "tp_size" not in flags:
        if gpus:
            n = gpus  # the operator's what-if: one rank per GPU on this node
        else:
            # no server_args in this log: count the ranks it mentions (a lower bound)
            seen = [*ctx.state.ranks, *ctx.state.host_cache_allocating_ranks, *ranks]
            idx = [int(m.group(1)) for r in seen if (m := re.search(r"TP(\d+)", r))]
            n = max(n, len(set(seen)), (max(idx) + 1) if idx else 0)
    if kind == "host_oom_killed":
        crash = ctx.state.crash
        lead = (killed_finding_words(crash, _killed_who(crash.message), where) if crash is not None
                else f"The kernel OOM killer SIGKILLed a scheduler{where}.")
        if not hicache_on:
            msg = (
                lead
                + " HiCache is off; look for other memory users on the host (dataloaders, another server)."
            )
            return Finding("host_oom_killed", "critical", msg, ranks)
    else:
        lead = f"HiCache could not get its host memory{where}: {quoted(message, 160)}."
    lead += (
        f" --hicache-size is GB per rank: {n} ranks × {size:g} GB."
        if size
        else " --hicache-size is GB per rank."
    )
    avail = _host_available(ctx.hosts)
    reserve = ctx.profile.policy.host_reserve_gb if ctx.profile is not None else 40.0
    if avail is None and size:
        est = _host_available_from_log(ctx, message, size, n)
        if est is not None:
            avail, how = est
            lead += f" Host RAM available at launch, estimated from the log: {how}."
    if avail is None or not size:
        sglang_res = SGLANG_HICACHE_RESERVE_GB
        msg = lead + (
            " The host's available memory is not in the log, and it is what decides the size: give it with "
            "`cockpit diagnose LOG --host-mem-gb G --gpus N` (or run `cockpit check PROFILE` on the host), and the "
            f"per-rank size that fits is ⌊(G − {reserve:g} GB reserve − {sglang_res:.1f} GB SGLang reserve) / {n}⌋ GB."
        )
        return Finding(kind, "critical", msg, ranks)
    budget = hicache_budget(n, size, avail, reserve)
    fit = budget.max_size_gb
    if budget.fits:
        msg = (
            lead + f" By the numbers it should fit ({budget.arithmetic()}): something else on the host held "
            "memory at launch, or ranks per node is higher than this log shows."
        )
        return Finding(kind, "critical", msg, ranks, (), {}, budget.arithmetic())
    if fit < 1:
        msg = (lead + f" {budget.arithmetic()}: no --hicache-size fits on this host. What would: HiCache off, "
               "fewer ranks per node, or more free host memory.")
        return Finding(kind, "critical", msg, ranks, (), {}, budget.arithmetic(),
                       (FlagChange("--enable-hierarchical-cache", True, False),))
    msg = lead + f" {budget.arithmetic()}. Use --hicache-size {fit}."
    return Finding(
        kind,
        "critical",
        msg,
        ranks,
        (FlagChange("--hicache-size", size, fit),),
        {"host_gb": round(hicache_budget(n, fit, avail, reserve).needed_gb, 1)},
        budget.arithmetic(),
    )
_HOST_FREE = lazy(r"Requesting (?P<req>\d+(?:\.\d+)?) GB but only have (?P<free>\d+(?:\.\d+)?) GB free")


def _host_available_from_log(ctx: Context, message: str, size: float, n: int) -> tuple[float, str] | None:
    """Host RAM available before HiCache pinned anything, from SGLang's own refusal.

    0.5.23 reports each rank's share, (available − 10 GiB) / ranks, so available = share·n + 10 GiB.
    0.5.9 reports available − 10 GiB at the moment the failing rank checked, after the ranks that
    logged `Allocating …` had pinned theirs: add those back (an estimate: pinning is not instant).
    """
    crash = ctx.state.crash
    text = "\n".join([message, *(crash.decisive_lines if crash else [])])
    m = _HOST_FREE.search(text)
    if not m:
        return None
    free = float(m["free"])
    if version_key(ctx.version) >= version_key("0.5.23"):
        avail = free * n + SGLANG_HICACHE_RESERVE_GB
        return avail, f"{n} × {free:g} GB share + {SGLANG_HICACHE_RESERVE_GB:.1f} GB = {avail:.1f} GB"
    failing = crash.rank if crash else None
    pinned = [r for r in ctx.state.host_cache_allocating_ranks if r != failing]
    avail = free + SGLANG_HICACHE_RESERVE_GB + len(pinned) * size
    return avail, (
        f"{free:g} GB free + {SGLANG_HICACHE_RESERVE_GB:.1f} GB SGLang reserve + {len(pinned)} ranks × "
        f"{size:g} GB already pinned = {avail:.1f} GB"
    )


def _host_available(hosts: list[HostFacts]) -> float | None:
    vals = [h.mem_available_gb for h in hosts if h.mem_available_gb is not None]
    return min(vals) if vals else None
