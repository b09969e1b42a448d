"""`cockpit logs PROFILE [-f] [--tail N] [--filter PRESET|REGEX] [--rank R]`.

The run's log from where the run began (runs of a profile append to one log file; each run keeps
its starting byte offset), or its last N lines with --tail: the last N lines that pass --filter and
--rank (with a filter the whole run's log is read, then the last N matches printed). With -f
it keeps following, across dropped connections, resuming exactly after the last complete line,
until the server exits. On a multi-node run every line is prefixed with its host.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any

from cockpit.commands._support import load_profile_arg, one_server, run_command
from cockpit.face import (
    BadInput,
    CockpitError,
    LineFilter,
    LinkState,
    LogReset,
    Node,
    NodeLog,
    Profile,
    Read,
    ServerExited,
    Supervisor,
    engine_words,
    read_log,
    reap,
)


def run(args: argparse.Namespace) -> int:
    profile = one_server(load_profile_arg(args.profile), "logs")
    if args.tail is not None and args.tail < 0:
        raise BadInput("--tail must be 0 or more lines")
    return run_command(_logs(profile, args))


def _make_filter(spec: str, rank: str | None, presets: Mapping[str, tuple[str, ...]] | None = None) -> LineFilter:
    """The filter with the preset words of the profile's server (`Backend.logs.filter_presets`)."""
    try:
        return LineFilter(spec or "all", rank, presets)
    except ValueError as exc:
        raise BadInput(f"--filter/--rank: {exc}") from None


def _int_flag(flags: dict[str, Any], *names: str) -> int:
    for n in names:
        v = flags.get(n)
        if v is not None:
            try:
                return max(1, int(str(v)))
            except ValueError:
                return 1
    return 1


