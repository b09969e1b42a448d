"""The one order of rank labels, for every view that lists ranks (dashboard bars and timeline,
`status`, `diagnose`, `runs`, the JSON): data parallel, then pipeline stage, then tensor and
expert parallel rank, each by number. `DP1 TP10` comes after `DP1 TP9` and `DP0 TP15`.

Rank labels are what the log reader shows ("TP3", "DP1 PP0 TP3 EP3"); a label without a token
counts as 0 there, and other tokens (ATTN_CP, MOE_DP) order ties after those four.
"""

from __future__ import annotations

import functools
import re

ORDER = ("DP", "PP", "TP", "EP")
_TOKEN = re.compile(r"([A-Za-z_]+?)(\d+)\Z")


@functools.lru_cache(maxsize=1024)
def rank_sort_key(label: str | None) -> tuple[object, ...]:
    """Sort key of a rank label (None, the main process, sorts first)."""
    if not label:
        return ((-1,) * len(ORDER), ())
    known = dict.fromkeys(ORDER, 0)
    others: list[tuple[str, int]] = []
    for tok in label.split():
        m = _TOKEN.fullmatch(tok)
        if m is None:
            others.append((tok, -1))
        elif m.group(1) in known:
            known[m.group(1)] = int(m.group(2))
        else:
            others.append((m.group(1), int(m.group(2))))
    return (tuple(known[k] for k in ORDER), tuple(others))


def sorted_ranks(labels: list[str] | tuple[str, ...] | set[str]) -> list[str]:
    return sorted(labels, key=rank_sort_key)
