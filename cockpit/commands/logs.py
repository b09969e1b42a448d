"""`cockpit logs PROFILE [-f] [--tail N] [--filter PRESET|REGEX] [--rank R]`.

The run's log from where the run began (runs of a profile append to one log file; each run keeps
its starting byte offset), or its last N lines with --tail (N raw lines, then filtered). With -f
it keeps following, across dropped connections, resuming exactly after the last complete line,
until the server exits. On a multi-node run every line is prefixed with its host.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from cockpit.core.profile import Profile
from cockpit.errors import BadInput, CockpitError
from cockpit.supervisor.cli_support import load_profile_arg, run_command


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    if args.tail is not None and args.tail < 0:
        raise BadInput("--tail must be 0 or more lines")
    return run_command(_logs(profile, args))


def _make_filter(spec: str, rank: str | None) -> Any:
    from cockpit.core.logfilter import LineFilter

    try:
        return LineFilter(spec or "all", rank)
    except ValueError as exc:
        raise BadInput(f"--filter/--rank: {exc}") from None


async def _logs(profile: Profile, args: argparse.Namespace) -> int:
    from cockpit.supervisor.host import LinkState, LogChunk, LogFollower, ServerExited
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(profile)
    info = await sup.attach(include_ended=True)
    if info is None:
        raise CockpitError(f"{profile.name}: no run found on {', '.join(h.label for h in profile.hosts)}",
                           hint=f"`cockpit up {profile.name}` launches one")
    nodes = [n for n in sup.nodes if n.run]
    multi = len(nodes) > 1
    out = sys.stdout

    async def one(node: Any) -> None:
        run = node.run
        alive = bool(run.get("alive"))
        filt = _make_filter(args.filter, args.rank)
        fol = LogFollower(
            node.ops,
            run["log_path"],
            offset=int(run.get("log_offset") or 0),
            ino=run.get("log_inode"),
            tail=args.tail,
            follow=bool(args.follow and alive),
            watch={"pid": run["pid"], "run_dir": run["run_dir"]} if args.follow and alive else None,
        )
        prefix = f"{node.label} | " if multi else ""
        try:
            async for item in fol.items():
                if isinstance(item, LogChunk):
                    text = item.data.decode("utf-8", "replace")
                    # split on newlines only: a tqdm line keeps its carriage returns, as in the file
                    lines = text.split("\n")
                    if lines and lines[-1] == "":
                        lines.pop()
                    shown = [prefix + ln for ln in lines if filt.matches(ln)]
                    if shown:
                        out.write("\n".join(shown) + "\n")
                        out.flush()
                elif isinstance(item, ServerExited):
                    print(f"cockpit: {node.label}: the server exited (code {item.code})", file=sys.stderr)
                    return
                elif isinstance(item, LinkState) and not item.up:
                    print(f"cockpit: {node.label}: connection lost ({item.reason}); reconnecting…", file=sys.stderr)
        finally:
            await fol.close()

    try:
        await asyncio.gather(*(one(n) for n in nodes))
    finally:
        await sup.close()
    return 0
