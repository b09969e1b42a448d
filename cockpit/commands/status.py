"""`cockpit status PROFILE [--json]`: attach to the profile's run (live or the last one) and report.

Exit 1 when the run crashed or a finding is critical, else 0. With no run at all the report says
so (phase `unknown`, `run` null) and exits 0.
"""

from __future__ import annotations

import argparse
import json

from cockpit.commands._support import (
    load_profile_arg,
    render_status,
    run_command,
    status_exit_code,
    status_json,
)
from cockpit.core.profile import Profile


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    return run_command(_status(profile, args.json))


async def _status(profile: Profile, as_json: bool) -> int:
    from cockpit.commands._support import open_journal
    from cockpit.supervisor.supervisor import Supervisor

    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    try:
        info = await sup.attach(include_ended=True)
        if info is None:
            snap = sup.snapshot()
            if as_json:
                print(json.dumps(status_json(snap), indent=2))
            else:
                print(f"{profile.name}: no run found on {', '.join(dict.fromkeys(h.label for h in profile.hosts))}")
            return 0
        snap = await sup.refresh_once()
        extra: list[str] = []
        if snap.state.phase == "crashed" or sup.any_exited:
            from cockpit.commands.logs import failed_launch_lines, run_log_tail

            extra = failed_launch_lines(snap, await run_log_tail(sup))
    finally:
        await sup.close()
        if journal is not None:
            journal.close()
    if as_json:
        out = status_json(snap)
        if extra:
            out["log_tail"] = [ln.removeprefix("    | ") for ln in extra[1:]]
        print(json.dumps(out, indent=2))
    else:
        print(render_status(snap))
        for ln in extra:
            print(ln)
    return status_exit_code(snap)
