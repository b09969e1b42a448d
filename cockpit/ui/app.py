"""The Cockpit Textual app: the profile picker or one profile's dashboard, themes, help, palette."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual import on
from textual.app import App, SystemCommand
from textual.screen import Screen

from cockpit.face import Journal, Profile, Supervisor
from cockpit.ui.keys import APP_BINDINGS, help_rows
from cockpit.ui.messages import ProfileChosen
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import HelpScreen
from cockpit.ui.screens.history import HistoryScreen
from cockpit.ui.screens.picker import PickerScreen
from cockpit.ui.themes import (
    DEFAULT_THEME,
    SHORT_NAMES,
    VARIABLE_DEFAULTS,
    load_themes,
    short_name,
    stylesheet_path,
    textual_name,
)


def default_supervisor_factory(profile: Profile, **callbacks: Any) -> Any:
    """The real supervisor, with the journal when it can be opened (a run is recorded either way
    it is launched: from the TUI or from `cockpit up`)."""

    journal = None
    try:

        journal = Journal.open()
    except Exception:  # the journal is a record, never a reason not to run
        journal = None
    return Supervisor(profile, journal=journal, **callbacks)


class CockpitApp(App[int]):
    TITLE = "Cockpit"
    CSS_PATH = str(stylesheet_path())
    BINDINGS = APP_BINDINGS
    # Under 60 columns or 16 rows the screens show only "needs at least 60×16"; under 120 columns
    # the dashboard switches to its compact layout (one panel at a time, `v` cycles).
    HORIZONTAL_BREAKPOINTS = [(0, "-tiny"), (60, "-narrow"), (120, "-wide")]
    # from 48 rows the dashboard's panels take 20 rows (16 below: the log keeps ≥ 10 lines at 40)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (16, "-tall"), (48, "-roomy")]
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        *,
        profile: Profile | None = None,
        theme: str | None = None,
        supervisor_factory: Callable[..., Any] | None = default_supervisor_factory,
        overrides: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        extra_profiles: Iterable[Path] = (),
        start_group: str | None = None,
    ) -> None:
        super().__init__()
        self.start_profile = profile
        self.start_group = start_group  # a prefill/decode profile's group to open (prefill when None)
        self.supervisor_factory = supervisor_factory
        self.overrides = overrides
        self.clock = clock
        self.extra_profiles = list(extra_profiles)
        for t in load_themes():
            self.register_theme(t)
        self.theme = textual_name(theme or DEFAULT_THEME)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def on_mount(self) -> None:
        if self.start_profile is not None:
            self.push_screen(self.dashboard_for(self.start_profile, from_picker=False, group=self.start_group))
        else:

            self.push_screen(PickerScreen(extra=self.extra_profiles))
        # ~120k objects from imports and start-up live as long as the app: keep them out of the
        # full collections, which otherwise stall the event loop for ~90 ms during a log flood.
        self.call_after_refresh(gc.freeze)

    @on(ProfileChosen)
    def _profile_chosen(self, message: ProfileChosen) -> None:
        self.push_screen(self.dashboard_for(message.profile, from_picker=True, group=message.group))

    def dashboard_for(self, profile: Profile, from_picker: bool, group: str | None = None) -> Screen[Any]:
        """A profile's dashboard; a prefill/decode profile's is its `group`'s (prefill unless
        named): each group is a run of its own, and the dashboard shows both groups' lines."""

        deployment = None
        if profile.groups:
            deployment, group = profile, group or "prefill"
            profile = deployment.group_profile(group)
        return DashboardScreen(
            profile,
            deployment=deployment,
            group=group if deployment is not None else None,
            supervisor_factory=self.supervisor_factory,
            overrides=self.overrides,
            clock=self.clock,
            from_picker=from_picker,
        )

    # ---- actions every screen has ----
    def action_cycle_theme(self) -> None:
        current = short_name(self.theme)
        nxt = SHORT_NAMES[(SHORT_NAMES.index(current) + 1) % len(SHORT_NAMES)] if current in SHORT_NAMES else DEFAULT_THEME
        self.theme = textual_name(nxt)
        self.notify(f"theme: {nxt}", timeout=2)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.binding_rows()))

    def action_history(self) -> None:
        profile = getattr(self.screen, "profile", None)
        name = profile.name if isinstance(profile, Profile) else None
        self.push_screen(HistoryScreen(name))

    def on_relaunch_requested(self, message: Any) -> None:
        """The history screen's `l`: a past run's flags for this profile's next run."""

        for screen in reversed(self.screen_stack):
            if isinstance(screen, DashboardScreen):
                if message.profile and message.profile != screen.profile.name:
                    self.notify(f"run {message.run_id} is of profile {message.profile}, not {screen.profile.name}",
                                severity="warning")
                    return
                screen.relaunch_with(dict(message.flags), message.run_id)
                return
        self.notify("open the profile's dashboard first, then relaunch from its history", severity="warning")

    def binding_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for the active screen and the app, as the help screen lists them:
        the dashboard's one key table (cockpit.ui.keys.DASHBOARD_KEYS), else the screen's keys."""

        if isinstance(self.screen, DashboardScreen):
            return help_rows()
        rows: list[tuple[str, str, str]] = []
        seen: set[tuple[str, str]] = set()
        for _key, active in self.screen.active_bindings.items():
            b = active.binding
            if not b.id or not b.description:
                continue
            if (b.action, b.description) in seen:
                continue
            seen.add((b.action, b.description))
            rows.append((self.get_key_display(b), b.description, b.id))
        # The screen's own keys first, then the app's.
        rows.sort(key=lambda r: r[2].startswith("app."))
        return [(k, d) for k, d, _i in rows]

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        for _key, active in screen.active_bindings.items():
            b = active.binding
            if not b.description or b.action in seen or b.action == "command_palette":
                continue
            seen.add(b.action)
            yield SystemCommand(
                b.description,
                f"key {self.get_key_display(b)}",
                partial(self.run_action, b.action, active.node),
            )
