"""A prefill/decode deployment's dashboard (issue 25): the dashboard follows one group's run
(`NAME.prefill` or `NAME.decode`, each its own run, as `cockpit up` runs them) and shows both
groups under the header — phase, ranks and headroom — from its own snapshots for its group and
from a worker that reads the other group's run every GROUP_POLL_S; `g` opens the other group's
dashboard (asked first when that group has no run: opening it launches it)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from textual.message import Message

from cockpit.face import Profile
from cockpit.ui.runcontrol import read_run
from cockpit.ui.widgets.groups import GroupsStrip, GroupSummary, summarise

GROUP_POLL_S = 3.0


class GroupRead(Message):
    """The other group's run as its supervisor last read it (None: no run, or `error`)."""

    def __init__(self, role: str, profile: str, snapshot: Any | None, error: str | None = None) -> None:
        super().__init__()
        self.role = role
        self.profile = profile
        self.snapshot = snapshot
        self.error = error


class GroupActions:
    """Mixed into DashboardScreen before Screen. `deployment` is the prefill/decode profile and
    `group` the role this dashboard follows; both None on a plain profile's dashboard."""

    deployment: Profile | None
    group: str | None
    supervisor_factory: Any
    overrides: Any
    clock: Any
    from_picker: bool
    control: Any  # the dashboard's RunControl
    app: Any
    if TYPE_CHECKING:

        def notify(self, *args: Any, **kwargs: Any) -> Any: ...
        def run_worker(self, *args: Any, **kwargs: Any) -> Any: ...
        def post_message(self, message: Message) -> bool: ...
        def query_one(self, *args: Any, **kwargs: Any) -> Any: ...
        @property
        def workers(self) -> Any: ...

    def groups_strip(self) -> GroupsStrip | None:
        """The strip to compose under the header, on a group's dashboard only."""
        if self.deployment is None or self.group is None:
            return None
        return GroupsStrip(self.group, [summarise(r, p.name, None) for r, p in self.deployment.group_profiles()],
                           id="groups")

    def other_group(self) -> tuple[str, Profile] | None:
        if self.deployment is None or self.group is None:
            return None
        return next(((r, p) for r, p in self.deployment.group_profiles() if r != self.group), None)

    def start_group_watch(self) -> None:
        if self.other_group() is not None and self.supervisor_factory is not None:
            self.run_worker(self._watch_other_group(), name="groups", group="groups", exit_on_error=False)

    async def _watch_other_group(self) -> None:
        other = self.other_group()
        assert other is not None
        role, prof = other
        while True:
            snap, error = await read_run(prof)  # an unreachable host: the line says so, the dashboard goes on
            self.post_message(GroupRead(role, prof.name, snap, error))
            await asyncio.sleep(GROUP_POLL_S)

    def on_group_read(self, message: GroupRead) -> None:
        self._show_group(summarise(message.role, message.profile, message.snapshot, message.error))

    def show_own_group(self, snap: Any) -> None:
        """This dashboard's own snapshot, on its group's line."""
        if self.group is not None and self.deployment is not None:
            self._show_group(summarise(self.group, snap.profile, snap))

    def _show_group(self, summary: GroupSummary) -> None:
        with contextlib.suppress(Exception):  # the strip is gone while the screen closes
            self.query_one(GroupsStrip).show(summary)

    def group_summaries(self) -> dict[str, GroupSummary]:
        strip = self.query_one(GroupsStrip)
        return dict(strip.summaries)

    def action_other_group(self) -> None:
        other = self.other_group()
        if other is None:
            self.notify("not a prefill/decode deployment: no other group", severity="warning", timeout=3)
            return
        role, prof = other
        known = self.group_summaries().get(role)
        if known is not None and known.run_id is None and known.error is None:
            from cockpit.ui.screens.dialogs import ConfirmScreen

            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_worker(self._switch_group(role), group="leaving", exit_on_error=False)

            self.app.push_screen(ConfirmScreen(
                f"{prof.name} has no run",
                f"Open the {role} group's dashboard? It runs preflight and launches {prof.name}, "
                f"as `cockpit up {prof.name}` would. This group's server keeps running."), answered)
            return
        self.run_worker(self._switch_group(role), group="leaving", exit_on_error=False)

    async def _switch_group(self, role: str) -> None:
        """Leave this group's server running (as `q` → leave does) and open the other's dashboard."""
        await self.control.close()
        self.workers.cancel_group(self, "supervisor")
        self.workers.cancel_group(self, "groups")
        assert self.deployment is not None
        self.app.switch_screen(self.app.dashboard_for(self.deployment, from_picker=self.from_picker, group=role))
