"""HiCache's host pool against the device KV pool: the gate's rule once the memory plan knows the
pool, and the advice when a log shows SGLang refusing it (issue 40, finding 12).

Each rank builds its own host pool (sglang/srt/mem_cache/memory_pool_host.py, HostKVCache.__init__;
0.5.23: mem_cache/pool_host/base.py), in tokens:

    --hicache-size S > 0:  ⌊S·10⁹ / bytes per token⌋      (decimal GB, the rank's KV bytes per token)
    else:                  ⌊--hicache-ratio × device pool⌋  (the rank's device KV pool, in tokens)
    then one page more, page-aligned:  (n // page + 1) × page

and needs it larger than the device pool. 0.5.9 asserts it (`The host memory should be larger than
the device memory with the current protocol`), after the weights have loaded: a start-up lost.
0.5.23 only warns that the L2 cache is less effective. Releases between them were not checked: they
are taken to assert as 0.5.9 does. 0.5.23 with neither flag sizes the pool itself from the host's
memory (--hicache-host-memory-fraction): nothing to check before launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cockpit.backends.sglang.flags import version_key
from cockpit.core.findings import Finding, FlagChange

# SGLang 0.5.9's words (memory_pool_host.py), matched as they are printed
HOST_POOL_ASSERTION = "The host memory should be larger than the device memory with the current protocol"
WARNS_SINCE = "0.5.23"  # the first release checked that only warns
RATIO_DEFAULT = 2.0  # --hicache-ratio's default in 0.5.9, and 0.5.23's in cache mode
FINDING_ID = "hicache_smaller_than_device"


@dataclass(frozen=True)
class HostPool:
    host_tokens: int
    device_tokens: int
    sized_by: str  # "ratio" or "size"
    setting: float  # the ratio, or the size in GB
    arithmetic: str

    @property
    def too_small(self) -> bool:
        return self.host_tokens <= self.device_tokens


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def host_pool(flags: Mapping[str, Any], device_tokens: int, bytes_per_token: float, version: str) -> HostPool | None:
    """The host pool SGLang would build per rank, from flags by dest; None when HiCache is off or
    the pool is sized by 0.5.23 itself (neither flag)."""
    if not flags.get("enable_hierarchical_cache"):
        return None
    page = int(_number(flags.get("page_size")) or 1)
    size = _number(flags.get("hicache_size")) or 0.0
    if size > 0:
        if bytes_per_token <= 0:
            return None
        raw = int(size * 1e9 // bytes_per_token)
        how = f"⌊{size:g}·10⁹ B / {bytes_per_token:,.0f} B per token⌋ = {raw:,}"
        setting = size
    else:
        ratio = _number(flags.get("hicache_ratio"))
        if ratio is None:
            if version_key(version) >= version_key(WARNS_SINCE):
                return None  # 0.5.23 sizes it from the host's memory
            ratio = RATIO_DEFAULT
        raw = int(device_tokens * ratio)
        how = f"⌊{ratio:g} × {device_tokens:,}⌋ = {raw:,}"
        setting = ratio
    host = (raw // page + 1) * page
    sign = "≤" if host <= device_tokens else ">"
    arithmetic = (f"host pool per rank = {how} tokens, one page ({page}) more, aligned: {host:,} tokens {sign} "
                  f"device pool {device_tokens:,} tokens")
    return HostPool(host, device_tokens, "size" if size > 0 else "ratio", setting, arithmetic)


def least_size_gb(device_tokens: int, bytes_per_token: float, page: int = 1) -> int:
    """The smallest whole --hicache-size (GB) whose host pool is larger than the device pool."""
    gb = max(1, math.ceil(device_tokens * bytes_per_token / 1e9))
    while ((int(gb * 1e9 // bytes_per_token) // page + 1) * page) <= device_tokens:
        gb += 1
    return gb


def finding(pool: HostPool, flags: Mapping[str, Any], bytes_per_token: float, version: str, *,
            crashed: str | None = None, ranks: tuple[str, ...] = ()) -> Finding:
    """The finding for a pool no larger than the device's: before launch (`crashed` None), or for
    the log's assertion (`crashed`: where, e.g. " on TP0 (line 79)")."""
    asserts = version_key(version) < version_key(WARNS_SINCE)
    flag = "--hicache-size" if pool.sized_by == "size" else "--hicache-ratio"
    if pool.sized_by == "size":
        page = int(_number(flags.get("page_size")) or 1)
        change = FlagChange(flag, flags.get("hicache_size"), least_size_gb(pool.device_tokens, bytes_per_token, page))
        fix = (f"Use --hicache-size {change.to_value} (GB per rank; every rank of a host pins that much host RAM) "
               f"or turn HiCache off.")
        predicted: dict[str, Any] = {"hicache_size": change.to_value}
    else:
        change = FlagChange(flag, flags.get("hicache_ratio"), RATIO_DEFAULT)
        fix = f"Use --hicache-ratio {RATIO_DEFAULT:g} (SGLang's default; it must be above 1)."
        predicted = {}
    said = f"{flag} {pool.setting:g} makes each rank's HiCache host pool {pool.host_tokens:,} tokens, no larger than its " \
           f"device KV pool of {pool.device_tokens:,} tokens"
    if crashed is not None:
        msg = f"SGLang refused the HiCache host pool{crashed}: {said} (“{HOST_POOL_ASSERTION}”). {fix}"
    elif asserts:
        msg = (f"{said} (the memory plan's pool): SGLang {version} refuses it at start-up, after loading the weights "
               f"(“{HOST_POOL_ASSERTION}”). {fix}")
    else:
        msg = (f"{said} (the memory plan's pool): SGLang {version} starts, warning that the L2 cache effectiveness "
               f"is reduced (the host pool cannot hold what the device pool evicts). {fix}")
    severity = "critical" if asserts or crashed is not None else "warning"
    return Finding(FINDING_ID, severity, msg, ranks, (change,), predicted, pool.arithmetic)


