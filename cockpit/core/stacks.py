"""Stacks of a run's processes, grouped: ranks with identical stacks together, the odd one out named.

Input: the processes `cockpit stacks` collected (py-spy's frames, innermost first, per thread),
each with its role and rank from the engine's backend. A rank's stack is its main thread's (where
vLLM's workers and SGLang's schedulers run their loop). Two ranks are in the same group when their
stacks name the same functions in the same files (line numbers may differ a little between ranks
of the same loop, so they are left out of the comparison).

The odd one out: the only rank the kernel reports stopped (state T: SIGSTOP or a debugger), else,
among three or more ranks, the only rank alone in its group while another group holds several
("TP5 in all_reduce; 7 others elsewhere"). None when nothing singles one out. (Rank 0 often does
other work than the rest, SGLang's TP0 receives the requests: a stopped rank beside it is still
the one named.)
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

RANKED_ROLES = ("worker", "scheduler")


def main_frames(proc: dict[str, Any]) -> list[dict[str, Any]]:
    threads = proc.get("threads") or []
    main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
    return list(main.get("frames") or []) if main else []


def where(frames: list[dict[str, Any]]) -> str:
    """The innermost frame in words: "all_reduce (parallel_state.py:512)"."""
    if not frames:
        return "no Python frames"
    f = frames[0]
    file = str(f.get("file") or "?").rsplit("/", 1)[-1]
    return f"{f.get('function')} ({file}:{f.get('line')})"


def _key(frames: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(f.get("function")), str(f.get("file"))) for f in frames)


def _label(p: dict[str, Any]) -> str:
    who = p.get("rank") or f"{p.get('name') or '?'} pid {p.get('pid')}"  # no rank in the title: the pid tells them apart
    return f"{p['node']} {who}" if p.get("multi_node") else str(who)


def group(processes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(groups, odd_one_out) over the ranked processes that py-spy could read."""
    ranked = [p for p in processes if p.get("role") in RANKED_ROLES and not p.get("error")]
    by_key: dict[tuple[tuple[str, str], ...], list[dict[str, Any]]] = {}
    for p in ranked:
        by_key.setdefault(_key(p["frames"]), []).append(p)
    groups: list[dict[str, Any]] = [
        {"top_frame": where(members[0]["frames"]), "count": len(members), "ranks": [_label(m) for m in members],
         "pids": [m["pid"] for m in members], "states": sorted({str(m.get("state")) for m in members})}
        for members in sorted(by_key.values(), key=lambda ms: (-len(ms), _label(ms[0])))
    ]
    odd: dict[str, Any] | None = None
    stopped = [p for p in ranked if p.get("state") == "T"]
    singles = [g for g in groups if g["count"] == 1]
    if len(stopped) == 1 and len(ranked) >= 2:  # the kernel's word first: a stopped rank stops the rest
        p = stopped[0]
        odd = {"rank": _label(p), "pid": p["pid"], "top_frame": where(p["frames"]),
               "reason": f"{_label(p)} is stopped (state T: SIGSTOP or a debugger) in {where(p['frames'])}"}
    elif len(ranked) >= 3 and len(singles) == 1 and any(g["count"] > 1 for g in groups):
        g = singles[0]
        others = len(ranked) - 1
        odd = {"rank": g["ranks"][0], "pid": g["pids"][0], "top_frame": g["top_frame"],
               "reason": f"{g['ranks'][0]} in {g['top_frame']}; {others} others elsewhere"}
    return groups, odd
