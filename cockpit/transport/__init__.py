"""Transports: how Cockpit reaches a host. `transport_for(host)` is the one entry point.

Transports are pooled: every caller asking for the same host gets the same object, and an SSH
transport carries all its channels (commands, log followers, telemetry, port forwards) over one
connection, so a dashboard with eight ranks on one host opens one SSH connection, not twenty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cockpit.transport.base import Completed, HostKeyError, Stream, Transport, TransportError
from cockpit.transport.local import CommandTimeout, LocalTransport

if TYPE_CHECKING:
    from cockpit.core.profile import Host

__all__ = [
    "CommandTimeout",
    "Completed",
    "HostKeyError",
    "LocalTransport",
    "Stream",
    "Transport",
    "TransportError",
    "close_all",
    "transport_for",
]

_pool: dict[str, Transport] = {}


def transport_for(host: Host | str) -> Transport:
    """The pooled transport for a profile host (`Host`) or an ssh destination string ("local" = here)."""
    dest = host if isinstance(host, str) else host.ssh
    t = _pool.get(dest)
    if t is None or getattr(t, "_closed", False):
        if dest == "local":
            t = LocalTransport()
        else:
            # asyncssh (~0.3 s) only when a remote host is used: tests/test_startup_imports.py (the face)
            from cockpit.transport.ssh import SSHTransport

            t = SSHTransport(dest)
        _pool[dest] = t
    return t


async def close_all() -> None:
    """Close every pooled transport (on exit; a later transport_for() opens fresh ones)."""
    pooled = list(_pool.values())
    _pool.clear()
    for t in pooled:
        await t.close()
