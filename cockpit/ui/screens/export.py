"""`E` and `o` on the dashboard: lines written by the export controller (`ui/logexport.py`, in a
thread), then said in a toast or handed to $PAGER (the terminal given over while it runs). Its own
module, as `K`'s: the hand-over is Textual's, what is written is the controller's."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from textual.app import SuspendNotSupported
from textual.screen import Screen

from cockpit.ui.logexport import LogExport, pager_argv


async def save_lines(screen: Screen[Any], export: LogExport, path: Path, lines: list[str], page: bool) -> None:
    error = await export.write(path, lines)
    if error is not None:
        screen.notify(error, severity="error", timeout=6)
    elif not page:
        screen.notify(f"{len(lines)} lines saved to {path}", title="Log saved", timeout=6, markup=False)
    else:
        _page(screen, path)


def _page(screen: Screen[Any], path: Path) -> None:
    argv = pager_argv(path)
    try:
        with screen.app.suspend():
            subprocess.run(argv, check=False)
    except SuspendNotSupported:
        screen.notify(f"this terminal cannot hand over to {argv[0]}: the log is in {path}", timeout=6, markup=False)
    except OSError as exc:
        screen.notify(f"{argv[0]}: {exc.strerror or exc}; the log is in {path}", severity="error", timeout=6)
