"""`cockpit stacks` and the dashboard's `S`: py-spy dumps of every process of a run on every
node, named the way the engine names them, grouped (cockpit/core/stacks.py) and saved with the run.

The processes are the run's process tree on each node, as its target finds them
(Target.process_tree: a host's recorded process group, session and tree; a Slurm job's step on
each of its nodes, from inside the allocation), each dumped by the host program's `tree`
operation (hoststacks.py); py-spy must be on the node already (PATH or the engine's venv).
Each dump is saved as JSON under `<data dir>/stacks/<profile>/<run id>/<UTC time>.json` and can be
read again with `cockpit stacks PROFILE --saved`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cockpit.core.sanitize import one_line
from cockpit.core.stacks import group, main_frames
from cockpit.locations import data_dir
from cockpit.remote.hostresults import NodeTree, StackRequest

PER_PROCESS_TIMEOUT_S = 20.0


def stacks_dir(profile: str, run_id: str) -> Path:

    return data_dir() / "stacks" / profile / run_id


async def collect(sup: Any, *, native: bool = False) -> dict[str, Any]:
    """Stacks of the supervisor's attached run on every node, grouped: the target's process tree
    (Target.process_tree) with each process's py-spy dump."""
    info = sup.run_info
    if info is None:
        raise ValueError("no run")
    trees: list[NodeTree] = await sup.process_tree(StackRequest(native=native, timeout=PER_PROCESS_TIMEOUT_S))
    multi = len(trees) > 1
    processes: list[dict[str, Any]] = []
    hints: list[str] = []
    node_errors: dict[str, str] = {}
    for tree in trees:
        if tree.error:
            node_errors[tree.node] = tree.error
        if tree.hint:
            hints.append(f"{tree.node}: {tree.hint}")
        for proc in tree.processes:
            role, rank = sup.backend.launch.process_role(proc.name, proc.pid == tree.server_pid)
            entry = {"node": tree.node, "pid": proc.pid, "ppid": proc.ppid, "name": proc.name,
                     "role": role, "rank": rank, "state": proc.state, "threads": [dict(t) for t in proc.threads],
                     "error": proc.error, "multi_node": multi}
            entry["frames"] = main_frames(entry)
            processes.append(entry)
    groups, odd = group(processes)
    for p in processes:
        p.pop("multi_node", None)
    return {"profile": sup.profile.name, "run_id": info.id, "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "native": native, "processes": processes, "groups": groups, "odd_one_out": odd,
            "hints": hints, "node_errors": node_errors}


def save(dump: dict[str, Any]) -> Path:
    d = stacks_dir(dump["profile"], dump["run_id"])
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / (dump["taken_at"].replace(":", "") + ".json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(dump, f, indent=1)
    return path


def saved(profile: str) -> list[Path]:
    """Saved dumps of a profile, newest last."""

    root = data_dir() / "stacks" / profile
    return sorted(root.glob("*/*.json"), key=lambda p: (p.stat().st_mtime, p.name)) if root.is_dir() else []


def render(dump: dict[str, Any]) -> list[str]:
    """The operator's text: the odd one out first, the groups, then every process's stack. Every
    value a host reported (names, frames, errors) is shown on its own line only: its control
    characters escaped (one_line), since a process can name itself anything."""
    out = [f"stacks of {_t(dump['profile'])} run {_t(dump['run_id'])} at {_t(dump['taken_at'])}"]
    odd = dump.get("odd_one_out")
    if odd:
        out.append(f"ODD ONE OUT: {_t(odd['reason'])} (pid {_t(odd['pid'])})")
    for g in dump.get("groups") or []:
        ranks = ", ".join(_t(r) for r in g["ranks"])
        out.append(f"  {g['count']} {'rank' if g['count'] == 1 else 'ranks'} in {_t(g['top_frame'])}: {ranks}")
    for h in dump.get("hints") or []:
        out.append(f"py-spy missing: {_t(h)}")
    for node, err in (dump.get("node_errors") or {}).items():
        out.append(f"{_t(node)}: {_t(err)}")
    for p in dump.get("processes") or []:
        rank = f" {_t(p['rank'])}" if p.get("rank") else ""
        out.append("")
        out.append(f"{_t(p['node'])} pid {_t(p['pid'])} {_t(p['name'])} ({_t(p['role'])}{rank}) state {_t(p.get('state'))}")
        if p.get("error"):
            out.append(f"    py-spy: {_t(p['error'])}")
        for t in p.get("threads") or []:
            out.append(f"  thread {_t(t.get('name'))} ({_t(t.get('id'))}){' active' if t.get('active') else ''}")
            for f in t.get("frames") or []:
                out.append(f"    {_t(f.get('function'))} ({_t(f.get('file'))}:{_t(f.get('line'))})")
    return out


def _t(value: object) -> str:
    return one_line(str(value))
