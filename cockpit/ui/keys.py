"""Every key binding in one place, each with an id (for keymaps) and a description (footer, help,
command palette). Nothing on ctrl+b: tmux owns it."""

from __future__ import annotations

from textual.binding import Binding, BindingType

APP_BINDINGS: list[BindingType] = [
    Binding("question_mark", "help", "Help", key_display="?", id="app.help"),
    Binding("f1", "help", "Help", show=False, id="app.help_f1"),
    Binding("t", "cycle_theme", "Theme", id="app.theme"),
    Binding("ctrl+p", "command_palette", "Commands", show=False, id="app.palette"),
]

DASHBOARD_BINDINGS: list[BindingType] = [
    Binding("q", "quit_dashboard", "Quit", id="dash.quit"),
    # early in the list so the compact footer still shows it
    Binding("question_mark", "app.help", "Help", key_display="?", id="dash.help"),
    Binding("escape", "back", "Profiles", show=False, id="dash.back"),
    Binding("f", "cycle_filter", "Filter", id="dash.filter"),
    Binding("m", "filter('memory')", "Memory lines", show=False, id="dash.filter_memory"),
    Binding("e", "filter('errors')", "Error lines", show=False, id="dash.filter_errors"),
    Binding("b", "filter('batches')", "Batch lines", show=False, id="dash.filter_batches"),
    Binding("a", "filter('all')", "All lines", show=False, id="dash.filter_all"),
    Binding("slash", "search", "Search", key_display="/", id="dash.search"),
    Binding("1", "focus_rank(1)", "Rank", key_display="0-8", id="dash.rank1"),
    *[Binding(str(n), f"focus_rank({n})", f"Rank {n}", show=False, id=f"dash.rank{n}") for n in range(2, 9)],
    Binding("0", "focus_rank(0)", "All ranks", show=False, id="dash.rank0"),
    Binding("p", "pause_log", "Pause", id="dash.pause"),
    Binding("r", "restart_advised", "Restart", id="dash.restart"),
    Binding("R", "restart_unchanged", "Restart as is", show=False, id="dash.restart_unchanged"),
    Binding("s", "stop_run", "Stop", id="dash.stop"),
    Binding("l", "launch", "Launch", show=False, id="dash.launch"),
    Binding("c", "show_crash", "Crash", show=False, id="dash.crash"),
    Binding("v", "cycle_panel", "Panel", id="dash.panel"),
    Binding("w", "why", "Arithmetic", show=False, id="dash.why"),
    Binding("h", "history", "History", id="dash.history"),
    Binding("tab", "focus_next", "Next pane", show=False, id="dash.next_pane"),
]

PICKER_BINDINGS: list[BindingType] = [
    Binding("q", "quit_picker", "Quit", id="picker.quit"),
    Binding("question_mark", "app.help", "Help", key_display="?", id="picker.help"),
    Binding("enter", "open", "Open", id="picker.open"),
    Binding("w", "why", "Arithmetic", id="picker.why"),
    Binding("g", "refresh", "Refresh", id="picker.refresh"),
    Binding("h", "history", "History", id="picker.history"),
]

CRASH_BINDINGS: list[BindingType] = [
    Binding("r", "restart_with_change", "Restart with the change", id="crash.restart"),
    Binding("e", "edit", "Edit flags first", id="crash.edit"),
    Binding("R", "restart_unchanged", "Restart unchanged", id="crash.restart_unchanged"),
    Binding("escape", "dismiss_modal", "Dismiss", id="crash.dismiss"),
]

QUIT_BINDINGS: list[BindingType] = [
    Binding("enter", "leave", "Leave it running", id="quit.leave"),
    Binding("l", "leave", "Leave it running", show=False, id="quit.leave_l"),
    Binding("s", "stop", "Stop the server", id="quit.stop"),
    Binding("escape", "cancel", "Cancel", id="quit.cancel"),
]
