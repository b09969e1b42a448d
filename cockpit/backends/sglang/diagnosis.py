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
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cockpit.backends.base import FlagError, HostFacts
from cockpit.backends.sglang import hicache, memory
from cockpit.backends.sglang.flags import DEFAULT_VERSION, canonical, graph_max_bs_flag, version_key
from cockpit.backends.sglang.memory import (
    SGLANG_HICACHE_RESERVE_GB,
    MfsMove,
    ceil2,
    cell_bytes_observed,
    gpu_bucket,
    hicache_budget,
    kv_pool_gib,
    mfs_floor,
    plan_mfs_for_headroom,
)
from cockpit.backends.sglang.textutil import lazy
from cockpit.core.crashstory import killed_finding_words
from cockpit.core.findings import Finding, FlagChange, quoted, sort_findings
from cockpit.core.numbers import plural
from cockpit.core.state import HOST_CACHE_SMALL, RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile

DEFAULT_TARGET_HEADROOM_GB = 5.0
DEFAULT_WARN_HEADROOM_GB = 3.0
IMBALANCE_GB = 0.3  # a rank this far below its peers' median shares its GPU with something else
# When a crash happened mid-capture the graphs' size is unknown; Kimi-K2.5 TP8 captured 3.75 GiB.
GRAPH_GB_GUESS = 4.0
# Raise mfs this far past the floor 1 − A/P so the KV pool gets a useful size, not a sliver.
FLOOR_MARGIN = memory.FLOOR_MARGIN


# ---- context: the facts each rule reads, computed once --------------------------------------------


