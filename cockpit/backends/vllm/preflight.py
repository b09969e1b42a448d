"""Preflight for vLLM profiles: what is known to be wrong before anything is launched.

Pure: the caller measures the hosts and passes `HostFacts`. A flag vLLM would refuse raises
FlagError (bad input, exit 2), as for SGLang.

| id | severity | when |
|---|---|---|
| `gpu_count` | critical | the node has fewer GPUs than tp·pp·dp per node |
| `gpus_idle` | info | the node has more GPUs than the run uses |
| `gpu_memory_utilization_range` | critical / warning | (outside (0, 1] the flag's bounds refuse it first: exit 2) / above 0.95 |
| `gpu_busy` | critical | a GPU's free memory is below util × total: start-up will refuse |
| `kv_cache_memory_pinned` | info | --kv-cache-memory-bytes is set: util no longer sizes the KV cache |
| `host_facts_unknown` | info | a host was not measured |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.backends.vllm.command import effective_flags
from cockpit.backends.vllm.flags import default_util, resolve_version
from cockpit.backends.vllm.memory import GIB, floor2
from cockpit.core.findings import Finding, FlagChange, sort_findings
from cockpit.core.profile import Profile

UTIL_HIGH = 0.95


def _int(v: Any, default: int) -> int:
    if isinstance(v, bool) or v is None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def gpus_per_node(flags: dict[str, Any], nnodes: int) -> int:
    tp = _int(flags.get("tensor_parallel_size"), 1)
    pp = _int(flags.get("pipeline_parallel_size"), 1)
    dp = _int(flags.get("data_parallel_size"), 1)
    return max(1, (tp * pp * dp) // max(1, nnodes))


def preflight(profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None) -> list[Finding]:
    v = resolve_version(version or profile.version)
    flags = {dest: val for dest, (_spec, val) in effective_flags(profile, version=v).items()}
    facts = list(hosts)
    out: list[Finding] = []
    util = flags.get("gpu_memory_utilization")
    util_v = float(util) if util is not None else default_util(v)
    if not 0 < util_v <= 1:
        out.append(Finding("gpu_memory_utilization_range", "critical",
                           f"--gpu-memory-utilization {util_v:g} is outside (0, 1]: vLLM refuses it."))
    elif util_v > UTIL_HIGH:
        out.append(Finding("gpu_memory_utilization_range", "warning",
                           f"--gpu-memory-utilization {util_v:g} leaves {(1 - util_v) * 100:.0f}% of each card for CUDA "
                           "context, NCCL buffers and graphs vLLM did not estimate: capture or the first big batch may OOM.",
                           (), (FlagChange("--gpu-memory-utilization", util_v, UTIL_HIGH),)))
    if flags.get("kv_cache_memory_bytes"):
        kvb = int(flags["kv_cache_memory_bytes"])
        out.append(Finding("kv_cache_memory_pinned", "info",
                           f"--kv-cache-memory-bytes {kvb} ({kvb / GIB:.2f} GiB per GPU) sizes the KV cache; "
                           "--gpu-memory-utilization no longer does."))
    n = gpus_per_node(flags, len(profile.hosts))
    for h in facts:
        if h.source == "unknown" and h.gpu_count is None and h.mem_available_gb is None:
            out.append(Finding("host_facts_unknown", "info", f"{h.host}: GPUs were not measured; GPU checks skipped for it."))
            continue
        if h.gpu_count is not None and h.gpu_count < n:
            out.append(Finding("gpu_count", "critical", f"{h.host}: {h.gpu_count} GPU(s), but the run needs {n} per node."))
        elif h.gpu_count is not None and h.gpu_count > n:
            out.append(Finding("gpus_idle", "info", f"{h.host}: {h.gpu_count} GPUs, the run uses {n}."))
        if h.gpu_mem_total_gib and not flags.get("kv_cache_memory_bytes"):
            need = util_v * h.gpu_mem_total_gib
            busy = [(i, f) for i, f in enumerate(h.gpu_free_gib[:n]) if f is not None and f < need]
            if busy:
                i, free = min(busy, key=lambda t: t[1])
                new = floor2(free / h.gpu_mem_total_gib - 0.005)
                out.append(Finding(
                    "gpu_busy", "critical",
                    f"{h.host}: GPU {i} has {free:.2f} GiB free, less than --gpu-memory-utilization {util_v:g} × "
                    f"{h.gpu_mem_total_gib:.2f} = {need:.2f} GiB: vLLM will refuse to start. Free the GPU, or LOWER "
                    f"--gpu-memory-utilization to {new:g}.",
                    (), (FlagChange("--gpu-memory-utilization", util_v, new),), {"budget_gb": round(new * h.gpu_mem_total_gib, 2)},
                ))
    return sort_findings(out)
