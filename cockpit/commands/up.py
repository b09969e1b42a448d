"""`cockpit up PROFILE [--set FLAG=VALUE]… [--wait started|ready] [--timeout S] [--force] [--json]`.

Launch detached on the profile's hosts (refused while a run of the profile is alive), then wait:
`started` returns once the server runs and survived its first second, `ready` once the log says
`fired up` AND node 0's /health (/ready on 0.5.23) answers 200. A crash prints the diagnosis and
exits 1; the server is left running when the wait times out. A launch whose memory plan predicts
less than the warn headroom after graph capture is refused unless `--force`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

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

STARTED_GRACE_S = 1.0  # a server that dies at once (bad flag, port in use) is a failure, not "started"


def run(args: argparse.Namespace) -> int:
    from cockpit.face import get_backend

    profile = one_server(load_profile_arg(args.profile), "up")
    overrides = get_backend(profile.backend).parse_overrides(args.overrides or [])
    return run_command(_up(profile, overrides, args))


async def _plan_refuses(profile: Profile, overrides: dict[str, Any], *, force: bool) -> bool:
    """The memory plan before a launch: a value predicted below the warn headroom is refused (the
    crash it predicts costs a whole model load), unless --force. An unreadable model or unknown GPUs
    never block a launch: the plan is then only mentioned."""
    from cockpit.commands.plan import journal_runs
    from cockpit.face import profile_plan_finding

    # the model is read first: when it cannot be read, the GPUs are not measured for nothing
    finding, _plan = await profile_plan_finding(profile, overrides, runs=journal_runs(profile.name))
    if finding.severity != "critical":
        return False
    if force:
        print(f"cockpit: {profile.name}: launching anyway (--force): {finding.message}", file=sys.stderr)
        return False
    print(f"cockpit: {profile.name}: refused before launch:", file=sys.stderr)
    for line in render_findings([finding]):
        print("  " + line, file=sys.stderr)
    print("  hint: apply the change with --set, or launch anyway with --force", file=sys.stderr)
    return True


async def _up(profile: Profile, overrides: dict[str, Any], args: argparse.Namespace) -> int:
    from cockpit.face import Supervisor, exit_code_for, get_backend

    # build the argv first: a flag the server would refuse is refused here (FlagError → exit 2)
    get_backend(profile.backend).build_node_argvs(profile, overrides,
                                                  "127.0.0.1:1" if len(profile.hosts) > 1 else None)
    findings = await Supervisor(profile).preflight(overrides)
    if exit_code_for(findings):
        print(f"cockpit: {profile.name}: refused before launch:", file=sys.stderr)
        for line in render_findings(findings):
            print("  " + line, file=sys.stderr)
        return 1
    if await _plan_refuses(profile, overrides, force=bool(getattr(args, "force", False))):
        return 1
    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    t0 = time.monotonic()
    try:
        info = await sup.start(overrides, attach=False)
        say = (lambda m: print(m, file=sys.stderr)) if args.json else print
        job = getattr(sup.target.view(), "job_id", None)  # a Slurm run was submitted, not started
        what = f"submitted Slurm job {job}" if job else f"pid {info.pid}"
        say(f"{profile.name}: launched run {info.id} on {', '.join(info.hosts)} ({what}), log {info.log_path}")
        runner = asyncio.create_task(sup.run())
        try:
            if args.wait == "ready":
                def done(s: Supervisor) -> bool:
                    return s.is_ready() or s.state_phase in ("crashed", "stopped") or s.any_exited
                ok = await sup.wait_until(done, args.timeout)
            else:
                ok = await sup.wait_until(lambda s: s.any_exited, min(STARTED_GRACE_S, args.timeout))
                ok = True
            snap = sup.snapshot()
            failed_lines: list[str] = []
            if snap.state.phase in ("crashed", "stopped") or sup.any_exited:
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
    failed = snap.state.phase in ("crashed", "stopped") or sup.any_exited
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
