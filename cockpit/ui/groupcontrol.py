"""A prefill/decode deployment's dashboard (issue 25), as a controller the screen owns: the
dashboard follows one group's run (`NAME.prefill` or `NAME.decode`, each its own run, as `cockpit
up` runs them) and shows both groups under the header; this reads the other group's run every
GROUP_POLL_S and says which group `g` opens. No Textual here: the screen draws the strip, asks,
and switches dashboards (tests/ui/test_groupcontrol.py drives this with plain callables)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from cockpit.face import Profile
from cockpit.ui.runcontrol import read_run

GROUP_POLL_S = 3.0

# reads one profile's run as its supervisor last wrote it: (snapshot or None, why not, or None)
RunReader = Callable[[Profile], Awaitable[tuple[Any | None, str | None]]]


class GroupControl:
    """`deployment` is the prefill/decode profile and `group` the role this dashboard follows;
    both None on a plain profile's dashboard (then it has nothing to do)."""

    def __init__(self, deployment: Profile | None, group: str | None, read: RunReader = read_run,
                 poll_s: float = GROUP_POLL_S) -> None:
        self.deployment = deployment
        self.group = group
        self.read = read
        self.poll_s = poll_s

    @property
    def active(self) -> bool:
        return self.deployment is not None and self.group is not None

    def groups(self) -> list[tuple[str, str]]:
        """(role, profile name) of every group, for the strip under the header."""
        if self.deployment is None or self.group is None:
            return []
        return [(r, p.name) for r, p in self.deployment.group_profiles()]

    def other(self) -> tuple[str, Profile] | None:
        """The group this dashboard does not follow: (role, its profile)."""
        if self.deployment is None or self.group is None:
            return None
        return next(((r, p) for r, p in self.deployment.group_profiles() if r != self.group), None)

    async def watch(self, post: Callable[[str, str, Any | None, str | None], None]) -> None:
        """Read the other group's run for ever, posting (role, profile, snapshot, error) each time;
        an unreachable host is posted as its error and the watch goes on."""
        other = self.other()
        if other is None:
            return
        role, prof = other
        while True:
            snap, error = await self.read(prof)
            post(role, prof.name, snap, error)
            await asyncio.sleep(self.poll_s)

    @staticmethod
    def opening_launches(run_id: str | None, error: str | None) -> bool:
        """Opening the other group's dashboard launches its server: its last read found no run
        (an unreachable one is not known to have none)."""
        return run_id is None and error is None
