"""The one loop that reads a node's log: the TUI's follower (cockpit/supervisor/follower.py) and
`cockpit logs` (cockpit/commands/logs.py) both read through `read_log`, so what they are handed
(numbered lines, ranks, Cockpit's own access lines left out, the events of a line a rotation ended)
and where they resume (the NodeLog's cursor) cannot drift apart.

It follows the file on the host (`LogFollower`: reconnects, rotations, the server's exit), cuts each
chunk through the node's NodeLog (its one splitter and its parser), and hands the caller what came,
in order; the caller decides what to show, print or fold, and when to stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cockpit.remote.host import HostOps, LinkState, LogChunk, LogFollower, LogReset, ServerExited
from cockpit.supervisor.nodelog import NodeLog, Piece


@dataclass(frozen=True)
class Read:
    """What one chunk of the log gave: the parser's events and the lines to show (as pieces)."""

    events: list[Any]
    pieces: list[Piece]
    own: int = 0  # Cockpit's own access lines it held, left out of the pieces (core/ownlines.py)


LogItem = Read | LogReset | ServerExited | LinkState
# the caller's answer to an item: True stops the reading (the log is closed, the cursor kept)
OnItem = Callable[[LogItem], bool | None]


async def read_log(
    nl: NodeLog,
    ops: HostOps,
    path: str,
    on_item: OnItem,
    *,
    offset: int,
    ino: int | None,
    follow: bool,
    watch: dict[str, Any] | None = None,
    tail: int | None = None,
    end: int | None = None,
    on_open: Callable[[LogFollower | None], None] | None = None,
) -> None:
    """Read `path` from `offset` (its last `tail` lines; up to byte `end`) to its end, or on while
    `follow` until the server exits or `on_item` says stop. `nl.cursor` is left where it was read
    up to (the offset after the last complete line, and the file's inode). `on_open` is told the
    follower while it reads (None once it is closed): a stop closes it from outside."""
    fol = LogFollower(ops, path, offset=offset, ino=ino, tail=tail, follow=follow, watch=watch, end=end)
    if on_open is not None:
        on_open(fol)
    try:
        async for item in fol.items():
            if isinstance(item, LogChunk):
                own = nl.own_lines
                events, pieces = nl.feed(item.data)
                if on_item(Read(events, pieces, nl.own_lines - own)):
                    return
            elif isinstance(item, LogReset):
                # the caller sees the reset while the line in progress is still there (a printer
                # ends its output's line), then that line ends and its events come
                if on_item(item):
                    return
                events = nl.reset()
                if events and on_item(Read(events, [])):
                    return
            elif isinstance(item, (ServerExited, LinkState)) and on_item(item):
                return
    finally:
        if on_open is not None:
            on_open(None)
        nl.cursor = (fol.offset, fol.ino)
        await fol.close()
