"""Preflight: what can be known to be wrong with a profile before anything is launched.

Pure: the caller measures the hosts (cockpit/hostfacts.py locally, the agent over SSH) and passes
`HostFacts`; what-if values (`cockpit check --host-mem-gb`) arrive the same way.

Invalid flags are not findings: `preflight` raises FlagError (naming the profile file and key),
because a profile SGLang would refuse is bad input (exit 2), not a risk to weigh.

Finding ids:

| id | severity | when |
|---|---|---|
| `hicache_host_memory` | critical | ranks_per_node × --hicache-size + reserves > host RAM available |
| `hicache_fits` | ok | the HiCache host pools fit, with the arithmetic |
| `hicache_ratio_unchecked` | info | HiCache sized by ratio: its host RAM depends on the KV pool, checked after launch |
| `hicache_smaller_than_device` | critical (0.5.9) / warning (0.5.23) | after the memory plan (`after_plan`): the host pool per rank is no larger than the device KV pool (hicache.py) |
| `gpu_count` | critical | the node has fewer GPUs than ranks per node |
| `gpus_idle` | info | the node has more GPUs than the run uses |
| `parallel_layout` | critical | tp·pp·dp does not split evenly over the nodes, nnodes ≠ hosts, ep/attn-dp do not divide tp |
| `mem_fraction_range` | critical / warning | mfs of 1 (outside (0, 1] the flag's bounds refuse it: exit 2) / above 0.95 (almost nothing left for activations) |
| `default_mem_fraction` | info | mfs unset: what SGLang will pick on this GPU size (§4.1) |
| `host_facts_unknown` | info | a host could not be measured, so host checks were skipped for it |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang import hicache
from cockpit.backends.sglang.command import effective_flags
from cockpit.backends.sglang.flags import resolve_version
from cockpit.backends.sglang.memory import default_mfs, hicache_budget
from cockpit.backends.sglang.rulecontext import ranks_per_node
from cockpit.core.findings import Finding, FlagChange, sort_findings
from cockpit.core.numbers import as_int, plural
from cockpit.core.profile import Profile

MFS_HIGH = 0.95


def _int(v: Any, default: int) -> int:
    n = as_int(v)
    return default if n is None else n


def preflight(profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None) -> list[Finding]:
    """Every finding for launching `profile` on `hosts` (one HostFacts per profile host, in order)."""
    v = resolve_version(version or profile.version)
    flags = {dest: val for dest, (_spec, val) in effective_flags(profile, version=v).items()}
    facts = list(hosts)
    findings: list[Finding] = []
    nnodes = _int(flags.get("nnodes"), len(profile.hosts))
    n_per_node = ranks_per_node(flags, nnodes)
    findings += _layout(profile, flags, nnodes)
    findings += _mfs(flags, facts, v)
    for h in facts:
        if h.source == "unknown" and h.mem_available_gb is None and h.gpu_count is None:
            findings.append(Finding("host_facts_unknown", "info",
                                    f"{h.host}: host memory and GPUs were not measured; host checks skipped for it."))
            continue
        findings += _gpus(h, n_per_node)
        findings += _hicache(profile, flags, h, n_per_node)
    return sort_findings(findings)


def after_plan(profile: Profile, plan: Any) -> list[Finding]:
    """The rules that need the memory plan's device KV pool per rank (run by the gate once the plan
    is made): a HiCache host pool no larger than it (hicache.py)."""
    v = resolve_version(getattr(plan, "version", None) or profile.version)
    flags = {dest: val for dest, (_spec, val) in effective_flags(profile, version=v).items()}
    cur = getattr(plan, "current", None)
    return hicache.after_plan(flags, cur.max_total_num_tokens if cur is not None else None,
                              getattr(plan, "kv_bytes_per_token", None), v)


def _layout(profile: Profile, flags: dict[str, Any], nnodes: int) -> list[Finding]:
    out: list[Finding] = []
    tp = _int(flags.get("tp_size"), 1)
    pp = _int(flags.get("pp_size"), 1)
    dp = _int(flags.get("dp_size"), 1)
    dp_inside = bool(flags.get("enable_dp_attention") or flags.get("attn_dp_size"))
    world = tp * pp * (1 if dp_inside else dp)
    if nnodes != len(profile.hosts):
        out.append(Finding("parallel_layout", "critical",
                           f"--nnodes {nnodes} but the profile lists {plural(len(profile.hosts), 'host')}; they must match."))
    if world % nnodes:
        out.append(Finding("parallel_layout", "critical",
                           f"{world} GPU processes (tp {tp} × pp {pp}{'' if dp_inside else f' × dp {dp}'}) do not split "
                           f"evenly over {nnodes} nodes."))
    ep = _int(flags.get("ep_size"), 1)
    if ep > 1 and tp % ep:
        out.append(Finding("parallel_layout", "critical", f"--ep-size {ep} must divide --tp-size {tp}."))
    adp = _int(flags.get("attn_dp_size"), 0) or (dp if flags.get("enable_dp_attention") else 0)
    if adp > 1 and tp % adp:
        out.append(Finding("parallel_layout", "critical", f"attention DP size {adp} must divide --tp-size {tp}."))
    return out


def _mfs(flags: dict[str, Any], facts: list[HostFacts], version: str) -> list[Finding]:
    mfs = flags.get("mem_fraction_static")
    if mfs is not None:
        mfs = float(mfs)
        if not 0.0 < mfs < 1.0:
            return [Finding("mem_fraction_range", "critical",
                            f"--mem-fraction-static {mfs:g} must be between 0 and 1 (a fraction of the free GPU memory).")]
        if mfs > MFS_HIGH:
            return [Finding("mem_fraction_range", "warning",
                            f"--mem-fraction-static {mfs:g} leaves under {1 - mfs:.0%} of the GPU for activations and "
                            "CUDA graphs; expect low headroom after capture.",
                            (), (FlagChange("--mem-fraction-static", mfs, MFS_HIGH),))]
        return []
    sizes = [h.gpu_mem_total_gib for h in facts if h.gpu_mem_total_gib is not None]
    m_mib = min(sizes) * 1024 if sizes else None
    tp = _int(flags.get("tp_size"), 1)
    d = default_mfs(
        m_mib, version=version, tp=tp, pp=_int(flags.get("pp_size"), 1),
        attn_dp=_int(flags.get("attn_dp_size"), 0) or (_int(flags.get("dp_size"), 1) if flags.get("enable_dp_attention") else 1),
        chunked_prefill_size=flags.get("chunked_prefill_size"),
        cuda_graph_max_bs=flags.get("cuda_graph_max_bs") or flags.get("cuda_graph_max_bs_decode"),
        max_running_requests=flags.get("max_running_requests"),
        speculative_algorithm=flags.get("speculative_algorithm"),
    )
    where = f"{m_mib / 1024:g} GiB GPUs" if m_mib else "unknown GPU size"
    return [Finding("default_mem_fraction", "info",
                    f"--mem-fraction-static is unset: SGLang {version} will pick {d.mfs:g} on {where} "
                    f"(chunked prefill {d.chunked_prefill_size}, graph max bs {d.cuda_graph_max_bs}).",
                    (), (), {"mem_fraction_static": d.mfs}, d.arithmetic())]


def _gpus(h: HostFacts, n_per_node: int) -> list[Finding]:
    if h.gpu_count is None:
        return []
    if h.gpu_count < n_per_node:
        return [Finding("gpu_count", "critical",
                        f"{h.host}: the run needs {n_per_node} GPUs per node but {h.gpu_count} are visible.")]
    if h.gpu_count > n_per_node:
        return [Finding("gpus_idle", "info",
                        f"{h.host}: {h.gpu_count} GPUs visible, the run uses {n_per_node}.")]
    return []


def _hicache(profile: Profile, flags: dict[str, Any], h: HostFacts, n: int) -> list[Finding]:
    size = flags.get("hicache_size")
    if not flags.get("enable_hierarchical_cache"):
        return []
    if not size:
        return [Finding("hicache_ratio_unchecked", "info",
                        f"{h.host}: HiCache is sized by --hicache-ratio (× each rank's KV pool); the host need is "
                        "known only after the KV pool is; set --hicache-size to check it now.")]
    if h.mem_available_gb is None:
        return []
    reserve = profile.policy.host_reserve_gb
    b = hicache_budget(n, float(size), h.mem_available_gb, reserve)
    if b.fits:
        return [Finding("hicache_fits", "ok", f"{h.host}: HiCache fits: {b.arithmetic()}.", (), (),
                        {"host_gb": round(b.needed_gb, 1)}, b.arithmetic())]
    fit = b.max_size_gb
    msg = (f"{h.host}: --hicache-size is GB per rank, not a total: {b.arithmetic()}. "
           + (f"Use --hicache-size {fit}." if fit > 0 else "No HiCache host pool fits; turn HiCache off or free host RAM."))
    change = (FlagChange("--hicache-size", size, fit),) if fit > 0 else (FlagChange("--enable-hierarchical-cache", True, False),)
    return [Finding("hicache_host_memory", "critical", msg, (), change,
                    {"host_gb": round(hicache_budget(n, fit, h.mem_available_gb, reserve).needed_gb, 1), "hicache_size": fit}, b.arithmetic())]
