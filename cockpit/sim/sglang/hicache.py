"""HiCache host-memory outcomes, decided the same way in every rank (no coordination needed).

0.5.9 checks each rank's request against the whole host's available memory minus 10 GiB, at the
moment that rank builds its pool. Ranks check a moment apart and pin their pools gradually, so a
request that is too big for the host on its own fails the check, while eight requests that each
fit pass and then oversubscribe the host: the kernel OOM-killer SIGKILLs one scheduler.
0.5.23 gives each rank ⌊(available − 10 GiB) / ranks per host⌋ and fails every rank fast.
"""

from __future__ import annotations

from dataclasses import dataclass

SGLANG_HOST_RESERVE_GB = 10 * 2**30 / 1e9  # SGLang keeps 10 GiB; host sizes are decimal GB
CHECK_STAGGER_S = 0.3  # ranks reach their pool init this far apart (simulated seconds)
PIN_GB_PER_S = 10.0  # how fast pinned host memory is allocated and touched


@dataclass(frozen=True)
class HiCachePlan:
    fail_rank: int | None = None  # the first rank whose check fails
    fail_at: float = 0.0  # seconds after the pool phase began
    fail_free_gb: float = 0.0  # what that rank's message says it has free
    victim: int | None = None  # the rank the OOM-killer SIGKILLs
    oom_at: float = 0.0
    size_gb: float = 0.0

    def check_at(self, rank: int) -> float:
        return rank * CHECK_STAGGER_S

    def pinned_at(self, rank: int) -> float:
        return self.check_at(rank) + self.size_gb / PIN_GB_PER_S


def plan(version: str, ranks: int, size_gb: float, host_gb: float) -> HiCachePlan:
    if version == "0.5.23":
        budget = (host_gb - SGLANG_HOST_RESERVE_GB) / max(1, ranks)
        budget = max(0.0, int(budget * 100) / 100)
        if size_gb > budget:
            return HiCachePlan(fail_rank=0, fail_at=0.0, fail_free_gb=budget, size_gb=size_gb)
        return HiCachePlan(size_gb=size_gb)

    checks = [k * CHECK_STAGGER_S for k in range(ranks)]

    def pinned(t: float, who: list[int]) -> float:
        return sum(min(size_gb, PIN_GB_PER_S * (t - checks[j])) for j in who if t > checks[j])

    passed: list[int] = []
    fail: tuple[int, float] | None = None
    for k in range(ranks):
        free = host_gb - pinned(checks[k], passed) - SGLANG_HOST_RESERVE_GB
        if size_gb > free:
            fail = (k, free)
            break
        passed.append(k)
    # when do the passed ranks together exhaust the host?
    oom_at: float | None = None
    if passed:
        end = checks[passed[-1]] + size_gb / PIN_GB_PER_S
        t = 0.0
        while t <= end + 1e-9:
            if pinned(t, passed) > host_gb:
                oom_at = t
                break
            t += 0.01
    if fail is not None and (oom_at is None or checks[fail[0]] <= oom_at):
        return HiCachePlan(fail_rank=fail[0], fail_at=checks[fail[0]], fail_free_gb=max(0.0, fail[1]), size_gb=size_gb)
    if oom_at is not None:
        # the OOM-killer picks the biggest process: the one that has pinned the most (ties: the last)
        best = max(passed, key=lambda j: (min(size_gb, PIN_GB_PER_S * (oom_at - checks[j])), j))
        return HiCachePlan(victim=best, oom_at=oom_at, size_gb=size_gb)
    return HiCachePlan(size_gb=size_gb)
