"""`S` on the dashboard: py-spy stacks of every process of the run (cockpit/supervisor/stacks.py),
taken by the run control (`ui/runcontrol.py`) in a worker, saved with the run, shown in a scrollable dialog with the odd one out first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


class StacksActions:
    """Mixed into DashboardScreen before Screen."""

    control: Any  # the dashboard's RunControl
    app: Any
    if TYPE_CHECKING:

        def notify(self, *args: Any, **kwargs: Any) -> Any: ...
        def run_worker(self, *args: Any, **kwargs: Any) -> Any: ...
        def post_message(self, message: Message) -> bool: ...

    def action_take_stacks(self) -> None:
        if self.control.run_info is None:
            self.notify("no run to take stacks of", severity="warning", timeout=3)
            return
        self.notify("taking stacks of every process (py-spy)…", timeout=3)
        self.run_worker(self._take_stacks(), name="stacks", group="stacks", exclusive=True, exit_on_error=False)

    async def _take_stacks(self) -> None:
        try:
            lines = await self.control.stacks()
        except Exception as exc:
            self.post_message(StacksTaken([], str(exc) or type(exc).__name__))
            return
        self.post_message(StacksTaken(lines))

    def on_stacks_taken(self, message: StacksTaken) -> None:
        if message.error is not None:
            self.notify(f"stacks failed: {message.error}", severity="error", timeout=6, markup=False)
            return
        self.app.push_screen(StacksScreen(message.lines))
