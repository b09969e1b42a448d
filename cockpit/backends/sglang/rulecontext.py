"""The facts each SGLang diagnosis rule reads, computed once per run (`Context`: the run's version,
flags, ranks' memory figures, the host, the headroom targets), and the finding they share: a change
of --mem-fraction-static reaching the target headroom, or why none can (`mfs_finding`).

Why a module of its own: the rules for crashes (crashrules.py) and for a run's memory health
(diagnosis.py) both read these; below both, neither imports the other's rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cockpit.backends.base import FlagError, HostFacts
from cockpit.backends.common import flags_by_dest
from cockpit.backends.sglang import memory
from cockpit.backends.sglang.flags import DEFAULT_VERSION, canonical, graph_max_bs_flag, version_key
from cockpit.backends.sglang.memory import (
    MfsMove,
    cell_bytes_observed,
    gpu_bucket,
    kv_pool_gib,
    plan_mfs_for_headroom,
)
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile


class Context:
    """The facts each rule reads, computed once per run."""

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
        self.profile_flags: dict[str, Any] = flags_by_dest(profile, canonical, self.version)
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
        cps = self.state.prefill_chunk_tokens or as_int(self.flag("chunked_prefill_size"))
        if cps and cps > 0:
            alts.append(FlagChange("--chunked-prefill-size", cps, max(512, cps // 2)))
        gflag = graph_max_bs_flag(self.version)
        bs = as_int(self.flag(gflag.lstrip("-").replace("-", "_")))
        if bs is None and gflag == "--cuda-graph-max-bs-decode":
            bs = as_int(self.flag("cuda_graph_max_bs"))
        if bs is None and self.P:
            # unset: SGLang picked it by GPU size; the card is roughly P plus the CUDA context
            tp = as_int(self.flag("tp_size")) or len(self.state.ranks) or 1
            bs = gpu_bucket((self.P + 1.5) * 1024, tp, self.version)[1]
            alts.append(FlagChange(gflag, None, max(1, bs // 2)))
        else:
            alts.append(FlagChange(gflag, bs, max(1, bs // 2) if bs else 128))
        return tuple(alts)


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


def as_int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _gb(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f} GiB"


def mfs_finding(
    ctx: Context,
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


def _unreachable(ctx: Context, fid: str, severity: str, ranks: tuple[str, ...], lead: str, move: MfsMove,
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


def ranks_per_node(flags: dict[str, Any], nnodes: int | None = None) -> int:
    """GPU processes per node: tp·pp (·dp unless DP attention runs inside TP) / nnodes."""
    tp = as_int(flags.get("tp_size")) or 1
    pp = as_int(flags.get("pp_size")) or 1
    dp = as_int(flags.get("dp_size")) or 1
    if flags.get("enable_dp_attention") or flags.get("attn_dp_size"):
        dp = 1  # attention DP splits the TP group; it adds no GPUs
    n = nnodes or as_int(flags.get("nnodes")) or 1
    return max(1, (tp * pp * dp) // n)


def _mem_fraction_static(state: RunState) -> float | None:
    """--mem-fraction-static as the log showed it (the dump, else a message that stated it); read
    here rather than through `RunState.memory_setting`, so a state built without the backend's
    words (a test's, the simulator's) still has it."""
    v = state.server_args.get("mem_fraction_static")
    if v is None:
        v = state.stated_flags.get("mem_fraction_static")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
