"""SGLang's record prefix as the log shows it: `[2026-02-24 11:55:44 DP1 TP3] message`.

The rank label shown next to each line and used by the rank filter is the prefix's parallel-rank
tokens (DP, PP, ATTN_CP, MOE_DP, TP, EP + number), in the order SGLang prints them. Lines that are
not a record start (traceback text, tqdm bars, NCCL output) continue the previous record.
"""

from __future__ import annotations

import functools
import re

from cockpit.backends.base import CONTINUATION
from cockpit.backends.sglang.grammar import split_record

RANK_TOKEN_RE = re.compile(r"^(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+$")


@functools.lru_cache(maxsize=4096)
def _rank_label(prefix: str) -> str:
    # Every line repeats one of a few prefixes ("TP3", "DP1 TP3"): pick the rank tokens out once
    # per prefix, not once per line (this runs for every line shown, 20k+ a second).
    return " ".join(t for t in prefix.split() if RANK_TOKEN_RE.match(t))


@functools.lru_cache(maxsize=4096)
def _head_rank(head: str) -> str | None:
    ts, prefix, _msg = split_record(head + " x")
    return CONTINUATION if ts is None else _rank_label(prefix or "")


def record_rank(line: str) -> str | None:
    """"DP1 TP3" for a ranked record start, "" for a record without a rank, CONTINUATION (None)
    for a line that continues the previous record."""
    if not line.startswith("["):
        return CONTINUATION  # every record starts with its bracket: the common cheap answer
    close = line.find("]", 1, 200)
    if close != -1 and "[" not in line[1:close]:
        # a flood repeats one head ("[2026-02-24 12:00:00 TP0]") many times a second: read it once
        return _head_rank(line[: close + 1])
    ts, prefix, _msg = split_record(line)
    return CONTINUATION if ts is None else _rank_label(prefix or "")
