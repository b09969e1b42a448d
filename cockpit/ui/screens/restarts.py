"""The dashboard's restart questions: `r` (the headroom advice only), `A` (the other advice, one
change at a time), `R` (unchanged), `D` (the engine's debugging settings) and a relaunch with
another run's flags from the history. Each lists what would change and asks; `restart` gets the
confirmed changes (the screen's restart: the gate on the new flags, stop, launch). Its own module,
as `K`'s (killprocess.py): the dialogs are Textual's, the decisions are the caller's callbacks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from textual.screen import Screen

from cockpit.face import FlagChange, RunSnapshot, plural
from cockpit.ui.advice import headroom_finding, other_advice
from cockpit.ui.screens.dialogs import AdviceChoiceScreen, ConfirmScreen

Restart = Callable[[tuple[FlagChange, ...]], None]


def _confirm(screen: Screen[Any], title: str, body: str, then: Callable[[], None]) -> None:
    def answered(yes: bool | None) -> None:
        if yes:
            then()

    screen.app.push_screen(ConfirmScreen(title, body), answered)


def ask_restart_advised(screen: Screen[Any], snap: RunSnapshot | None, restart: Restart) -> None:
    """`r`: the headroom advice only, never every finding's change at once."""
    proposal = headroom_finding(snap.findings) if snap else None
    others = other_advice(snap.findings) if snap else []
    if proposal is None:
        more = " · A offers the other advice" if others else ""
        screen.notify(f"no headroom advice: R restarts unchanged{more}", severity="warning", timeout=4)
        return
    changes = tuple(proposal.changes)
    body = "Restart with " + ", ".join(c.as_diff() for c in changes) + "?\n" + proposal.message
    if others:
        body += (f"\n\nNot included: {plural(len(others), 'other change')}; A lists "
                 f"{'it with its reason' if len(others) == 1 else 'them with their reasons'}.")
    _confirm(screen, "Restart with the headroom advice", body, lambda: restart(changes))


def ask_other_advice(screen: Screen[Any], snap: RunSnapshot | None, restart: Restart) -> None:
    """`A`: the advice `r` leaves out, one change at a time, each with its reason."""
    others = other_advice(snap.findings) if snap else []
    if not others:
        screen.notify("no other advice with a change", timeout=3)
        return

    def chosen(index: int | None) -> None:
        if index is None:
            return
        f = others[index]
        changes = tuple(f.changes)
        body = f"Restart with {', '.join(c.as_diff() for c in changes)}?\n{f.message}"
        _confirm(screen, "Restart with this advice", body, lambda: restart(changes))

    screen.app.push_screen(AdviceChoiceScreen(others), chosen)


def ask_restart_unchanged(screen: Screen[Any], restart: Restart) -> None:
    _confirm(screen, "Restart", "Restart with the same flags?", lambda: restart(()))


def ask_debug_relaunch(screen: Screen[Any], backend: str, relaunch: Callable[[], None]) -> None:
    """`D`: relaunch with the engine's debugging settings, listed and asked first; the journal
    records the run as a debug run."""
    from cockpit.face import get_backend

    env, flags = get_backend(backend).launch.debug_settings()
    body = "\n".join([*(f"  {k}={v}" for k, v in env.items()), *(f"  --{k} {v}" for k, v in flags.items())])
    _confirm(screen, "Debug relaunch", f"Stop the run and launch it again with:\n{body}\n"
             "(journaled as a debug run). Go ahead?", relaunch)


def ask_relaunch_with(screen: Screen[Any], current: Mapping[str, Any], flags: Mapping[str, Any], source: str | None,
                      restart: Restart) -> None:
    """Restart with another run's flags: only the ones that differ become changes."""
    changes = tuple(
        FlagChange(f"--{k.lstrip('-')}", current.get(k), v) for k, v in flags.items() if current.get(k) != v
    )
    words = ", ".join(c.as_diff() for c in changes) or "the same flags"
    origin = f" of run {source}" if source else ""
    _confirm(screen, "Relaunch", f"Restart with the flags{origin}: {words}?", lambda: restart(changes))
