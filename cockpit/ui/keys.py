"""Every key binding in one place, each with an id (for keymaps) and a description (footer, help,
command palette). Nothing on ctrl+b: tmux owns it.

DASHBOARD_KEYS is the one key table of the dashboard: the help screen shows it, and the key tables
of README.md and docs/TUI.md are generated from it (`python -m cockpit.ui.keys`);
tests/ui/test_key_table.py checks that every binding is in it and that both documents match."""

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
    Binding("n", "search_next(True)", "Older match", show=False, id="dash.search_older"),
    Binding("N", "search_next(False)", "Newer match", show=False, id="dash.search_newer"),
    Binding("ampersand", "filter_regex", "Regex filter", key_display="&", show=False, id="dash.filter_regex"),
    Binding("z", "toggle_zoom", "Zoom log", id="dash.zoom"),
    Binding("W", "toggle_wrap", "Wrap lines", show=False, id="dash.wrap"),
    Binding("y", "copy_command", "Copy advised command", show=False, id="dash.copy_command"),
    Binding("E", "save_log", "Export the visible log", show=False, id="dash.save_log"),
    Binding("S", "take_stacks", "Stacks", show=False, id="dash.stacks"),
    Binding("D", "debug_relaunch", "Debug relaunch", show=False, id="dash.debug"),
    Binding("o", "open_pager", "Log in $PAGER", show=False, id="dash.pager"),
    Binding("K", "kill_process", "Kill a GPU process", show=False, id="dash.kill"),
    Binding("1", "focus_rank(1)", "Rank", key_display="0-8", id="dash.rank1"),
    *[Binding(str(n), f"focus_rank({n})", f"Rank {n}", show=False, id=f"dash.rank{n}") for n in range(2, 9)],
    Binding("0", "focus_rank(0)", "All ranks", show=False, id="dash.rank0"),
    Binding("p", "pause_log", "Pause", id="dash.pause"),
    Binding("r", "restart_advised", "Restart", id="dash.restart"),
    Binding("R", "restart_unchanged", "Restart as is", show=False, id="dash.restart_unchanged"),
    Binding("A", "other_advice", "Other advice", show=False, id="dash.other_advice"),
    Binding("s", "stop_run", "Stop", id="dash.stop"),
    Binding("l", "launch", "Launch", show=False, id="dash.launch"),
    Binding("c", "show_crash", "Crash", show=False, id="dash.crash"),
    Binding("v", "cycle_panel", "Panel", id="dash.panel"),
    Binding("w", "why", "Arithmetic", show=False, id="dash.why"),
    Binding("i", "show_overrides", "Changed flags", show=False, id="dash.overrides"),
    Binding("h", "history", "History", id="dash.history"),
    Binding("g", "other_group", "Other group", show=False, id="dash.other_group"),
    Binding("tab", "app.focus_next", "Next pane", show=False, id="dash.next_pane"),  # the app owns focus_next
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


# (keys as the operator types them, what they do, the binding ids they stand for)
KeyRow = tuple[str, str, tuple[str, ...]]

