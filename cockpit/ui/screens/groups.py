"""`g` on a prefill/decode deployment's dashboard (issue 25): open the other group's dashboard,
asked first when that group has no run (opening it launches it). Its own module, as `K`'s: the
question is Textual's; which group, and whether opening it launches, is the group controller's
(`ui/groupcontrol.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.screen import Screen

from cockpit.ui.groupcontrol import GroupControl
from cockpit.ui.screens.dialogs import ConfirmScreen
from cockpit.ui.widgets.groups import GroupSummary


def ask_to_open_other_group(screen: Screen[Any], groups: GroupControl, summaries: dict[str, GroupSummary],
                            switch: Callable[[str], None]) -> None:
    """`switch` gets the other group's role once it is to be opened."""
    other = groups.other()
    if other is None:
        screen.notify("not a prefill/decode deployment: no other group", severity="warning", timeout=3)
        return
    role, prof = other
    known = summaries.get(role)
    if known is None or not groups.opening_launches(known.run_id, known.error):
        switch(role)
        return

    def answered(yes: bool | None) -> None:
        if yes:
            switch(role)

    screen.app.push_screen(ConfirmScreen(
        f"{prof.name} has no run",
        f"Open the {role} group's dashboard? It runs preflight and launches {prof.name}, "
        f"as `cockpit up {prof.name}` would. This group's server keeps running."), answered)
