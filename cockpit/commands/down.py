"""`cockpit down PROFILE [--timeout S] [--json]`: stop the run, then wait for its GPU memory.

SIGTERM to the server's process group (and every process of its session), SIGKILL after the
timeout, then wait until telemetry shows the run's processes gone from its GPUs. Processes that
still hold memory there (leftovers) are printed with the command that kills them: exit 1.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from cockpit.commands._support import load_profile_arg, one_server, open_journal, run_command
from cockpit.face import Profile, SlurmView, Supervisor


def run(args: argparse.Namespace) -> int:
    profile = one_server(load_profile_arg(args.profile), "down")
    return run_command(_down(profile, args))


async def _down(profile: Profile, args: argparse.Namespace) -> int:
    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    try:
        info = await sup.attach()
        if info is None:
            if args.json:
                print(json.dumps({"stopped": True, "run": None, "was_running": False, "leftovers": []}))
            else:
                print(f"{profile.name}: not running")
            return 0
        job = getattr(sup.target.view(), "job_id", None)  # a Slurm run: scancel, then wait until it left the queue
        if not args.json:
            what = f"Slurm job {job}, scancel" if job else f"pid {info.pid}"
            print(f"{profile.name}: stopping run {info.id} ({what}) on {', '.join(info.hosts)}…", flush=True)
        res = await sup.stop(timeout=args.timeout)
    finally:
        await sup.close()
        if journal is not None:
            journal.close()
    if args.json:
        print(json.dumps({
            "stopped": res.stopped,
            "was_running": True,
            "killed": res.killed,
            "left": res.left,
            "exit_codes": res.exit_codes,
            "run": {"id": info.id, "hosts": list(info.hosts), "pid": info.pid},
            **({"slurm": _slurm_json(sup)} if job else {}),
            "leftovers": [{"host": p.host, "pid": p.pid, "gpu": p.gpu_index, "used_gb": p.used_gb} for p in res.leftovers],
        }, indent=2))
    else:
        how = "scancel" if job else "SIGKILL after the timeout" if res.killed else "SIGTERM"
        if res.stopped and job:
            print(f"{profile.name}: stopped ({how}); Slurm job {job} has left the queue "
                  f"({(_slurm_json(sup) or {}).get('state')}); its nodes are Slurm's again")
        elif res.stopped:
            print(f"{profile.name}: stopped ({how}); exit code {', '.join(f'{h}: {c}' for h, c in res.exit_codes.items())}")
        else:
            print(f"{profile.name}: " + (f"Slurm job {job} is still in the queue" if job else
                                        f"processes survived SIGKILL: {res.left}"), file=sys.stderr)
        for p in res.leftovers:
            kill = ["kill", "-9", str(p.pid)]
            cmd = shlex.join(kill) if p.host == "local" else shlex.join(["ssh", p.host, *kill])
            used = "?" if p.used_gb is None else f"{p.used_gb:.2f}"
            print(f"  leftover: pid {p.pid} holds {used} GiB on GPU {p.gpu_index} of {p.host}; kill it with: {cmd}",
                  file=sys.stderr)
        if not res.leftovers and res.stopped and not job:
            print(f"{profile.name}: GPU memory released")
    return 0 if res.stopped and not res.leftovers else 1


def _slurm_json(sup: Supervisor) -> dict[str, Any] | None:
    """What Slurm says about the stopped job (`status --json`'s `slurm` object)."""
    view = sup.snapshot().target
    return view.job_json() if isinstance(view, SlurmView) else None
