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
import sys
import time
from typing import Any

from cockpit.commands._launching import follow_launch, say_verdict
from cockpit.commands._support import load_profile_arg, one_server, open_journal, run_command
from cockpit.face import GateResult, Profile, Supervisor, calibration_runs, gate, get_backend


def run(args: argparse.Namespace) -> int:
    profile = one_server(load_profile_arg(args.profile), "up")
    overrides = get_backend(profile.backend).flags.parse_overrides(args.overrides or [])
    return run_command(_up(profile, overrides, args))


def _refused(gate: GateResult, *, force: bool) -> bool:
    """The gate's verdict, said (the words `cockpit restart` says too: _launching.say_verdict)."""
    return say_verdict(gate, force=force, verb="launch")


async def _up(profile: Profile, overrides: dict[str, Any], args: argparse.Namespace) -> int:

    # one gate: the argv per node (a flag the server would refuse: FlagError → exit 2), the hosts
    # measured, the preflight rules, node 0's model path and port, the memory plan
    checked = await gate(profile, overrides, runs=calibration_runs(profile.name))
    checked.node_argvs()  # a flag the server would refuse: exit 2 before anything is said
    if _refused(checked, force=bool(getattr(args, "force", False))):
        return 1
    go = checked.launch(force=bool(getattr(args, "force", False)))  # the only value a target launches
    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    t0 = time.monotonic()
    try:
        # the target launches the argvs the gate built (never builds them again)
        info = await sup.start(go, attach=False)
        say = (lambda m: print(m, file=sys.stderr)) if args.json else print
        job = getattr(sup.target.view(), "job_id", None)  # a Slurm run was submitted, not started
        what = f"submitted Slurm job {job}" if job else f"pid {info.pid}"
        say(f"{profile.name}: launched run {info.id} on {', '.join(info.hosts)} ({what}), log {info.log_path}")
        return await follow_launch(sup, args, t0)
    finally:
        if journal is not None:
            journal.close()
