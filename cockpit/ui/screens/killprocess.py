"""`K` on the dashboard: pick one of the GPU processes the GPU panel lists, confirm, SIGKILL it on
its host through the run control. Its own module because the dialog flow (a pick, then a confirm
that says whether the process is a rank of this run) is the dashboard's business only through
`K`; the kill itself is the run control's, in a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.screen import Screen

from cockpit.face import FlagChange, GpuProcess, RunSnapshot
from cockpit.ui import format as fmt
from cockpit.ui.screens.dialogs import ConfirmScreen, PickScreen
from cockpit.ui.widgets.processes import rank_of_gpu


def ask_to_kill_a_gpu_process(screen: Screen[Any], snap: RunSnapshot | None, kill: Callable[[Any], None]) -> None:
    """The run's own processes listed last (killing one crashes the run, and the confirm says so);
    `kill` gets the confirmed process."""
    procs = sorted(snap.gpu_processes, key=lambda p: (p.belongs_to_run, p.host, p.gpu_index, p.pid)) if snap else []
    if not procs:
        screen.notify("no GPU process to kill", timeout=3)
        return
    assert snap is not None

    def words(p: Any) -> str:
        rank = rank_of_gpu(snap, p.host, p.gpu_index) or "—"
        owner = "a rank of this run: killing it crashes the run" if p.belongs_to_run else "not this run"
        return f"pid {p.pid} on GPU {p.gpu_index} of {p.host or 'local'} ({rank}), {fmt.gb(p.used_gb, 1)} GiB, {owner}"

    def chosen(index: int | None) -> None:
        if index is None:
            return
        proc = procs[index]

        def answered(yes: bool | None) -> None:
            if yes:
                kill(proc)

        screen.app.push_screen(ConfirmScreen("Kill a GPU process", f"SIGKILL {words(proc)}?"), answered)

    screen.app.push_screen(PickScreen("GPU processes", [words(p) for p in procs]), chosen)


def ask_to_kill_leftovers(screen: Screen[Any], leftovers: tuple[GpuProcess, ...], changes: tuple[FlagChange, ...] | None,
                          restart: Callable[[tuple[FlagChange, ...]], None],
                          kill: Callable[[tuple[GpuProcess, ...]], None]) -> str:
    """Processes outside the run still hold GPU memory after a stop: kill them, then `restart`
    with `changes` (None: only free the GPUs, `kill`)? Returns the header's words for them."""
    procs = ", ".join(f"pid {p.pid} on GPU {p.gpu_index}" + (f" ({p.used_gb:.1f} GiB)" if p.used_gb else "")
                      for p in leftovers)
    if changes is None:
        then = "free the GPUs"
    elif changes:
        then = "launch with " + ", ".join(c.as_diff() for c in changes)
    else:
        then = "launch again unchanged"

    def answered(yes: bool | None) -> None:
        if not yes:
            return
        if changes is not None:
            restart(changes)
        else:
            kill(leftovers)

    screen.app.push_screen(
        ConfirmScreen("GPU memory still held", f"{procs} still hold GPU memory. Kill them and {then}?"), answered
    )
    return f"GPU memory still held: {procs}"
