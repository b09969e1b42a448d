"""`cockpit restart PROFILE [--set FLAG=VALUE]… [--wait started|ready] [--timeout S] [--force] [--json]`.

The live run's flags with the `--set` changes on top (the run's own overrides are kept, as the
TUI's `r`/`e` keep them) go through the gate first, with the old run still serving: refused (the
same words and per-rank arithmetic `cockpit up` prints) → exit 1 and nothing is stopped. Accepted
→ stop (SIGTERM, SIGKILL after 30 s), wait until the old processes are gone and the GPUs released,
launch the argvs the gate built, then follow to `--wait` exactly as `up` does. It is one call of
`Supervisor.restart`, the path the TUI's `r`/`e`/`R`, the unattended policy and `tune` share.

Exit: 0 restarted (started / READY); 1 refused by the gate, no live run of the profile (`cockpit up`
launches one: a restart never launches what was not running), a failed stop or a failed new run;
2 bad input. `--json`: `up --json`'s shape (status's, plus `waited`, `waited_s`) with
`restart: {refused, from_run, findings}`; a refusal prints the untouched run's status in that shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from cockpit.commands._launching import follow_launch, say_verdict
from cockpit.commands._support import (
    load_profile_arg,
    one_server,
    open_journal,
    run_command,
    status_json,
)
from cockpit.face import (
    BadInput,
    GatedLaunch,
    GateRefused,
    Profile,
    RunInfo,
    Supervisor,
    calibration_runs,
    get_backend,
)

STOP_TIMEOUT_S = 30.0  # SIGTERM → SIGKILL for the old run, as `cockpit down`'s default


def run(args: argparse.Namespace) -> int:
    profile = one_server(load_profile_arg(args.profile), "restart")
    overrides = get_backend(profile.backend).flags.parse_overrides(args.overrides or [])
    if not args.timeout > 0:
        raise BadInput(f"--timeout must be more than 0 seconds (got {args.timeout:g})")
    return run_command(_restart(profile, overrides, args))


async def _restart(profile: Profile, overrides: dict[str, Any], args: argparse.Namespace) -> int:

    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    name = profile.name
    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    try:
        live = await sup.attach()
        if live is None:
            await sup.close()
            return _no_live_run(name, args)
        changes = ", ".join(f"--{k} {v}" for k, v in overrides.items()) or "unchanged flags"
        say(f"{name}: preflight of run {live.id}'s flags with {changes} (the run keeps serving meanwhile)…")

        def accepted(go: GatedLaunch) -> None:
            if go.verdict == "force":
                print(f"cockpit: {name}: restarting anyway (--force): {go.plan_note}", file=sys.stderr)
            say(f"{name}: preflight passed; stopping run {live.id} ({_where(live)}), then waiting for its GPUs…")

        try:
            info = await sup.restart(overrides, timeout=STOP_TIMEOUT_S, force=args.force, plan=True,
                                     runs=calibration_runs(name), accepted=accepted)
        except GateRefused as refused:
            return await _refused(sup, live, refused, args)
        except BaseException:  # leftovers on the GPUs, a stop that failed: said by the CLI (exit 1)
            await sup.close()
            raise
        t0 = time.monotonic()
        job = getattr(sup.target.view(), "job_id", None)
        what = f"submitted Slurm job {job}" if job else f"pid {info.pid}"
        say(f"{name}: launched run {info.id} on {', '.join(info.hosts)} ({what}), log {info.log_path}")
        return await follow_launch(sup, args, t0, {"restart": {"refused": False, "from_run": live.id, "findings": []}})
    finally:
        if journal is not None:
            journal.close()


def _where(info: RunInfo) -> str:
    return f"pid {info.pid} on {info.hosts[0]}" if info.pid else f"on {', '.join(info.hosts)}"


def _no_live_run(name: str, args: argparse.Namespace) -> int:
    """Nothing to restart: a restart never launches what was not running (a cron job that restarts
    a run someone stopped on purpose would start it again); `cockpit up` launches."""
    why = f"{name}: no live run to restart"
    if args.json:
        print(json.dumps({"restart": {"refused": False, "from_run": None, "findings": [], "error": "no live run"},
                          "run": None}, indent=2))
    print(f"cockpit: error: {why}", file=sys.stderr)
    print(f"  hint: `cockpit up {name}` launches one; `cockpit status {name}` shows how the last one ended",
          file=sys.stderr)
    return 1


async def _refused(sup: Supervisor, live: RunInfo, refused: Any, args: argparse.Namespace) -> int:
    """The gate refused: the same words as `up`, and the run, untouched, said to be so."""
    try:
        say_verdict(refused.result, force=args.force, verb="restart")
        print(f"  nothing was stopped: run {live.id} ({_where(live)}) keeps serving with its flags", file=sys.stderr)
        if args.json:
            snap = await sup.refresh_once()
            out = status_json(snap)
            out["restart"] = {"refused": True, "from_run": live.id,
                              "findings": [f.to_json() for f in refused.findings]}
            print(json.dumps(out, indent=2))
    finally:
        await sup.close()
    return 1
