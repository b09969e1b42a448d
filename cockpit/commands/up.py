"""`cockpit up PROFILE [--set FLAG=VALUE]… [--wait started|ready] [--timeout S] [--force] [--json]`.

Launch detached on the profile's hosts (refused while a run of the profile is alive), then wait:
`started` returns once the server runs and survived its first second, `ready` once the log says
`fired up` AND node 0's /health (/ready on 0.5.23) answers 200. A crash prints the diagnosis and
exits 1; the server is left running when the wait times out. A launch whose memory plan predicts
less than the warn headroom after graph capture is refused unless `--force`. All of it is one walk
of the gate (cockpit/preflight/gate.py), which builds the argv per node once: the target launches
those argvs, never builds them again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from cockpit.commands._support import (
    load_profile_arg,
    one_server,
    open_journal,
    render_findings,
    render_report,
    run_command,
    status_json,
)
from cockpit.face import CockpitError, Profile

if TYPE_CHECKING:
    from cockpit.face import GateResult

STARTED_GRACE_S = 1.0  # a server that dies at once (bad flag, port in use) is a failure, not "started"
# after the hosts say the server has ended: how long the log follower may take to deliver its exit
# and last lines (the failed launch's report); it starts over the host's transport, seconds over SSH
EXIT_CATCH_UP_S = 15.0


def run(args: argparse.Namespace) -> int:
    from cockpit.face import get_backend

    profile = one_server(load_profile_arg(args.profile), "up")
    overrides = get_backend(profile.backend).flags.parse_overrides(args.overrides or [])
    return run_command(_up(profile, overrides, args))


def _refused(gate: GateResult, *, force: bool) -> bool:
    """The gate's verdict said: a critical preflight finding refuses the launch; so does a memory
    plan predicted below the warn headroom (the crash it predicts costs a whole model load), unless
    --force. An unreadable model or unknown GPUs never block a launch: the plan is then only
    mentioned."""
    name = gate.profile.name
    verdict = gate.verdict(force=force)
    if verdict == "go":
        return False
    if verdict == "force":
        assert gate.plan is not None
        print(f"cockpit: {name}: launching anyway (--force): {gate.plan.message}", file=sys.stderr)
        return False
    print(f"cockpit: {name}: refused before launch:", file=sys.stderr)
    for line in render_findings(gate.findings if gate.preflight_refuses or gate.plan is None else [gate.plan]):
        print("  " + line, file=sys.stderr)
    if not gate.preflight_refuses:
        print("  hint: apply the change with --set, or launch anyway with --force", file=sys.stderr)
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


async def _up(profile: Profile, overrides: dict[str, Any], args: argparse.Namespace) -> int:
    from cockpit.commands.plan import journal_runs
    from cockpit.face import Supervisor, gate

    # one gate: the argv per node (a flag the server would refuse: FlagError → exit 2), the hosts
    # measured, the preflight rules, node 0's model path and port, the memory plan
    checked = await gate(profile, overrides, runs=journal_runs(profile.name))
    argvs = checked.node_argvs()
    if _refused(checked, force=bool(getattr(args, "force", False))):
        return 1
    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    t0 = time.monotonic()
    try:
        # the target launches the argvs the gate built (never builds them again)
        info = await sup.start(overrides, attach=False, argvs=argvs)
        say = (lambda m: print(m, file=sys.stderr)) if args.json else print
        job = getattr(sup.target.view(), "job_id", None)  # a Slurm run was submitted, not started
        what = f"submitted Slurm job {job}" if job else f"pid {info.pid}"
        say(f"{profile.name}: launched run {info.id} on {', '.join(info.hosts)} ({what}), log {info.log_path}")
        runner = asyncio.create_task(sup.run())
        ended = False  # `started`: the hosts say the server has ended (wait_started)
        try:
            if args.wait == "ready":
                def done(s: Supervisor) -> bool:
                    return s.is_ready() or s.state_phase in ("crashed", "stopped") or s.any_exited
                ok = await sup.wait_until(done, args.timeout)
            else:
                ended = await wait_started(sup, min(STARTED_GRACE_S, args.timeout), submitted=bool(job))
                ok = True
            snap = sup.snapshot()
            failed_lines: list[str] = []
            if snap.state.phase in ("crashed", "stopped") or sup.any_exited or ended:
                from cockpit.commands.logs import failed_launch_lines, run_log_tail

                failed_lines = failed_launch_lines(snap, await run_log_tail(sup))
        finally:
            await sup.close()
            runner.cancel()
            try:
                await runner
            except (asyncio.CancelledError, Exception):
                pass
    finally:
        if journal is not None:
            journal.close()
    failed = snap.state.phase in ("crashed", "stopped") or sup.any_exited or ended
    if args.json:
        out = status_json(snap)
        out["waited"] = args.wait
        out["waited_s"] = round(time.monotonic() - t0, 1)
        print(json.dumps(out, indent=2))
    if failed:
        if not args.json:
            print(render_report(snap), file=sys.stderr)
        for line in failed_lines:
            print(line, file=sys.stderr)
        return 1
    if not ok:
        raise CockpitError(
            f"{profile.name}: not ready after {args.timeout:g} s (phase {snap.state.phase}, health {snap.health or 'not probed'})",
            hint=f"the server keeps running: `cockpit status {profile.name}`, `cockpit logs {profile.name} -f`",
        )
    if not args.json:
        if args.wait == "ready":
            print(f"{profile.name}: READY after {time.monotonic() - t0:.1f} s (log + {snap.readiness.split('+')[-1].strip()} {snap.health})")
        else:
            print(f"{profile.name}: started")
    return 0
