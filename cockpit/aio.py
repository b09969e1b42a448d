"""Small asyncio helpers shared by the transports and the supervisor (no Cockpit imports)."""

from __future__ import annotations

import asyncio
from typing import Any


async def reap(task: asyncio.Future[Any], *, errors: bool = True) -> None:
    """Wait for a task we cancelled (or that ended), ignoring how it ended (its exceptions too, unless
    `errors` is False) — but not our own cancel.

    `with suppress(CancelledError): await task` also swallows a CancelledError aimed at the caller
    (Ctrl-C cancels the main task while it waits here), and the interrupt is lost: `cockpit tune`
    went on to finish a launch it had been told to stop. `Task.cancelling()` tells the two apart.
    """
    try:
        await task
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise
    except Exception:
        if not errors:
            raise
