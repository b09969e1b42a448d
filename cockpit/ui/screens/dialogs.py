"""Small modals: quit (leave the server running, the default, or stop it), confirm, help."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from cockpit.ui.keys import QUIT_BINDINGS


class QuitScreen(ModalScreen[str | None]):
    """Returns "leave", "stop" or None (cancelled)."""

    BINDINGS = QUIT_BINDINGS

    def __init__(self, profile: str, running: bool) -> None:
        super().__init__()
        self.profile = profile
        self.running = running

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -calm", id="quit-dialog"):
            yield Static("Quit Cockpit", classes="dialog-title")
            if self.running:
                yield Static(
                    f"The {self.profile} server keeps running when you leave; "
                    f"`cockpit tui {self.profile}` attaches to it again, `cockpit status {self.profile}` reports on it."
                )
                yield Static("enter leave it running (default) · s stop the server · esc cancel", classes="dialog-keys")
            else:
                yield Static("No server of this profile is running.")
                yield Static("enter quit · esc cancel", classes="dialog-keys")

    def action_leave(self) -> None:
        self.dismiss("leave")

    def action_stop(self) -> None:
        self.dismiss("stop" if self.running else "leave")

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "yes", "Yes", id="confirm.yes"),
        Binding("enter", "yes", "Yes", show=False, id="confirm.yes_enter"),
        Binding("n", "no", "No", id="confirm.no"),
        Binding("escape", "no", "No", show=False, id="confirm.no_escape"),
    ]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -calm"):
            yield Static(self.title_text, classes="dialog-title")
            yield Static(self.body, markup=False)
            yield Static("y / enter yes · n / esc no", classes="dialog-keys")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)


class AdviceChoiceScreen(ModalScreen[int | None]):
    """The advice `r` does not apply, one change per entry with its reason; returns the index."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="advice.cancel")]

    def __init__(self, findings: list[Any]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -calm", id="advice-dialog"):
            yield Static("Other advice (not applied by r)", classes="dialog-title")
            options = []
            for f in self.findings:
                text = Text(", ".join(c.as_diff() for c in f.changes), style="bold")
                text.append("\n  " + f.message)
                options.append(Option(text))
            yield OptionList(*options, id="advice-options")
            yield Static("enter choose (asked again before anything restarts) · esc cancel", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option_index)

    def action_cancel(self) -> None:
        self.dismiss(None)


class PickScreen(ModalScreen[int | None]):
    """Choose one of a few lines; returns its index (None: cancelled)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="pick.cancel")]

    def __init__(self, title: str, items: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.items = items

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -calm"):
            yield Static(self.title_text, classes="dialog-title")
            yield OptionList(*[Option(Text(i)) for i in self.items], id="pick-options")
            yield Static("enter choose (asked again before anything happens) · esc cancel", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option_index)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen underneath and of the app, with what it does. The table has the
    focus, so `↓`, `PgDn`, `End` reach the last key on a 24-row terminal."""

    BINDINGS = [
        Binding("escape", "close", "Close", id="help.close"),
        Binding("q", "close", "Close", show=False, id="help.close_q"),
        Binding("question_mark", "close", "Close", show=False, id="help.close_help"),
    ]

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -calm", id="help-dialog"):
            yield Static("Keys", classes="dialog-title")
            # a rich table wraps long descriptions under their own column (a DataTable scrolled
            # them sideways at 80 columns); the scroll box has the focus
            table = Table(box=None, show_header=True, header_style="bold", expand=True, pad_edge=False)
            table.add_column("key", no_wrap=True, style="bold")
            table.add_column("does", ratio=1)
            for key, desc in self.rows:
                table.add_row(key, desc)
            with VerticalScroll(id="help-table"):
                yield Static(table)
            yield Static("↓ PgDn scroll · ctrl+p: every action by name · esc closes", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#help-table", VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