def run_ranks(flags: dict[str, Any], axes: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
    """The rank labels a run with these flags logs: the engine's first rank axis always (TP0…),
    the others (DPk, PPk) when their size is > 1. `axes`: the backend's `EngineWords.rank_axes`."""
    labels: list[str] = []
    for i, (prefix, names) in enumerate(axes):
        n = _int_flag(flags, *names)
        if i == 0 or n > 1:
            labels += [f"{prefix}{k}" for k in range(n)]
    return labels


def _check_rank(rank: str, flags: dict[str, Any], axes: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    """--rank names a rank of this run, else exit 2 listing them (it printed nothing, exit 0)."""
    tokens = rank.replace(",", " ").split()
    bare = axes[0][0] if axes else ""  # a bare number names a rank of the first axis: 3 is TP3
    norm = [f"{bare}{t}" if t.isdigit() else t.upper() for t in tokens]
    valid = run_ranks(flags, axes)
    unknown = [t for t in norm if t not in valid]
    if unknown or not norm:
        raise BadInput(f"--rank {rank}: this run has no rank {' '.join(unknown) or repr(rank)}; "
                       f"its ranks are {', '.join(valid)}")


async def _logs(profile: Profile, args: argparse.Namespace) -> int:
    sup = Supervisor(profile)
    info = await sup.attach(include_ended=True)
    if info is None:
        raise CockpitError(f"{profile.name}: no run found on {', '.join(dict.fromkeys(h.label for h in profile.hosts))}",
                           hint=f"`cockpit up {profile.name}` launches one")
    nodes = [n for n in sup.nodes if n.record]
    multi = len(nodes) > 1
    out = sys.stdout
    # Into a pipe or a file the output is the log, byte for byte (grep, less -R and diff see what
    # the server wrote), less the access lines of Cockpit's own requests (core/ownlines.py, as the
    # TUI); on a terminal, log text is cleaned of escape sequences first.
    raw = not out.isatty()

    cursors: dict[int, tuple[int, int | None]] = {}  # node index -> where its log was read up to
    if args.rank and nodes:
        first = nodes[0].record
        try:
            axes = engine_words(profile.backend).rank_axes
            _check_rank(args.rank, dict((first.flags if first else None) or profile.server), axes)
        except BadInput:
            await sup.close()
            raise
    # --tail N with a filter or a rank: the last N *matching* lines, so the run's whole log is read
    # first (cutting N raw lines before filtering printed nothing for `--tail 20 --filter memory`)
    filtered_tail = args.tail is not None and (bool(args.rank) or (args.filter or "all") != "all")
    # a plain --tail N leaves out Cockpit's own access lines too (core/ownlines.py): a window wider
    # than N raw lines is read, and its last N shown lines printed
    window = None if filtered_tail or args.tail is None else args.tail * 4 + 200

    async def last_matches(node: Node, filt: LineFilter, prefix: str, following: bool) -> tuple[int, int | None]:
        """Print the last args.tail lines of the run's log (of its last `window` lines, when set)
        that pass `filt`; return the cursor (offset, inode) right after the last complete line read."""
        record = node.record
        assert record is not None
        nl = NodeLog(sup.backend, node.label, parse=False, raw=raw, catch_up=None)
        kept: deque[str] = deque(maxlen=args.tail)

        def on_item(item: Any) -> None:
            if not isinstance(item, Read):
                return
            for piece in item.pieces:
                if piece.continued:
                    continue
                # a last line without its newline: a follower resumes before it
                if not piece.ends and following:
                    continue
                if filt.matches(piece.line.text, piece.line.rank):
                    kept.append(prefix + piece.line.text + "\n")

        await read_log(nl, node.ops, record.log_path, on_item, offset=record.log_offset, ino=record.log_inode,
                       follow=False, tail=window)
        if args.tail:
            out.write("".join(kept))
            out.flush()
        assert nl.cursor is not None
        return nl.cursor

    async def one(node: Node, follow: bool = True) -> None:
        record = node.record
        assert record is not None
        filt = _make_filter(args.filter, args.rank, sup.backend.logs.filter_presets())
        nl = NodeLog(sup.backend, node.label, parse=False, raw=raw, catch_up=None)
        follow = follow and bool(args.follow and record.alive)
        if (filtered_tail or window is not None) and node.index not in cursors:
            cursors[node.index] = await last_matches(node, filt, f"{node.label} | " if multi else "", follow)
            if not follow:
                return
            filt = _make_filter(args.filter, args.rank, sup.backend.logs.filter_presets())  # a fresh one: rank records restart
        offset, ino = cursors.get(node.index, (record.log_offset, record.log_inode))
        prefix = f"{node.label} | " if multi else ""
        # A line longer than the follower's chunk cap (4 MB) arrives in pieces: raw, it is printed
        # as one line (shown or not by its first piece); on a terminal its first piece stands for it.
        keep = False  # the line being read is shown
        stopped = False

        def end_line() -> None:
            if raw and nl.mid_line and keep:
                out.write("\n")
                out.flush()

        def on_item(item: Any) -> bool:
            nonlocal keep, stopped
            if isinstance(item, Read):
                parts: list[str] = []
                for piece in item.pieces:
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
                stopped = True
            elif isinstance(item, LinkState) and item.fatal:  # the host key CHANGED: stop, say so
                end_line()
                print(f"cockpit: {item.reason}; not reconnecting" + (f"\n  hint: {item.hint}" if item.hint else ""),
                      file=sys.stderr)
                failed.append(node.label)
                stopped = True
            elif isinstance(item, LinkState) and not item.up:
                print(f"cockpit: {node.label}: connection lost ({item.reason}); reconnecting…", file=sys.stderr)
            return stopped

        try:
            await read_log(
                nl,
                node.ops,
                record.log_path,
                on_item,
                offset=offset,
                ino=ino,
                tail=args.tail if node.index not in cursors else None,
                follow=follow,
                watch={"pid": record.pid, "run_dir": record.run_dir} if follow and record.pid else None,
            )
            if not stopped:
                end_line()  # a last line without its newline still ends the output's line
        finally:
            if nl.cursor is not None:  # where the next read of this node resumes (a Slurm end's last lines)
                cursors[node.index] = nl.cursor

    failed: list[str] = []  # nodes whose link will not come back
    try:
        ended = sup.target.end_watch()  # a Slurm run: no pid to watch, Slurm says when
        if args.follow and ended is not None and any(n.record and n.record.alive for n in nodes):
            follows = asyncio.gather(*(one(n) for n in nodes))
            waiter: asyncio.Future[Any] = asyncio.ensure_future(ended())
            await asyncio.wait([follows, waiter], return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                follows.cancel()
                await reap(follows, errors=False)
                await asyncio.gather(*(one(n, follow=False) for n in nodes))  # the last lines, none lost
                print(f"cockpit: {waiter.result()}", file=sys.stderr)
            else:
                waiter.cancel()
        else:
            await asyncio.gather(*(one(n) for n in nodes))
    finally:
        await sup.close()
    return 1 if failed else 0