def after_plan(flags: Mapping[str, Any], device_tokens: int | None, bytes_per_token: float | None,
               version: str) -> list[Finding]:
    """The gate's rule, with the memory plan's device pool per rank and KV bytes per token."""
    if not device_tokens or device_tokens <= 0 or not bytes_per_token:
        return []
    pool = host_pool(flags, device_tokens, bytes_per_token, version)
    if pool is None or not pool.too_small:
        return []
    return [finding(pool, flags, bytes_per_token, version)]


def crash_finding(flag: Callable[[str], Any], device_tokens: int | None, bytes_per_token: float | None,
                  version: str, where: str, ranks: tuple[str, ...]) -> Finding:
    """The advice for a log whose server refused its host pool (HOST_POOL_ASSERTION); `flag`
    reads a flag by dest (the log's server_args first), `where` says the rank and line."""
    flags = {d: flag(d) for d in ("hicache_size", "hicache_ratio", "page_size")}
    flags["enable_hierarchical_cache"] = True  # it died building the host pool: HiCache was on
    pool = host_pool(flags, device_tokens, bytes_per_token or 0.0, version) if device_tokens else None
    if pool is not None:
        return finding(pool, flags, bytes_per_token or 0.0, version, crashed=where, ranks=ranks)
    return Finding(FINDING_ID, "critical",
                   f"SGLang refused the HiCache host pool{where}: it is no larger than the device KV pool "
                   f"(“{HOST_POOL_ASSERTION}”); the log does not say the pool's size. Raise --hicache-ratio above 1 "
                   f"(SGLang's default is {RATIO_DEFAULT:g}), or --hicache-size above the device pool's GB per rank.",
                   ranks, (FlagChange("--hicache-ratio", flags.get("hicache_ratio"), RATIO_DEFAULT),))
