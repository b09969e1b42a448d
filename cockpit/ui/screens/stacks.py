"""`S` on the dashboard: py-spy stacks of every process of the run (cockpit/supervisor/stacks.py),
taken by the run control (`ui/runcontrol.py`) in the dashboard's worker, saved with the run, shown
in a scrollable dialog with the odd one out first."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static


class StacksTaken(Message):
    def __init__(self, lines: list[str], error: str | None = None) -> None:
        super().__init__()
        self.lines = lines
        self.error = error


class StacksScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "dismiss_modal", "Close"), Binding("q", "dismiss_modal", "Close", show=False)]
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > VerticalScroll { width: 90%; height: 90%; border: round $accent; padding: 0 1; background: $panel; }
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = "Stacks (esc closes)"
            yield Static("\n".join(self.lines), markup=False, id="stacks-text")

    def action_dismiss_modal(self) -> None:
        self.dismiss(None)
