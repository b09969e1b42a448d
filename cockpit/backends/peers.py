"""A peer that closed its connection (torch's gloo transport, either engine; issue 35).

`[…/gloo/transport/tcp/pair.cc:534] Connection closed by peer [192.168.2.2]:39075` (or `Connection
reset by peer`) on a rank says another rank's process went away: the cause is on that node, not
here. It is an `nccl_error` (a collective failed) worded as such, naming the node's address.
"""

from __future__ import annotations

import re

from cockpit.core import events as ev

_RX_PEER = re.compile(r"Connection (?:closed|reset) by peer(?: \[([^\]]{1,64})\]:\d+)?")


def peer_closed(line: int, ts: str | None, rank: str | None, msg: str) -> ev.NcclError | None:
    """The event of a gloo peer-closed line, or None."""
    m = _RX_PEER.search(msg)
    if m is None:
        return None
    where = f"the node at {m[1]}" if m[1] else "a peer node"
    return ev.NcclError(line, ts, rank, f"a peer died: {where} closed its connection ({msg.strip()})")
