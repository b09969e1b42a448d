"""Diagnosis: a RunState (plus the profile and host facts, if known) -> findings with flag changes.

Pure: no I/O, no clocks. The TUI, `cockpit diagnose`, `cockpit status` and the supervisor's crash
handling all call `diagnose`, so an operator sees the same advice everywhere.

Finding ids (stable; scripts and the journal key on them):

| id | severity | when |
|---|---|---|
| `oom_crash` | critical | a CUDA OOM while serving (prefill/decode): lower mfs to reach the target headroom |
| `graph_capture_oom` | critical | OOM during CUDA-graph capture: lower mfs or the decode-graph max batch size |
| `init_not_enough_memory` | critical | "Not enough memory … increase --mem-fraction-static": RAISE mfs past 1 − A/P |
| `kv_pool_exhausted` | critical | the KV pool ran out of tokens at run time |
| `hicache_host_memory` | critical | the HiCache host pool did not fit in host RAM (per-rank size with the arithmetic) |
| `hicache_smaller_than_device` | critical | SGLang refused a HiCache host pool no larger than the device KV pool (hicache.py) |
| `host_oom_killed` | critical | the kernel OOM killer SIGKILLed a scheduler, with evidence (a kernel/Slurm OOM line, the cgroup's oom_kill counter) |
| `killed_by_signal` | critical | a process of the server was killed by signal 9 (SIGKILL) and nothing shows memory pressure: who sent it is named as unknown, no memory advice |
| `nccl_timeout` | critical | a collective timed out (a peer died, hung or the network stalled) |
| `port_in_use` | critical | the HTTP port was already taken |
| `warmup_failed` | critical | the warmup request failed after the model loaded |
| `nccl_error` | critical | NCCL failed otherwise than by a timeout (e.g. "unhandled system error" at init) |
| `watchdog_timeout` | critical | SGLang's own scheduler watchdog fired: a forward pass hung |
| `startup_error` | critical | a Python import/usage/config error before serving |
| `crash_unclassified` | critical | the server died and no known signature matched |
| `low_headroom_after_graph_capture` | critical < warn (3 GiB), warning < target (5 GiB) | free GPU memory after capture on the worst rank |
| `rank_memory_imbalance` | warning | one rank's P or headroom ≥ 0.3 GiB below its peers: another process on that GPU |
| `kv_pool_below_context` | warning | the KV pool holds fewer tokens than one full-context request |
| `decode_retraction` | warning | the KV pool filled during decode; SGLang retracted requests and carried on |
| `headroom_ok` | ok | headroom ≥ target on every rank |

Memory numbers are GiB, as SGLang prints them. Changes name flags as the run's version spells them.

Here: the entry point and the rules of a run's memory health (headroom, imbalance, the KV pool
against the context, retraction). A crash's rules are crashrules.py's; the facts every rule reads,
rulecontext.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang.crashrules import crash_findings
from cockpit.backends.sglang.rulecontext import Context, as_int, mfs_finding
from cockpit.core.findings import Finding, FlagChange, sort_findings
from cockpit.core.numbers import plural
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile

DEFAULT_TARGET_HEADROOM_GB = 5.0
DEFAULT_WARN_HEADROOM_GB = 3.0
IMBALANCE_GB = 0.3  # a rank this far below its peers' median shares its GPU with something else


def _median(xs: list[float]) -> float:
    """statistics.median, without importing `statistics` (~10 ms of every `cockpit diagnose`:
    it pulls in fractions, decimal and random)."""
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


# ---- rules ----------------------------------------------------------------------------------------


def _retraction_findings(ctx: Context) -> list[Finding]:
    """Decode retractions: SGLang survived a full KV pool by sending requests back to the queue."""
    st = ctx.state
    if not st.decode_retractions:
        return []
    usage = st.decode_retraction_usage
    close = f"; token usage was {usage:.2f} of the pool before it" if usage is not None else ""
    msg = (
        f"The KV pool filled during decode {plural(st.decode_retractions, 'time')} and SGLang retracted "
        f"{plural(st.retractions, 'request')} to carry on (not a crash){close}. Retracted requests restart their decode: "
        "latency suffers. A bigger pool (more --mem-fraction-static if the headroom allows, more GPUs) or fewer "
        "requests at once (--max-running-requests) stops it."
    )
    mrr = st.running_requests_cap or as_int(ctx.flag("max_running_requests"))
    alts = (FlagChange("--max-running-requests", mrr, max(1, mrr // 2)),) if mrr and mrr > 1 else ()
    return [Finding("decode_retraction", "warning", msg, (), (), {}, None, alts)]


def _headroom_findings(ctx: Context) -> list[Finding]:
    st = ctx.state
    after = {
        r.rank: r.avail_after_capture_gb for r in st.ranks.values() if r.avail_after_capture_gb is not None
    }
    if not after or ctx.headroom is None:
        return []
    worst = ctx.headroom
    worst_ranks = tuple(sorted((r for r, v in after.items() if v <= worst + 0.05), key=lambda r: after[r]))
    short = sum(1 for v in after.values() if v < ctx.target)
    if worst >= ctx.target:
        msg = (
            f"Headroom after graph capture is {worst:.2f} GiB on the worst rank ({ctx.worst}), at or above the "
            f"{ctx.target:g} GiB target on every rank."
        )
        return [Finding("headroom_ok", "ok", msg, (), (), {"headroom_gb": round(worst, 2)})]
    severity = "critical" if worst < ctx.warn else "warning"
    lead = (
        f"Only {worst:.2f} GiB free after CUDA-graph capture on {worst_ranks[0]} "
        f"({short} of {len(after)} ranks below the {ctx.target:g} GiB target, warn below {ctx.warn:g}): "
        "the first large prefill batch can run out of memory."
    )
    return [
        mfs_finding(
            ctx,
            "low_headroom_after_graph_capture",
            severity,
            worst_ranks,
            lead,
            ctx.mfs_move(worst, ctx.target),
        )
    ]


def _imbalance_findings(ctx: Context) -> list[Finding]:
    ranks = list(ctx.state.ranks.values())
    if len(ranks) < 2:
        return []
    out: list[Finding] = []
    for label, attr in (
        ("free before weights load", "pre_load_avail_gb"),
        ("free after graph capture", "avail_after_capture_gb"),
    ):
        vals = {r.rank: getattr(r, attr) for r in ranks if getattr(r, attr) is not None}
        if len(vals) < 2:
            continue
        low = []
        for name, v in vals.items():
            peers = [x for n, x in vals.items() if n != name]
            gap = _median(peers) - v
            if gap >= IMBALANCE_GB - 1e-9:
                low.append((name, gap, v))
        # If most ranks look "low", the spread is not one intruder; don't guess.
        if not low or len(low) > len(vals) // 2:
            continue
        low.sort(key=lambda t: -t[1])
        parts = [f"{n} {v:.2f} GiB ({g:.2f} below its peers)" for n, g, v in low]
        gpus = ", ".join(_gpu_of(n) for n, _, _ in low)
        msg = (
            f"{label.capitalize()}: {'; '.join(parts)}. Another process probably holds memory on {gpus}; "
            "the KV pool is sized from the smallest rank, so every rank loses that much."
        )
        out.append(
            Finding(
                "rank_memory_imbalance",
                "warning",
                msg,
                tuple(n for n, _, _ in low),
                (),
                {"gap_gb": round(low[0][1], 2)},
            )
        )
        break  # one finding: the earliest evidence is the clearest
    return out


def _gpu_of(rank: str) -> str:
    m = re.search(r"TP(\d+)", rank)
    return f"GPU {m.group(1)} (if devices map 1:1)" if m else f"the GPU of {rank}"


def _kv_below_context(ctx: Context) -> list[Finding]:
    st = ctx.state
    ctx_len = st.context_len or as_int(ctx.flag("context_length"))
    tokens = st.max_total_num_tokens
    if not ctx_len or not tokens or tokens >= ctx_len:
        return []
    # a whole number of KiB-tokens below the pool; a pool under 1,024 tokens (a test rig, a tiny
    # --max-total-tokens) is capped at the pool itself: 1,024 would still not fit
    new_ctx = tokens // 1024 * 1024 if tokens >= 1024 else tokens
    msg = (
        f"The KV pool holds {tokens:,} tokens, fewer than one request at the full context length {ctx_len:,}: "
        "a long request can never be scheduled. Give the pool more memory (higher --mem-fraction-static if the "
        "headroom allows, more GPUs) or cap --context-length."
    )
    return [
        Finding(
            "kv_pool_below_context",
            "warning",
            msg,
            (),
            (FlagChange("--context-length", as_int(ctx.flag("context_length")), new_ctx),),
        )
    ]


# ---- entry point ----------------------------------------------------------------------------------


def diagnose(
    state: RunState,
    profile: Profile | None = None,
    hosts: Iterable[HostFacts] = (),
    *,
    target_headroom_gb: float | None = None,
    warn_headroom_gb: float | None = None,
) -> list[Finding]:
    """Every finding for this run, most severe first."""
    target = target_headroom_gb
    if target is None:
        target = profile.policy.target_headroom_gb if profile is not None else DEFAULT_TARGET_HEADROOM_GB
    warn = warn_headroom_gb
    if warn is None:
        warn = profile.policy.warn_headroom_gb if profile is not None else DEFAULT_WARN_HEADROOM_GB
    warn = min(warn, target)
    ctx = Context(state, profile, list(hosts), target, warn)
    findings: list[Finding] = []
    findings += crash_findings(ctx)
    headroom = _headroom_findings(ctx)
    if state.crash is not None and state.crash.kind != "cuda_oom":
        # after an unrelated crash "headroom ok" would read as reassurance; keep only a warning
        headroom = [f for f in headroom if f.id != "headroom_ok"]
    findings += headroom
    findings += _imbalance_findings(ctx)
    findings += _kv_below_context(ctx)
    findings += _retraction_findings(ctx)
    return sort_findings(findings)


