"""Run the dashboard on a story snapshot in a real terminal (for the tmux test and for looking).

    python -m tests.ui.preview [ready|crashed|restarted|loading] [--theme NAME]
"""

from __future__ import annotations

import sys

from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from tests.ui.story import T0, story_log_lines, story_snapshot, two_node_snapshot
from tests.ui.test_dashboard_snapshots import PROFILE


class PreviewApp(CockpitApp):
    def __init__(self, which: str, theme: str) -> None:
        super().__init__(profile=PROFILE, theme=theme, supervisor_factory=None, clock=lambda: T0)
        self.which = which

    def on_mount(self) -> None:
        super().on_mount()
        self.call_after_refresh(self._feed)

    def _feed(self) -> None:
        screen = self.screen
        assert isinstance(screen, DashboardScreen)
        screen.query_one("#log").add_lines(story_log_lines())  # type: ignore[attr-defined]
        snap = {
            "ready": lambda: story_snapshot(0.93, "ready"),
            "crashed": lambda: story_snapshot(0.93, "ready", crashed=True),
            "restarted": lambda: story_snapshot(0.88, "ready", restarted=True),
            "loading": lambda: story_snapshot(0.93, "loading"),
            "two-node": two_node_snapshot,
        }[self.which]()
        screen.apply_snapshot(snap)


if __name__ == "__main__":
    args = sys.argv[1:]
    theme = "dark"
    if "--theme" in args:
        i = args.index("--theme")
        theme = args[i + 1]
        del args[i : i + 2]
    PreviewApp(args[0] if args else "ready", theme).run()
