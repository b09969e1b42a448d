"""What `cockpit up` and `cockpit restart` share: the gate's verdict said in one set of words (the
per-rank arithmetic of a refused HiCache size reads the same from both), and the follow of a run
just launched to the wait condition (`--wait started|ready`, `--timeout`, `--json`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from cockpit.commands._support import render_findings, render_report, status_json
from cockpit.face import CockpitError, GateResult, NodeLog, Read, Supervisor, decisive_tail, read_log

STARTED_GRACE_S = 1.0  # a server that dies at once (bad flag, port in use) is a failure, not "started"
# after the hosts say the server has ended: how long the log follower may take to deliver its exit
# and last lines (the failed launch's report); it starts over the host's transport, seconds over SSH
EXIT_CATCH_UP_S = 15.0


def say_verdict(gate: GateResult, *, force: bool, verb: str) -> bool:
    """Say the gate's verdict on stderr; True when it refuses. A critical preflight finding refuses
    the launch; so does a memory plan predicted below the warn headroom (the crash it predicts
    costs a whole model load), unless --force. An unreadable model or unknown GPUs never block a
    launch: the plan is then only mentioned. `verb`: "launch" (`up`) or "restart"."""
    name = gate.profile.name
    verdict = gate.verdict(force=force)
    if verdict == "go":
        return False
    if verdict == "force":
        assert gate.plan is not None
        print(f"cockpit: {name}: {verb}ing anyway (--force): {gate.plan.message}", file=sys.stderr)
        return False
    print(f"cockpit: {name}: refused before {verb}:", file=sys.stderr)
    for line in render_findings(gate.findings if gate.preflight_refuses or gate.plan is None else [gate.plan]):
        print("  " + line, file=sys.stderr)
    if not gate.preflight_refuses:
        print(f"  hint: apply the change with --set, or {verb} anyway with --force", file=sys.stderr)
    return True


async def wait_started(sup: Any, grace: float, *, submitted: bool = False) -> bool:
    """`--wait started`: the server is alive after its first second. The log follower that reports
    an exit is a program started over the host's transport and may not be reading yet when that
    second ends (a server dead at 0.3 s then read as "started"): so the hosts are asked at the end
    of it, and a server found ended is waited for until the follower has its exit and last lines.
    A Slurm job only submitted has no server yet: nothing to ask. True when the server has ended."""
    if await sup.wait_until(lambda s: s.any_exited, grace):
        return True
    if submitted or not await sup.ended_on_hosts():
        return False
    await sup.wait_until(lambda s: s.any_exited, EXIT_CATCH_UP_S)
    return True


async def follow_launch(sup: Supervisor, args: argparse.Namespace, t0: float,
                        extra_json: dict[str, Any] | None = None) -> int:
    """Follow the run `sup` just launched until `args.wait` (`started`: it survived its first
    second; `ready`: the log says ready and node 0's readiness path answers 200), a crash, or
    `args.timeout`; print the outcome (`--json`: status's shape plus `waited`, `waited_s`), detach
    (the server keeps running) and return the exit code: 0, or 1 on a crash or a stop. A timeout
    raises CockpitError (exit 1) saying the server keeps running. `extra_json`: keys added to the JSON."""
    name = sup.profile.name
    runner = asyncio.create_task(sup.run())
    submitted = bool(getattr(sup.target.view(), "job_id", None))  # a Slurm job: no server to ask yet
    ended = False  # `started`: the hosts say the server has ended (wait_started)
    try:
        if args.wait == "ready":
            def done(s: Supervisor) -> bool:
                return s.is_ready() or s.state_phase in ("crashed", "stopped") or s.any_exited
            ok = await sup.wait_until(done, args.timeout)
        else:
            ended = await wait_started(sup, min(STARTED_GRACE_S, args.timeout), submitted=submitted)
            ok = True
        snap = sup.snapshot()
        failed_lines: list[str] = []
        if snap.state.phase in ("crashed", "stopped") or sup.any_exited or ended:

            failed_lines = failed_launch_lines(snap, await run_log_tail(sup))
    finally:
        await sup.close()
        runner.cancel()
        try:
            await runner
        except (asyncio.CancelledError, Exception):
            pass
    failed = snap.state.phase in ("crashed", "stopped") or sup.any_exited or ended
    if args.json:
        out = status_json(snap)
        out["waited"] = args.wait
        out["waited_s"] = round(time.monotonic() - t0, 1)
        out.update(extra_json or {})
        print(json.dumps(out, indent=2))
    if failed:
        if not args.json:
            print(render_report(snap), file=sys.stderr)
        for line in failed_lines:
            print(line, file=sys.stderr)
        return 1
    if not ok:
        raise CockpitError(
            f"{name}: not ready after {args.timeout:g} s (phase {snap.state.phase}, health {snap.health or 'not probed'})",
            hint=f"the server keeps running: `cockpit status {name}`, `cockpit logs {name} -f`",
        )
    if not args.json:
        if args.wait == "ready":
            print(f"{name}: READY after {time.monotonic() - t0:.1f} s (log + {snap.readiness.split('+')[-1].strip()} {snap.health})")
        else:
            print(f"{name}: started")
    return 0


async def run_log_tail(sup: Any, n: int = 40) -> list[str]:
    """The last `n` lines of the run's log on each node (prefixed with the host on a multi-node
    run), for a failed launch's decisive lines. Errors reading it give []: it is a courtesy."""
    nodes = [nd for nd in sup.nodes if nd.record is not None and nd.record.log_path]
    out: list[str] = []
    for nd in nodes:
        rec = nd.record
        # the screen's text of each line (Cockpit's own access lines left out, as everywhere)
        nl = NodeLog(sup.backend, nd.label, parse=False, catch_up=None)
        texts: list[str] = []

        def on_item(item: Any, texts: list[str] = texts) -> None:
            if isinstance(item, Read):
                texts.extend(p.line.text for p in item.pieces if not p.continued)

        try:
            await read_log(nl, nd.ops, rec.log_path, on_item, offset=rec.log_offset, ino=rec.log_inode, tail=n,
                           follow=False)
        except Exception:  # the report goes on without the lines
            continue
        prefix = f"{nd.label} | " if len(nodes) > 1 else ""
        out += [prefix + ln for ln in texts]
    return out


def failed_launch_lines(snap: Any, tail: list[str]) -> list[str]:
    """What to print under a failed run's report: the log's decisive lines when no log line decided
    the crash (an unknown crash said only "exited with code 1", line 0)."""
    crash = snap.state.crash
    if crash is not None and crash.kind != "unknown" and crash.line > 0:
        return []  # a known signature: the diagnosis already quotes its decisive lines
    lines = decisive_tail(tail)
    if not lines:
        return ["the log is empty: the server printed nothing before it ended"]
    return ["last lines of the log:", *(f"    | {ln[:300]}" for ln in lines)]