DASHBOARD_KEYS: list[KeyRow] = [
    ("`q`", "quit: leave the server running (enter, the default) or stop it (`s`)", ("dash.quit",)),
    ("`esc`", "back to the profile picker (the same question); closes the filter box", ("dash.back",)),
    ("`f` / `m` `e` `b` `a`", "cycle the log presets / memory, errors, batches, all lines",
     ("dash.filter", "dash.filter_memory", "dash.filter_errors", "dash.filter_batches", "dash.filter_all")),
    ("`/`, `n` / `N`", "search the log (less-style: jumps to the newest match in its context), next older / newer match; `esc` clears",
     ("dash.search", "dash.search_older", "dash.search_newer")),
    ("`&`", "filter the log with a regex: only matching lines (enter applies, empty = all, esc cancels)",
     ("dash.filter_regex",)),
    ("`z`, `enter`", "maximise the log (bars and panels hidden) and back; `esc` too", ("dash.zoom", "log.zoom")),
    ("`W`, `←` / `→`", "wrap long log lines / scroll them sideways", ("dash.wrap", "log.left", "log.right")),
    ("`1`–`8`, `0`", "focus the N-th rank (`1` = TP0: bars highlight it, the log shows only its lines), `0` all ranks",
     ("dash.rank1", *(f"dash.rank{n}" for n in range(2, 9)), "dash.rank0")),
    ("`p`, `End`", "pause / follow the log (`↑`, `PgUp`, `Home` pause too; `↓`, `PgDn` scroll)",
     ("dash.pause", "log.end", "log.up", "log.down", "log.pageup", "log.pagedown", "log.home")),
    ("`r` / `R`", "restart with the headroom advice only / unchanged (both asked first)",
     ("dash.restart", "dash.restart_unchanged")),
    ("`A`", "the other advice, one change at a time with its reason (asked before anything restarts)",
     ("dash.other_advice",)),
    ("`s`", "stop the run: SIGTERM, SIGKILL after a timeout, wait until its GPU memory is released", ("dash.stop",)),
    ("`l`", "launch again (after a refused preflight or an ended run)", ("dash.launch",)),
    ("`c`", "show the crash dialog again", ("dash.crash",)),
    ("`v`", "next panel in the compact layout: advice, plots, timeline, GPUs (history and processes)", ("dash.panel",)),
    ("`K`", "kill a GPU process: pick it from the list, then confirm (SIGKILL on its host)", ("dash.kill",)),
    ("`w`", "show the arithmetic behind the advice", ("dash.why",)),
    ("`i`", "every flag this run changed from the profile, in full (the header abbreviates them when narrow)",
     ("dash.overrides",)),
    ("`g`", "a prefill/decode deployment: the other group's dashboard (this group's server keeps running; asked first "
            "when the other has no run, since opening it launches it)", ("dash.other_group",)),
    ("`h`", "history of runs: space picks several to compare, `l` relaunches one's flags", ("dash.history",)),
    ("`tab`", "move the keyboard focus to the next pane", ("dash.next_pane",)),
    ("`y`", "copy the advised command line (headroom advice applied) to the clipboard (OSC 52) and show it",
     ("dash.copy_command",)),
    ("`E`", "export the log lines the pane shows (this filter and rank) to a file in the current directory",
     ("dash.save_log",)),
    ("`S`", "stacks: py-spy dump of every process of the run (ranks grouped, the odd one out named), saved with the run",
     ("dash.stacks",)),
    ("`D`", "debug relaunch: stop and launch again with NCCL/PyTorch and the engine's debugging settings (listed and asked first; journaled as a debug run)",
     ("dash.debug",)),
    ("`o`", "open the log the pane holds (the last 20,000 lines, unfiltered) in `$PAGER` (default `less -R`)",
     ("dash.pager",)),
    ("`t`", "next theme: dark, light, high-contrast (`--theme` or the config file choose the first)", ("app.theme",)),
    ("`?`, `F1`", "this list of keys (scrolls: `↓`, `PgDn`)", ("dash.help", "app.help", "app.help_f1")),
    ("`ctrl+p`", "command palette: every action by name", ("app.palette",)),
]


def markdown_table(rows: list[KeyRow] | None = None) -> str:
    """The key table as README.md and docs/TUI.md carry it."""
    out = ["| key | does |", "| --- | --- |"]
    for keys, does, _ids in rows if rows is not None else DASHBOARD_KEYS:
        out.append(f"| {keys} | {does} |")
    return "\n".join(out) + "\n"


def help_rows(rows: list[KeyRow] | None = None) -> list[tuple[str, str]]:
    """(keys, what they do) for the help screen: the same table, without the backticks."""
    return [(k.replace("`", ""), d.replace("`", "")) for k, d, _ids in (rows if rows is not None else DASHBOARD_KEYS)]


if __name__ == "__main__":
    print(markdown_table(), end="")
