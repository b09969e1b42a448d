"""`cockpit logs PROFILE [-f] [--tail N] [--filter PRESET|REGEX] [--rank R]`.

The run's log from where the run began (runs of a profile append to one log file; each run keeps
its starting byte offset), or its last N lines with --tail (N raw lines, then filtered). With -f
it keeps following, across dropped connections, resuming exactly after the last complete line,
until the server exits. On a multi-node run every line is prefixed with its host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Mapping

from cockpit.commands._support import load_profile_arg, run_command
from cockpit.core.logfilter import LineFilter
from cockpit.core.profile import Profile
from cockpit.errors import BadInput, CockpitError


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    if args.tail is not None and args.tail < 0:
        raise BadInput("--tail must be 0 or more lines")
    return run_command(_logs(profile, args))


def _make_filter(spec: str, rank: str | None, presets: Mapping[str, tuple[str, ...]] | None = None) -> LineFilter:
    """The filter with the preset words of the profile's server (`Backend.log_filter_presets`)."""
    try:
        return LineFilter(spec or "all", rank, presets)
    except ValueError as exc:
        raise BadInput(f"--filter/--rank: {exc}") from None


async def _logs(profile: Profile, args: argparse.Namespace) -> int:
    from cockpit.supervisor.host import LinkState, LogChunk, LogFollower, LogReset, ServerExited
    from cockpit.supervisor.nodelog import NodeLog
    from cockpit.supervisor.nodes import Node
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(profile)
    info = await sup.attach(include_ended=True)
    if info is None:
        raise CockpitError(f"{profile.name}: no run found on {', '.join(dict.fromkeys(h.label for h in profile.hosts))}",
                           hint=f"`cockpit up {profile.name}` launches one")
    nodes = [n for n in sup.nodes if n.record]
    multi = len(nodes) > 1
    out = sys.stdout
    # Into a pipe or a file the output is the log, byte for byte (grep, less -R and diff see what
    # the server wrote); on a terminal, log text is cleaned of escape sequences first.
    raw = not out.isatty()

    cursors: dict[int, tuple[int, int | None]] = {}  # node index -> where its log was read up to

    async def one(node: Node, follow: bool = True) -> None:
        record = node.record
        assert record is not None
        filt = _make_filter(args.filter, args.rank, sup.backend.log_filter_presets())
        nl = NodeLog(sup.backend, node.label, parse=False, raw=raw, catch_up=None)
        follow = follow and bool(args.follow and record.alive)
        offset, ino = cursors.get(node.index, (record.log_offset, record.log_inode))
        fol = LogFollower(
            node.ops,
            record.log_path,
            offset=offset,
            ino=ino,
            tail=args.tail if node.index not in cursors else None,
            follow=follow,
            watch={"pid": record.pid, "run_dir": record.run_dir} if follow and record.pid else None,
        )
        prefix = f"{node.label} | " if multi else ""
        # A line longer than the follower's chunk cap (4 MB) arrives in pieces: raw, it is printed
        # as one line (shown or not by its first piece); on a terminal its first piece stands for it.
        keep = False  # the line being read is shown

        def end_line() -> None:
            if raw and nl.mid_line and keep:
                out.write("\n")
                out.flush()
            nl.reset()

        try:
            async for item in fol.items():
                if isinstance(item, LogChunk):
                    _events, pieces = nl.feed(item.data)
                    parts: list[str] = []
                    for piece in pieces:
                        ln = piece.line
                        if piece.continued:
                            if keep and raw:
                                parts.append(ln.text + ("\n" if piece.ends else ""))
                            continue
                        keep = filt.matches(ln.text, ln.rank)
                        if keep:
                            parts.append(prefix + ln.text + ("\n" if piece.ends or not raw else ""))
                    if parts:
                        out.write("".join(parts))
                        out.flush()
                elif isinstance(item, LogReset):
                    end_line()
                elif isinstance(item, ServerExited):
                    end_line()
                    print(f"cockpit: {node.label}: the server exited (code {item.code})", file=sys.stderr)
                    return
                elif isinstance(item, LinkState) and item.fatal:  # the host key CHANGED: stop, say so
                    end_line()
                    print(f"cockpit: {item.reason}; not reconnecting" + (f"\n  hint: {item.hint}" if item.hint else ""),
                          file=sys.stderr)
                    failed.append(node.label)
                    return
                elif isinstance(item, LinkState) and not item.up:
                    print(f"cockpit: {node.label}: connection lost ({item.reason}); reconnecting…", file=sys.stderr)
            end_line()  # a last line without its newline still ends the output's line
        finally:
            nl.cursor = cursors[node.index] = (fol.offset, fol.ino)
            await fol.close()

    failed: list[str] = []  # nodes whose link will not come back
    try:
        ended = getattr(sup, "wait_ended", None)  # a Slurm run: no pid to watch, Slurm says when
        if args.follow and ended is not None and any(n.record and n.record.alive for n in nodes):
            follows = asyncio.gather(*(one(n) for n in nodes))
            waiter = asyncio.ensure_future(ended())
            await asyncio.wait([follows, waiter], return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                follows.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follows
                await asyncio.gather(*(one(n, follow=False) for n in nodes))  # the last lines, none lost
                print(f"cockpit: {waiter.result()}", file=sys.stderr)
            else:
                waiter.cancel()
        else:
            await asyncio.gather(*(one(n) for n in nodes))
    finally:
        await sup.close()
    return 1 if failed else 0
