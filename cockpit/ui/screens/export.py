"""The dashboard's ways of getting things out: the advised command line to the clipboard (`y`),
the visible log to a file (`E`), the held log in $PAGER (`o`). A mixin of DashboardScreen; files
are written in a worker thread, never on the event loop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.ui.advice import headroom_finding
from cockpit.ui.widgets.logpane import LogPane


class ExportActions:
    """Mixed into DashboardScreen before Screen: it defines only its own actions."""

    profile: Any
    snapshot: Any
    app: Any
    if TYPE_CHECKING:  # Screen's, for the type checker only (defining them would shadow Screen's)

        def notify(self, *args: Any, **kwargs: Any) -> Any: ...
        def query_one(self, *args: Any, **kwargs: Any) -> Any: ...
        def run_worker(self, *args: Any, **kwargs: Any) -> Any: ...

    def advised_command(self) -> str | None:
        """The command line of the next launch with the headroom advice applied (the run's own
        changes to the profile kept), as one shell-quoted line; None without advice."""
        import shlex

        from cockpit.face import Overrides, build_argvs

        snap = self.snapshot
        proposal = headroom_finding(snap.findings) if snap else None
        if proposal is None:
            return None
        overrides = Overrides(snap.flag_diff if snap else ()) | Overrides(proposal.changes)
        return shlex.join(build_argvs(self.profile, overrides)[0])

    def action_copy_command(self) -> None:
        """`y`: the advised command line to the clipboard (OSC 52: tmux passes it on with
        `set-clipboard on`), and in the toast, so it can be read off the screen as well."""
        try:
            line = self.advised_command()
        except Exception as exc:  # the flag table refused it: say why
            self.notify(f"cannot build the command: {exc}", severity="error", timeout=6)
            return
        if line is None:
            self.notify("no headroom advice to copy", severity="warning", timeout=3)
            return
        self.app.copy_to_clipboard(line)
        self.notify(line, title="Copied the advised command", timeout=6, markup=False)

    def _log_file_name(self, what: str) -> str:
        import time as _time

        run = self.snapshot.run.id if self.snapshot and self.snapshot.run else "no-run"
        return f"cockpit-{self.profile.name}-{run}-{what}-{_time.strftime('%H%M%S')}.log"

    def action_save_log(self) -> None:
        """`E`: the log lines the pane shows (this filter, this rank) to a file in the current
        directory; the toast names it."""
        lines = [ln.text for ln in self.query_one(LogPane).shown_lines]
        path = Path.cwd() / self._log_file_name("visible")
        self.run_worker(self._write_lines(path, lines, then_page=False), group="files", exit_on_error=False)

    def action_open_pager(self) -> None:
        """`o`: the run's log as this pane holds it (the last 20,000 lines, unfiltered) in $PAGER."""
        import tempfile

        lines = [ln.text for ln in self.query_one(LogPane).all_lines]
        path = Path(tempfile.gettempdir()) / self._log_file_name("all")
        self.run_worker(self._write_lines(path, lines, then_page=True), group="files", exit_on_error=False)

    async def _write_lines(self, path: Path, lines: list[str], then_page: bool) -> None:
        import asyncio

        def write() -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))

        try:
            await asyncio.to_thread(write)
        except OSError as exc:
            self.notify(f"could not write {path}: {exc.strerror or exc}", severity="error", timeout=6)
            return
        if not then_page:
            self.notify(f"{len(lines)} lines saved to {path}", title="Log saved", timeout=6, markup=False)
            return
        self._page(path)

    def _page(self, path: Path) -> None:
        import shlex
        import subprocess

        from textual.app import SuspendNotSupported

        pager = shlex.split(os.environ.get("PAGER") or "less -R") or ["less"]
        try:
            with self.app.suspend():
                subprocess.run([*pager, str(path)], check=False)
        except SuspendNotSupported:
            self.notify(f"this terminal cannot hand over to {pager[0]}: the log is in {path}", timeout=6, markup=False)
        except OSError as exc:
            self.notify(f"{pager[0]}: {exc.strerror or exc}; the log is in {path}", severity="error", timeout=6)

