"""The dashboard's ways of getting things out, as a controller the screen owns: the advised
command line (`y`), the visible log to a file (`E`), the held log for $PAGER (`o`). No Textual
here: the screen copies, notifies and hands the terminal to the pager; files are written in a
thread, never on the event loop (tests/ui/test_logexport.py)."""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cockpit.face import Overrides, Profile, RunSnapshot, build_argvs
from cockpit.ui.advice import headroom_finding


class LogExport:
    def __init__(self, profile: Callable[[], Profile], clock: Callable[[], float] = time.time) -> None:
        self.profile = profile  # the profile as the dashboard holds it now (`l` reloads it)
        self.clock = clock

    def advised_command(self, snap: RunSnapshot | None) -> str | None:
        """The command line of the next launch with the headroom advice applied (the run's own
        changes to the profile kept), as one shell-quoted line; None without advice. Raises what
        the flag table raises when it refuses the flags."""
        proposal = headroom_finding(snap.findings) if snap else None
        if snap is None or proposal is None:
            return None
        # the gate's own builder: the line shows what a launch would run (node 0's argv)
        overrides = Overrides(snap.flag_diff) | Overrides(proposal.changes)
        return shlex.join(build_argvs(self.profile(), overrides)[0])

    def file_name(self, what: str, snap: RunSnapshot | None) -> str:
        run = snap.run.id if snap and snap.run else "no-run"
        stamp = time.strftime("%H%M%S", time.localtime(self.clock()))
        return f"cockpit-{self.profile().name}-{run}-{what}-{stamp}.log"

    async def write(self, path: Path, lines: Sequence[str]) -> str | None:
        """The lines to a new file only this user reads (never over an existing one); the error in
        the operator's words, or None."""

        def write() -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))

        try:
            await asyncio.to_thread(write)
        except OSError as exc:
            return f"could not write {path}: {exc.strerror or exc}"
        return None


def pager_argv(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    """$PAGER (else `less -R`) on `path`."""
    env = os.environ if environ is None else environ
    pager = shlex.split(env.get("PAGER") or "less -R") or ["less"]
    return [*pager, str(path)]
