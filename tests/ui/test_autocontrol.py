"""The unattended mode's controller (`ui/autocontrol.py`) without Textual: the dashboard's hooks
are plain callables that record what the controller did, the policy and the snapshots are real."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from cockpit.core.findings import FlagChange
from cockpit.core.profile import parse_profile
from cockpit.supervisor.api import RunSnapshot
from cockpit.ui.autocontrol import AutoControl, AutoHooks
from cockpit.ui.unattended import Decision
from tests.ui.story import T0, story_snapshot


class Screen:
    """What the dashboard does for the controller, recorded."""

    def __init__(self, snapshot: RunSnapshot | None = None) -> None:
        self.snapshot = snapshot
        self.bells = 0
        self.notes: list[str] = []
        self.toasts: list[tuple[str, str, str]] = []
        self.restarts: list[tuple[FlagChange, ...]] = []
        self.stops = 0
        self.asked = 0
        self.timers: list[tuple[float, Any]] = []
        self.work: list[Coroutine[Any, Any, None]] = []
        self.journaled: list[tuple[str | None, Decision]] = []
        self.commands: list[tuple[str, str | None, str, str]] = []

    def hooks(self) -> AutoHooks:
        async def journal(run_id: str | None, decision: Decision, crash: Any) -> str | None:
            self.journaled.append((run_id, decision))
            return None

        async def notify_command(event: str, run_id: str | None, summary: str, action: str) -> tuple[str, str] | None:
            self.commands.append((event, run_id, summary, action))
            return ("warning", "notify: exited 3") if event == "hung" else None

        def ring() -> None:
            self.bells += 1

        def stop() -> None:
            self.stops += 1

        def ask() -> None:
            self.asked += 1

        return AutoHooks(
            ring=ring, say=self.notes.append, toast=lambda words, title, severity, _s: self.toasts.append(
                (words, title, severity)), restart=self.restarts.append, stop=stop, ask=ask,
            later=lambda s, then: self.timers.append((s, then)), spawn=self.work.append,
            run_flags=lambda: {"mem-fraction-static": 0.93, "tp": 8}, snapshot=lambda: self.snapshot,
            journal=journal, notify_command=notify_command, clock=lambda: T0)

    def run_work(self) -> None:
        async def all_of() -> None:
            for w in self.work:
                await w

        asyncio.run(all_of())
        self.work.clear()


def _control(tmp_path: Path, screen: Screen, on_crash: str = "ask", on_hang: str = "notify") -> AutoControl:
    profile = parse_profile({"name": "demo", "hosts": [{"ssh": "local"}], "on-crash": on_crash, "on-hang": on_hang,
                             "notify": ["true"],
                             "server": {"model-path": "/models/Kimi-K2.5", "tp": 8, "mem-fraction-static": 0.93}},
                            str(tmp_path / "demo.yaml"))
    return AutoControl(lambda: profile, profile.on_crash, profile.on_crash_max_per_hour, screen.hooks())


def test_a_confident_crash_restarts_with_the_advice_then_recovery_rings_again(tmp_path: Path) -> None:
    screen = Screen()
    auto = _control(tmp_path, screen, "restart-with-advice")
    crashed = story_snapshot(0.93, "ready", crashed=True)
    screen.snapshot = crashed
    auto.crashed(crashed)
    assert screen.bells == 1 and len(screen.restarts) == 1
    assert [c.as_diff() for c in screen.restarts[0]] == ["--mem-fraction-static 0.93 → 0.88"]
    assert screen.notes[-1].startswith("auto: on-crash: restart-with-advice, 1/3 this hour: restarting with ")
    assert screen.toasts[-1][1] == "Automatic action" and not screen.toasts[-1][0].startswith("auto:")
    screen.run_work()  # the journal line and the notify command, in the screen's workers
    assert [d.action for _, d in screen.journaled] == ["restart"]
    assert [c[0] for c in screen.commands] == ["crashed"]
    # the restarted run comes up READY: the recovery is rung and told once
    auto.seen(story_snapshot(0.88, "ready", restarted=True))
    auto.seen(story_snapshot(0.88, "ready", restarted=True))
    assert screen.bells == 2 and screen.notes[-1].startswith("auto: recovered: run 20261129-115811-demo READY with")
    screen.run_work()
    assert [c[0] for c in screen.commands] == ["crashed", "recovered"]


def test_the_default_policy_asks_with_the_crash_dialog(tmp_path: Path) -> None:
    screen = Screen()
    auto = _control(tmp_path, screen, "ask")
    auto.crashed(story_snapshot(0.93, "ready", crashed=True))
    assert screen.asked == 1 and screen.restarts == [] and screen.stops == 0 and screen.bells == 1
    assert screen.toasts == [] and screen.notes == []  # asking needs no note: the dialog says it all
    screen.run_work()
    assert [c[0] for c in screen.commands] == ["crashed"] and screen.journaled == []  # nothing decided


def test_on_crash_stop_stops_and_says_what_it_waits_for(tmp_path: Path) -> None:
    screen = Screen()
    auto = _control(tmp_path, screen, "stop")
    auto.crashed(story_snapshot(0.93, "ready", crashed=True))
    assert screen.stops == 1 and screen.notes[-1] == "auto: on-crash: stop: stopping, GPU memory to be released"
    screen.run_work()
    assert [d.action for _, d in screen.journaled] == ["stop"]


def test_a_backed_off_restart_waits_and_gives_way_to_the_operator(tmp_path: Path) -> None:
    screen = Screen()
    auto = _control(tmp_path, screen, "restart")
    first = story_snapshot(0.93, "ready", crashed=True)
    auto.crashed(first)
    assert len(screen.restarts) == 1 and screen.timers == []
    again = dataclasses.replace(first, run=dataclasses.replace(first.run, id="r2") if first.run else None)
    auto.crashed(again)
    [(delay, then)] = screen.timers
    assert delay == 10.0 and screen.notes[-1].endswith("restarting with unchanged flags in 10 s")
    screen.snapshot = dataclasses.replace(again, lifecycle="launching")  # the operator restarted meanwhile
    then()
    assert len(screen.restarts) == 1
    screen.snapshot = dataclasses.replace(again, lifecycle="failed")  # still the crashed run: it goes ahead
    then()
    assert len(screen.restarts) == 2
    screen.run_work()


def test_a_refused_restart_is_the_operators_or_stops_the_automatic_one(tmp_path: Path) -> None:
    screen = Screen(story_snapshot(0.93, "ready", crashed=True))
    auto = _control(tmp_path, screen, "restart")
    critical = story_snapshot(0.93, "ready").findings
    auto.restart_refused(list(critical))  # the operator's r: said, no bell
    assert screen.bells == 0 and screen.notes[-1].startswith("restart refused by preflight, the run is untouched")
    auto.crashed(screen.snapshot)  # type: ignore[arg-type]
    auto.restart_refused(list(critical))  # the automatic one: rung, told, not tried again
    assert screen.bells == 2 and auto.awaiting_recovery is None
    assert screen.notes[-1].startswith("auto: restart refused by preflight, nothing relaunched")
    screen.run_work()
    assert [c[0] for c in screen.commands] == ["crashed", "restart_refused"]


def test_a_hang_rings_once_and_its_end_says_ready(tmp_path: Path) -> None:
    screen = Screen()
    auto = _control(tmp_path, screen)
    ready = story_snapshot(0.88, "ready")
    hung_state = ready.state.copy()
    hung_state.phase, hung_state.phase_since = "hung", "2026-11-29 12:01:00"
    hung_state.hang = {"reason": "no token for 60 s with 3 running"}
    hung = dataclasses.replace(ready, state=hung_state)
    auto.seen(hung)
    auto.seen(hung)
    assert screen.bells == 1 and screen.notes == ["HUNG: no token for 60 s with 3 running · S: stacks"]
    auto.seen(ready)
    assert screen.notes[-1] == "tokens move again: READY"
    screen.run_work()
    assert [c[0] for c in screen.commands] == ["hung", "unhung"]
    assert screen.toasts == [("notify: exited 3", "", "warning")]  # a failing notify command is said
