"""Where SGLang puts its ranks: rank label → (host, GPU index), from the parallel-size flags.

SGLang numbers a node's GPU processes TP-major within a PP stage and takes node-local GPU i as
CUDA_VISIBLE_DEVICES[i] when set, else --base-gpu-id + i × --gpu-id-step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from cockpit.backends.common import flag_value

_TP = re.compile(r"\bTP(\d+)\b")
_PP = re.compile(r"\bPP(\d+)\b")


def _sizes(flags: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    try:
        tp = int(flag_value(flags, "tp-size", "tp", "tensor-parallel-size", default=1))
        pp = int(flag_value(flags, "pp-size", "pipeline-parallel-size", default=1))
        base = int(flag_value(flags, "base-gpu-id", default=0))
        step = int(flag_value(flags, "gpu-id-step", default=1))
    except (TypeError, ValueError):
        return None
    return tp, pp, base, step


def rank_gpu_map(
    ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, tuple[str, int]]:
    """Rank → (host, GPU index): node-local rank i is CUDA_VISIBLE_DEVICES[i] when set, else
    --base-gpu-id + i·step. Ranks whose GPU cannot be told (GPU UUIDs in CUDA_VISIBLE_DEVICES,
    fewer visible devices than ranks) are left out."""
    out: dict[str, tuple[str, int]] = {}
    sizes = _sizes(flags)
    if sizes is None or not hosts:
        return out
    tp, pp, base, step = sizes
    nnodes = len(hosts)
    per_node = max(1, (tp * pp) // nnodes)
    visible: list[int] | None = None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        try:
            visible = [int(x) for x in cvd.split(",") if x.strip()]
        except ValueError:
            visible = None  # GPU UUIDs: the index is unknown here
    for name in ranks:
        m_tp = _TP.search(name)
        m_pp = _PP.search(name)
        t = int(m_tp.group(1)) if m_tp else 0
        p = int(m_pp.group(1)) if m_pp else 0
        glob = p * tp + t
        node = min(glob // per_node, nnodes - 1)
        local = glob - node * per_node
        if visible is not None:
            if local >= len(visible):
                continue
            gpu = visible[local]
        else:
            gpu = base + local * step
        out[name] = (hosts[node], gpu)
    return out


def gpus_for_flags(hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
    """(host, GPU) pairs a run with these flags will use (before its log names any rank)."""
    sizes = _sizes(flags)
    if sizes is None:
        return set()
    tp, pp = sizes[0], sizes[1]
    names = [f"PP{p} TP{t}" if pp > 1 else f"TP{t}" for p in range(pp) for t in range(tp)]
    return set(rank_gpu_map(names, hosts, flags, env).values())
