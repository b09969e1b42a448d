"""`cockpit stacks PROFILE [--native] [--json] [--saved]`: the Python stacks of every process of
the profile's live run on every node (py-spy on the host), ranks with identical stacks grouped and
the odd one out named; each dump is saved with the run (`--saved` prints the newest saved one).

Exit 1 when no process could be read (py-spy missing, no run), else 0.
"""

from __future__ import annotations

import argparse
import json

from cockpit.commands._support import load_profile_arg, run_command
from cockpit.face import Profile, Supervisor, collect_stacks, render_stacks, save_stacks, saved_stacks


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    if args.saved:
        return _show_saved(profile, args.json)
    return run_command(_stacks(profile, args.native, args.json))


def _print(dump: dict[str, object], as_json: bool, path: object = None) -> None:
    if as_json:
        print(json.dumps(dump, indent=2))
        return
    for line in render_stacks(dump):
        print(line)
    if path is not None:
        print(f"\nsaved: {path}")


def _show_saved(profile: Profile, as_json: bool) -> int:
    paths = saved_stacks(profile.name)
    if not paths:
        print(f"{profile.name}: no saved stacks")
        return 1
    _print(json.loads(paths[-1].read_text(encoding="utf-8")), as_json, paths[-1])
    return 0


async def _stacks(profile: Profile, native: bool, as_json: bool) -> int:
    sup = Supervisor(profile)
    try:
        info = await sup.attach()
        if info is None:
            print(f"{profile.name}: not running: no stacks to take")
            return 1
        dump = await collect_stacks(sup, native=native)
    finally:
        await sup.close()
    path = save_stacks(dump)
    dump["saved"] = str(path)
    _print(dump, as_json, None if as_json else path)
    return 0 if any(p.get("threads") for p in dump["processes"]) else 1