class _Ctx:
    def __init__(
        self, state: RunState, profile: Profile | None, hosts: list[HostFacts], target: float, warn: float
    ):
        self.state = state
        self.profile = profile
        self.hosts = hosts
        self.target = target
        self.warn = warn
        self.version = run_version(state, profile)
        # the profile's flags by dest, whatever spelling it used (`tp: 8` -> tp_size)
        self.profile_flags: dict[str, Any] = {}
        if profile is not None:
            for k, v in profile.server.items():
                try:
                    self.profile_flags[canonical(k, self.version).dest] = v
                except FlagError:
                    continue
        self.mfs = _mem_fraction_static(state)
        if self.mfs is None:
            pv = self.profile_flags.get("mem_fraction_static")
            self.mfs = float(pv) if isinstance(pv, (int, float)) and not isinstance(pv, bool) else None
        self.P = state.min_pre_load_avail_gb
        a_vals = [
            r.after_weights_avail_gb for r in state.ranks.values() if r.after_weights_avail_gb is not None
        ]
        self.A = min(a_vals) if a_vals else None
        self.headroom = state.min_headroom_gb
        self.worst = state.worst_rank
        self.tokens = state.max_total_num_tokens
        if self.tokens is None:
            toks = [r.kv_tokens for r in state.ranks.values() if r.kv_tokens is not None]
            self.tokens = min(toks) if toks else None
        self.mfs_inferred = False
        if self.mfs is None and self.P and self.A is not None:
            # SGLang chose mfs itself (flag unset, dump unresolved): KV = A − P·(1 − mfs) gives it back
            kvs = [r.kv_gb for r in state.ranks.values() if r.kv_gb]
            if kvs:
                self.mfs = round(1.0 - (self.A - min(kvs)) / self.P, 3)
                self.mfs_inferred = True
        self.cell = self._cell_bytes()

    def _cell_bytes(self) -> float | None:
        for r in self.state.ranks.values():
            c = cell_bytes_observed(r.kv_tokens, r.kv_gb)
            if c:
                return c
        # No K/V size line: derive the pool from A − P·(1 − mfs) and the token count.
        if self.tokens and self.P is not None and self.A is not None and self.mfs is not None:
            kv = kv_pool_gib(self.P, self.A, self.mfs)
            return cell_bytes_observed(self.tokens, kv)
        return None

    def flag(self, dest: str) -> Any:
        """A server flag's value: the log's server_args first, then the profile."""
        if dest in self.state.server_args:
            return self.state.server_args[dest]
        return self.profile_flags.get(dest)

    def spelled(self, name: str) -> str:
        try:
            return canonical(name, self.version).name
        except FlagError:
            return "--" + name.lstrip("-").replace("_", "-")

    def mfs_move(self, worst_free: float, target: float) -> MfsMove | None:
        if self.mfs is None or self.P is None or self.P <= 0:
            return None
        return plan_mfs_for_headroom(
            self.mfs,
            self.P,
            worst_free,
            target,
            tokens_now=self.tokens,
            cell_bytes=self.cell,
            after_weights_avail=self.A,
        )

    def lowering_alternatives(self) -> tuple[FlagChange, ...]:
        """Other ways to buy headroom: a smaller prefill chunk, a smaller decode-graph batch."""
        alts: list[FlagChange] = []
        cps = self.state.prefill_chunk_tokens or _as_int(self.flag("chunked_prefill_size"))
        if cps and cps > 0:
            alts.append(FlagChange("--chunked-prefill-size", cps, max(512, cps // 2)))
        gflag = graph_max_bs_flag(self.version)
        bs = _as_int(self.flag(gflag.lstrip("-").replace("-", "_")))
        if bs is None and gflag == "--cuda-graph-max-bs-decode":
            bs = _as_int(self.flag("cuda_graph_max_bs"))
        if bs is None and self.P:
            # unset: SGLang picked it by GPU size; the card is roughly P plus the CUDA context
            tp = _as_int(self.flag("tp_size")) or len(self.state.ranks) or 1
            bs = gpu_bucket((self.P + 1.5) * 1024, tp, self.version)[1]
            alts.append(FlagChange(gflag, None, max(1, bs // 2)))
        else:
            alts.append(FlagChange(gflag, bs, max(1, bs // 2) if bs else 128))
        return tuple(alts)


def _median(xs: list[float]) -> float:
    """statistics.median, without importing `statistics` (~10 ms of every `cockpit diagnose`:
    it pulls in fractions, decimal and random)."""
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def run_version(state: RunState, profile: Profile | None = None) -> str:
    """The SGLang version whose flag spellings apply: the log's format, the profile's, the default."""
    if state.format and state.format.startswith("sglang-"):
        v = state.format.removeprefix("sglang-")
        try:
            version_key(v)
            return v
        except FlagError:
            pass
    if profile is not None and profile.version:
        return profile.version
    return DEFAULT_VERSION


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _gb(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f} GiB"


def _mfs_finding(
    ctx: _Ctx,
    fid: str,
    severity: str,
    ranks: tuple[str, ...],
    lead: str,
    move: MfsMove | None,
    *,
    fallback_step: float = 0.03,
) -> Finding:
    """A finding whose advice is "lower --mem-fraction-static", with the numbers behind it.

    The change always lowers (to < from) and stays in the flag's domain above the startup floor;
    when no such value reaches the target the finding says so, and what would instead."""
    alts = ctx.lowering_alternatives()
    if move is None:
        if ctx.mfs is None:
            msg = f"{lead} Lower --mem-fraction-static (the log did not show its value or P), or shrink the prefill chunk / graph batch."
            return Finding(fid, severity, msg, ranks, (), {}, None, alts)
        new = round(ctx.mfs - fallback_step, 2)
        if new < memory.MFS_LOWEST:
            msg = (f"{lead} --mem-fraction-static is already {ctx.mfs:g}: no lower setting helps. What would: "
                   + _alts_words(alts) + ".")
            return Finding(fid, severity, msg, ranks, (), {}, None, alts)
        msg = (
            f"{lead} Lower --mem-fraction-static {ctx.mfs:g} → {new:g}; the log did not show P (free before weights) "
            "so the gain cannot be computed."
        )
        return Finding(
            fid, severity, msg, ranks, (FlagChange("--mem-fraction-static", ctx.mfs, new),), {}, None, alts
        )
    if not move.reachable:
        return _unreachable(ctx, fid, severity, ranks, lead, move, alts)
    predicted: dict[str, Any] = {"headroom_gb": round(move.headroom, 2)}
    if move.tokens_after is not None:
        predicted["max_total_num_tokens"] = move.tokens_after
    cost = ""
    if move.tokens_now is not None and move.tokens_after is not None:
        cost = f", costing {move.tokens_now - move.tokens_after:,} KV tokens ({move.tokens_now:,} → {move.tokens_after:,})"
    msg = (
        f"{lead} Lower --mem-fraction-static {move.mfs_old:g} → {move.mfs_new:g}: frees "
        f"{move.mfs_old - move.mfs_new:.2f} × P {move.pre_load_avail:.2f} = {(move.mfs_old - move.mfs_new) * move.pre_load_avail:.2f} GiB per GPU, "
        f"predicted headroom ≈ {move.headroom:.2f} GiB (target {move.target:g}){cost}."
    )
    if ctx.mfs_inferred:
        msg += f" (--mem-fraction-static was not set; SGLang's own choice, {move.mfs_old:g}, is inferred from A − KV = P·(1 − mfs).)"
    return Finding(
        fid,
        severity,
        msg,
        ranks,
        (FlagChange("--mem-fraction-static", move.mfs_old, move.mfs_new),),
        predicted,
        move.arithmetic(),
        alts,
    )


def _alts_words(alts: tuple[FlagChange, ...]) -> str:
    words = [f"{c.flag} {'unset' if c.from_value is None else c.from_value} → {c.to_value}" for c in alts]
    return "; ".join(words) if words else "more GPUs (higher TP) or a quantized model"


def _unreachable(ctx: _Ctx, fid: str, severity: str, ranks: tuple[str, ...], lead: str, move: MfsMove,
                 alts: tuple[FlagChange, ...]) -> Finding:
    """No --mem-fraction-static in the flag's domain reaches the target: say so, and what would."""
    if move.mfs_new >= move.mfs_old:
        why = (f"by the numbers the worst rank already had {move.worst_free:.2f} GiB for a {move.target:g} GiB need, "
               "so lowering --mem-fraction-static is not what this needs")
    else:
        lo = move.lowest_workable
        best = move.worst_free + (move.mfs_old - lo) * move.pre_load_avail if lo < move.mfs_old else move.worst_free
        floor = f"above the startup floor 1 − A/P = {move.floor:.3f}" if move.floor is not None else "in the flag's range"
        why = (f"reaching {move.target:g} GiB would take --mem-fraction-static {move.mfs_new:g}; the lowest value "
               f"{floor} is {lo:g}, which leaves ≈ {best:.2f} GiB: no setting reaches the target")
    msg = f"{lead} {why[0].upper()}{why[1:]}. What would: {_alts_words(alts)}, or more GPUs (higher TP)."
    return Finding(fid, severity, msg, ranks, (), {}, move.arithmetic(), alts)


# ---- rules ----------------------------------------------------------------------------------------


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


def _crash_findings(ctx: _Ctx) -> list[Finding]:
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
        return [_mfs_finding(ctx, "oom_crash", "critical", ranks, lead, move)]
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
        port = _as_int(ctx.flag("port")) or 30000
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


def _retraction_findings(ctx: _Ctx) -> list[Finding]:
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
    mrr = st.running_requests_cap or _as_int(ctx.flag("max_running_requests"))
    alts = (FlagChange("--max-running-requests", mrr, max(1, mrr // 2)),) if mrr and mrr > 1 else ()
    return [Finding("decode_retraction", "warning", msg, (), (), {}, None, alts)]


def _graph_capture_oom(ctx: _Ctx, ranks: tuple[str, ...], where: str, line: int) -> Finding:
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
    f = _mfs_finding(ctx, "graph_capture_oom", "critical", ranks, lead, move)
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


def _init_not_enough(ctx: _Ctx, ranks: tuple[str, ...], where: str, text: str) -> Finding:
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


def _engine_words(ctx: _Ctx, flag: str) -> str:
    """SGLang's own advice about `flag`, quoted as SGLang's."""
    said = [a for a in ctx.state.engine_advice if flag in a]
    if not said:
        return ""
    text = said[0].split("] ", 1)[1] if said[0].startswith("[") and "] " in said[0] else said[0]
    return f" SGLang's own advice: “{text.strip()[:200]}”."


def _kv_exhausted(ctx: _Ctx, ranks: tuple[str, ...], where: str, line: int) -> Finding:
    lead = (
        f"The KV pool ran out of tokens{where} (line {line}): "
        f"{ctx.tokens:,} tokens were not enough for the running requests."
        if ctx.tokens
        else f"The KV pool ran out of tokens{where} (line {line})."
    )
    mrr = ctx.state.running_requests_cap or _as_int(ctx.flag("max_running_requests"))
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


def ranks_per_node(flags: dict[str, Any], nnodes: int | None = None) -> int:
    """GPU processes per node: tp·pp (·dp unless DP attention runs inside TP) / nnodes."""
    tp = _as_int(flags.get("tp_size")) or 1
    pp = _as_int(flags.get("pp_size")) or 1
    dp = _as_int(flags.get("dp_size")) or 1
    if flags.get("enable_dp_attention") or flags.get("attn_dp_size"):
        dp = 1  # attention DP splits the TP group; it adds no GPUs
    n = nnodes or _as_int(flags.get("nnodes")) or 1
    return max(1, (tp * pp * dp) // n)


def _hicache_crash(ctx: _Ctx, kind: str, ranks: tuple[str, ...], where: str, message: str) -> Finding:
    flags = {**ctx.profile_flags, **ctx.state.server_args}
    size = ctx.state.host_cache_gb_per_rank or _as_float(flags.get("hicache_size"))
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


def _host_available_from_log(ctx: _Ctx, message: str, size: float, n: int) -> tuple[float, str] | None:
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


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _host_available(hosts: list[HostFacts]) -> float | None:
    vals = [h.mem_available_gb for h in hosts if h.mem_available_gb is not None]
    return min(vals) if vals else None


def _headroom_findings(ctx: _Ctx) -> list[Finding]:
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
        _mfs_finding(
            ctx,
            "low_headroom_after_graph_capture",
            severity,
            worst_ranks,
            lead,
            ctx.mfs_move(worst, ctx.target),
        )
    ]


def _imbalance_findings(ctx: _Ctx) -> list[Finding]:
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


def _kv_below_context(ctx: _Ctx) -> list[Finding]:
    st = ctx.state
    ctx_len = st.context_len or _as_int(ctx.flag("context_length"))
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
            (FlagChange("--context-length", _as_int(ctx.flag("context_length")), new_ctx),),
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
    ctx = _Ctx(state, profile, list(hosts), target, warn)
    findings: list[Finding] = []
    findings += _crash_findings(ctx)
    headroom = _headroom_findings(ctx)
    if state.crash is not None and state.crash.kind != "cuda_oom":
        # after an unrelated crash "headroom ok" would read as reassurance; keep only a warning
        headroom = [f for f in headroom if f.id != "headroom_ok"]
    findings += headroom
    findings += _imbalance_findings(ctx)
    findings += _kv_below_context(ctx)
    findings += _retraction_findings(ctx)
    return sort_findings(findings)


def _mem_fraction_static(state: RunState) -> float | None:
    """--mem-fraction-static as the log showed it (the dump, else a message that stated it); read
    here rather than through `RunState.memory_setting`, so a state built without the backend's
    words (a test's, the simulator's) still has it."""
    v = state.server_args.get("mem_fraction_static")
    if v is None:
        v = state.stated_flags.get("mem_fraction_static")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
