"""`cockpit status PROFILE [--json]`: attach to the profile's run (live or the last one) and report.

Exit 1 when the run crashed or a finding is critical, else 0. With no run at all the report says
so (phase `unknown`, `run` null) and exits 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cockpit.commands._launching import failed_launch_lines, run_log_tail
from cockpit.commands._support import (
    load_profile_arg,
    open_journal,
    render_status,
    run_command,
    status_exit_code,
    status_json,
)
from cockpit.face import Profile, Supervisor


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    if profile.groups:
        return run_command(_group_status(profile, args.json))
    return run_command(_status(profile, args.json))


async def _group_status(profile: Profile, as_json: bool) -> int:
    """A prefill/decode profile: each group's run (`NAME.prefill`, `NAME.decode`) with its phase,
    the group on every rank row; JSON `{"profile", "groups": [{"group", …status…}]}`. Exit 1 when
    any group's would."""
    groups = []
    code = 0
    for role, gp in profile.group_profiles():
        rc, out = await _status(gp, as_json, group=role, emit=False)
        code = max(code, rc)
        groups.append(out)
    if as_json:
        print(json.dumps({"profile": profile.name, "groups": groups}, indent=2))
    else:
        print("\n\n".join(str(g) for g in groups))
    return code


async def _status(profile: Profile, as_json: bool, group: str | None = None, emit: bool = True) -> Any:

    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    try:
        info = await sup.attach(include_ended=True)
        if info is None:
            snap = sup.snapshot()
            none: Any = status_json(snap) if as_json else (
                f"{profile.name}: no run found on {', '.join(dict.fromkeys(h.label for h in profile.hosts))}")
            if group is not None:
                if as_json:
                    none = {"group": group, "profile": profile.name, **none}
                else:
                    none = f"{group} group · phase {snap.state.phase.upper()} · {none}"
            return _emit(0, none, as_json, emit)
        snap = await sup.refresh_once()
        extra: list[str] = []
        if snap.state.phase == "crashed" or sup.any_exited:

            extra = failed_launch_lines(snap, await run_log_tail(sup))
    finally:
        await sup.close()
        if journal is not None:
            journal.close()
    if as_json:
        out = status_json(snap)
        if extra:
            out["log_tail"] = [ln.removeprefix("    | ") for ln in extra[1:]]
        if group is not None:
            out = {"group": group, "profile": profile.name, **out}
        return _emit(status_exit_code(snap), out, True, emit)
    text = render_status(snap, group=group)
    if group is not None:
        text = f"{group} group · phase {snap.state.phase.upper().replace('_', ' ')}\n" + text
    return _emit(status_exit_code(snap), "\n".join([text, *extra]), False, emit)


def _emit(code: int, out: Any, as_json: bool, emit: bool) -> Any:
    """Print one status (a plain profile) or hand it back with its exit code (a group's)."""
    if not emit:
        return code, out
    print(json.dumps(out, indent=2) if as_json else out)
    return code
