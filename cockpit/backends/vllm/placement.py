"""Where vLLM puts its ranks, and the rank of a log line as shown.

vLLM's multiproc executor numbers a node's workers `pp·TP + tp` (and `dp·PP·TP + …` for DP ranks
sharing one executor) and gives worker i the node-local CUDA device i, i.e. CUDA_VISIBLE_DEVICES[i]
when set. It does not set CUDA_VISIBLE_DEVICES per worker, so `GPU N` in an OOM is that index.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cockpit.backends.base import CONTINUATION
from cockpit.backends.common import flag_value
from cockpit.backends.vllm.logparse import rank_label_for

_TAG = re.compile(r"\b(DP|PP|TP)(\d+)\b")


def _sizes(flags: Mapping[str, Any]) -> tuple[int, int, int] | None:
    try:
        tp = int(flag_value(flags, "tensor-parallel-size", "tp", default=1))
        pp = int(flag_value(flags, "pipeline-parallel-size", "pp", default=1))
        dp = int(flag_value(flags, "data-parallel-size", "dp", default=1))
    except (TypeError, ValueError):
        return None
    return tp, pp, dp


def rank_gpu_map(
    ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    sizes = _sizes(flags)
    if sizes is None or not hosts:
        return out
    tp, pp, dp = sizes
    nnodes = len(hosts)
    per_node = max(1, (tp * pp * dp) // nnodes)
    visible: list[int] | None = None
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        try:
            visible = [int(x) for x in cvd.split(",") if x.strip()]
        except ValueError:
            visible = None
    for name in ranks:
        tags = {k: int(v) for k, v in _TAG.findall(name)}
        glob = tags.get("DP", 0) * pp * tp + tags.get("PP", 0) * tp + tags.get("TP", 0)
        node = min(glob // per_node, nnodes - 1)
        local = glob - node * per_node
        if visible is not None:
            if local >= len(visible):
                continue
            gpu = visible[local]
        else:
            gpu = local
        out[name] = (hosts[node], gpu)
    return out


def gpus_for_flags(hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
    sizes = _sizes(flags)
    if sizes is None:
        return set()
    tp, pp, dp = sizes
    names = []
    for d in range(dp):
        for p in range(pp):
            for t in range(tp):
                parts = ([f"DP{d}"] if dp > 1 else []) + ([f"PP{p}"] if pp > 1 else []) + [f"TP{t}"]
                names.append(" ".join(parts))
    return set(rank_gpu_map(names, hosts, flags, env).values())


_RECORD = re.compile(r"(?:\([^()]*? pid=\d+(?:, ip=[^)]*)?\) )*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d ")
_GROUPS = re.compile(r"^((?:\([^()]*? pid=\d+(?:, ip=[^)]*)?\) )+)")
_ONE = re.compile(r"\(([^()]*?) pid=\d+")


@functools.lru_cache(maxsize=4096)
def _label_of(groups: str) -> str:

    label = ""
    for g in _ONE.finditer(groups):
        lab, role = rank_label_for(g.group(1).strip())
        if role == "worker" and lab:
            label = lab
    return label


def record_rank(line: str) -> str | None:
    """"TP3" for a worker's record, "" for the API server's or EngineCore's, CONTINUATION for a
    line that continues a record (bare traceback text, tqdm, uvicorn in 0.31+)."""
    g = _GROUPS.match(line)
    if g is not None:
        return _label_of(g.group(1))
    if _RECORD.match(line):
        return ""
    return CONTINUATION
