"""The profile picker: every profile Cockpit can find; for the highlighted one, the command line
it would run and the preflight findings with their arithmetic — before anything launches."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from cockpit.face import (
    CockpitError,
    Finding,
    Journal,
    Profile,
    ProfileError,
    Supervisor,
    calibration_runs,
    gate,
    list_profile_files,
    load_profile,
    sort_findings,
)
from cockpit.ui.keys import PICKER_BINDINGS
from cockpit.ui.messages import ProfileChosen
from cockpit.ui.screens.dashboard import too_small_words
from cockpit.ui.widgets.advice import MARKS, change_words, predicted_words

LIVE_CHECK_TIMEOUT_S = 8.0
# the preview's host measurement (an SSH connection, the agent's one sample, the model probe): 20 s
# was passed on a busy 2-core machine (CI); the preview says "measuring…" meanwhile and the keys work
MEASURE_TIMEOUT_S = 45.0


@dataclass
class Preview:
    path: Path
    group: str | None = None  # one group of a prefill/decode profile: its own command and findings
    deployment: Profile | None = None  # that prefill/decode profile, when `group` is set
    profile: Profile | None = None
    error: str | None = None
    argv: list[str] | None = None
    argv_error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    preflight_error: str | None = None
    measured: str = "measuring the hosts…"  # where the facts behind `findings` come from


class PreviewReady(Message):
    def __init__(self, preview: Preview) -> None:
        super().__init__()
        self.preview = preview


class LiveRuns(Message):
    def __init__(self, live: dict[Path, str], outcomes: dict[Path, str] | None = None,
                 groups: dict[Path, list[str]] | None = None, group_live: dict[tuple[Path, str], str] | None = None) -> None:
        super().__init__()
        self.live = live  # profile path -> run id
        self.outcomes = outcomes or {}  # profile path -> its last run in words
        self.groups = groups or {}  # a prefill/decode profile's path -> its roles, prefill first
        self.group_live = group_live or {}  # (path, role) -> the group's live run id


def profile_files(extra: list[Path]) -> list[Path]:

    files = list(list_profile_files())
    for p in extra:
        if p not in files:
            files.append(p)
    return files


def build_preview(path: Path, group: str | None = None) -> Preview:
    """Load, build the command line, run preflight (local facts). Runs in a thread worker. A group
    of a prefill/decode profile is previewed as the profile of its own servers (`NAME.ROLE`)."""
    pv = Preview(path=path, group=group)
    try:
        pv.profile = load_profile(path)
        if group is not None:
            pv.deployment, pv.profile = pv.profile, pv.profile.group_profile(group)
    except (ProfileError, ValueError) as exc:
        pv.error = str(exc)
        return pv
    if pv.profile.groups:  # the deployment: no server of its own, its groups are previewed one by one
        return pv
    # the gate `up` walks, unmeasured: this machine's facts, remote hosts unknown (preflight says
    # so) until the measured gate answers (PickerScreen._measure); node 0's command as it launches

    try:
        checked = asyncio.run(gate(pv.profile, measure=False, plan=False))
    except Exception as exc:  # a rule that cannot run on these facts: the operator must see why
        pv.preflight_error = str(exc)
        return pv
    if checked.bad_input is not None or not checked.argvs:  # FlagError and friends: the operator must see why
        pv.argv_error = pv.preflight_error = str(checked.bad_input)
        return pv
    pv.argv = checked.argvs[0]
    pv.findings = checked.findings
    return pv


def outcome_words(run: Any | None) -> str:
    """A profile's last run in a few words, for the list: READY, crashed and how, stopped, or never."""
    if run is None:
        return "never run"
    outcome = getattr(run, "outcome", None)
    if outcome == "crashed":
        kind = getattr(run, "crash_kind", None)
        return f"crashed: {kind}" if kind and kind != "unknown" else "crashed"
    if outcome == "ready":
        return "READY"
    if outcome == "stopped":
        return "stopped"
    return "started, end not recorded"


def last_outcomes(names: list[str]) -> dict[str, str]:
    """Profile name → outcome_words of its newest journal run (the journal read-only)."""

    try:
        j = Journal.open(readonly=True)
    except CockpitError:
        return {}
    try:
        out = {}
        for name in names:
            runs = j.list_runs(name, limit=1)
            out[name] = outcome_words(runs[0] if runs else None)
        return out
    finally:
        j.close()

class PlanMade(Message):
    """The memory plan of the previewed profile, as one finding (after the measured preflight)."""

    def __init__(self, path: Path, finding: Finding, group: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.group = group
        self.finding = finding


class PreviewMeasured(Message):
    """Preflight with facts measured on the profile's hosts (the same check a launch runs)."""

    def __init__(self, path: Path, findings: list[Finding] | None, error: str | None, group: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.group = group
        self.findings = findings
        self.error = error


class PickerScreen(Screen[None]):
    BINDINGS = PICKER_BINDINGS

    def __init__(self, extra: list[Path] | None = None) -> None:
        super().__init__()
        self.extra = extra or []
        self.files: list[Path] = []  # the profile files found
        self.paths: list[Path] = []  # one per row: a prefill/decode profile's group rows repeat its path
        self.roles: list[str | None] = []  # per row: None, or the group that row opens
        self.groups: dict[Path, list[str]] = {}
        self.group_live: dict[tuple[Path, str], str] = {}
        self._resumed_once = False  # the first ScreenResume comes with the mount
        self.live: dict[Path, str] = {}
        self.outcomes: dict[Path, str] = {}
        self.preview: Preview | None = None
        self.show_arithmetic = False

    def compose(self) -> ComposeResult:
        yield Static(too_small_words(0, 0), id="too-small")
        with Vertical(id="body"):
            yield Static("Cockpit · profiles", id="picker-title")
            with Horizontal():
                yield OptionList(id="picker-list")
                with VerticalScroll(id="picker-preview"):
                    yield Static("", id="preview-text")
        yield Footer()

    def on_mount(self) -> None:
        self._reload()

    def on_screen_resume(self) -> None:
        # Back from a dashboard: the run may have been left running (or stopped) meanwhile. The
        # first resume comes with the mount, whose check is already under way: a second one would
        # cancel it (one check at a time), and a cancelled check posts nothing.
        if self._resumed_once and self.paths:
            self._find_live_runs(list(self.files))
        self._resumed_once = True

    def on_resize(self, event: Resize) -> None:
        self.query_one("#too-small", Static).update(too_small_words(event.size.width, event.size.height))
        self.query_one(Footer).compact = event.size.width < 120  # more keys fit on a narrow terminal

    def _reload(self) -> None:
        self.files = profile_files(self.extra)
        self._fill_list()
        self.query_one(OptionList).focus()
        self._find_live_runs(list(self.files))

    def _fill_list(self) -> None:
        ol = self.query_one(OptionList)
        highlighted = ol.highlighted
        ol.clear_options()
        self.paths, self.roles = [], []
        for p in self.files:
            self.paths.append(p)
            self.roles.append(None)
            for r in self.groups.get(p, []):
                self.paths.append(p)
                self.roles.append(r)
        if not self.paths:
            self.query_one("#preview-text", Static).update(
                "No profiles found in ./profiles, the user config dir or the bundled examples."
            )
            return
        for p, role in zip(self.paths, self.roles, strict=True):
            if role is not None:  # a group of the deployment above: `NAME.ROLE`, as `cockpit up` names it
                last = role == self.groups[p][-1]
                label = Text(("  └ " if last else "  ├ ") + f"{p.stem}.{role}")
                if (p, role) in self.group_live:
                    label.append("  ● live", style="bold")
                ol.add_option(Option(label, id=f"{p}::{role}"))
                continue
            label = Text(p.stem)
            if p in self.groups:
                label.append("  prefill/decode", style="dim")
            if p in self.live:
                label.append("  ● live", style="bold")
            elif p in self.outcomes:
                words = self.outcomes[p]
                label.append("  " + words, style="red" if "crashed" in words else "dim")
            ol.add_option(Option(label, id=str(p)))
        ol.highlighted = highlighted if highlighted is not None and highlighted < len(self.paths) else 0

    @on(OptionList.OptionHighlighted)
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_id:
            path, _, role = event.option_id.partition("::")
            self.query_one("#preview-text", Static).update(f"checking {Path(path).name}{'.' + role if role else ''}…")
            self._load_preview(Path(path), role or None)

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.action_open()

    @work(thread=True, exclusive=True, group="preview")
    def _load_preview(self, path: Path, group: str | None = None) -> None:
        self.post_message(PreviewReady(build_preview(path, group)))

    @work(exclusive=True, group="live", exit_on_error=False)
    async def _find_live_runs(self, paths: list[Path]) -> None:

        async def live_run(path: Path, role: str | None) -> str | None:
            sup = None
            try:
                prof = load_profile(path)
                sup = Supervisor(prof.group_profile(role) if role else prof)
                run = await asyncio.wait_for(sup.attach(), timeout=LIVE_CHECK_TIMEOUT_S)
                return run.id if run is not None else None
            except Exception:  # unreachable host, bad profile: simply not marked live
                return None
            finally:
                if sup is not None:
                    with contextlib.suppress(Exception):
                        await sup.close()

        names: dict[Path, str] = {}
        groups: dict[Path, list[str]] = {}
        targets: list[tuple[Path, str | None]] = []  # what may have a live run: a plain profile, or each group

        def load_all() -> None:  # in a thread: every file of the folder, one bad file costs only itself
            for p in paths:
                with contextlib.suppress(Exception):
                    prof = load_profile(p)
                    names[p] = prof.name
                    if prof.groups:
                        groups[p] = [role for role, _gp in prof.group_profiles()]
                        targets.extend((p, role) for role in groups[p])
                    else:
                        targets.append((p, None))

        await asyncio.to_thread(load_all)
        words = await asyncio.to_thread(last_outcomes, sorted(set(names.values())))
        outcomes = {p: words[n] for p, n in names.items() if n in words}
        # the journal is local: its outcomes show at once, not after the slowest host answers
        # (an unreachable one costs LIVE_CHECK_TIMEOUT_S); the live marks stay as they were until then
        self.post_message(LiveRuns(dict(self.live), outcomes, groups, dict(self.group_live)))
        found = await asyncio.gather(*(live_run(p, role) for p, role in targets))
        live = {p: run_id for (p, role), run_id in zip(targets, found, strict=True) if run_id and role is None}
        group_live = {(p, role): run_id for (p, role), run_id in zip(targets, found, strict=True) if run_id and role}
        self.post_message(LiveRuns(live, outcomes, groups, group_live))

    @on(LiveRuns)
    def _live(self, message: LiveRuns) -> None:
        self.live = message.live
        self.outcomes = message.outcomes
        self.groups = message.groups
        self.group_live = message.group_live
        self._fill_list()

    @on(PreviewReady)
    def _preview_ready(self, message: PreviewReady) -> None:
        self.preview = message.preview
        self._render_preview()
        if message.preview.profile is not None and not message.preview.profile.groups:
            self._measure(message.preview.path, message.preview.profile, message.preview.group)

    @work(exclusive=True, group="measure", exit_on_error=False)
    async def _measure(self, path: Path, profile: Profile, group: str | None = None) -> None:
        # the gate `up` walks (cockpit check's findings): the hosts measured, node 0's model path and
        # port, then the memory plan, calibrated by the journal as the CLI's is

        try:
            runs = await asyncio.to_thread(calibration_runs, profile.name)
            checked = await asyncio.wait_for(gate(profile, runs=runs, dist_addr="show"), timeout=MEASURE_TIMEOUT_S)
            self.post_message(PreviewMeasured(path, sort_findings(list(checked.findings)), None, group))
            if checked.plan is not None:
                self.post_message(PlanMade(path, checked.plan, group))
        except Exception as exc:  # a host that does not answer in time: keep the unmeasured findings, say why
            self.post_message(PreviewMeasured(path, None, str(exc) or type(exc).__name__, group))

    @on(PlanMade)
    def _plan_made(self, message: PlanMade) -> None:
        pv = self.preview
        if pv is None or pv.path != message.path or pv.group != message.group:
            return
        pv.findings = sort_findings([*(f for f in pv.findings if f.id != message.finding.id), message.finding])
        self._render_preview()

    @on(PreviewMeasured)
    def _measured(self, message: PreviewMeasured) -> None:
        pv = self.preview
        if pv is None or pv.path != message.path or pv.group != message.group:
            return
        if message.findings is not None:
            pv.findings = message.findings
            pv.preflight_error = None
            pv.measured = "facts measured on the hosts"
        else:
            pv.measured = f"hosts not measured: {message.error}"
        self._render_preview()

    def _render_preview(self) -> None:
        pv = self.preview
        if pv is None:
            return
        t = Text()
        t.append(pv.path.stem + (f".{pv.group}" if pv.group else ""), style="bold")
        t.append(f"  {pv.path}\n", style="dim")
        if pv.error:
            t.append("\n" + pv.error + "\n", style="bold red")
            self.query_one("#preview-text", Static).update(t)
            return
        prof = pv.profile
        assert prof is not None
        if prof.groups:
            t.append(self._deployment_words(prof))
            self.query_one("#preview-text", Static).update(t)
            return
        run_id = self.live.get(pv.path) if pv.group is None else self.group_live.get((pv.path, pv.group))
        if run_id:
            t.append(f"● a run is live ({run_id}): enter attaches to it\n", style="bold")
        else:
            t.append("no live run: enter runs preflight, then launches\n", style="dim")
        t.append(f"hosts: {', '.join(h.label for h in prof.hosts)} · backend {prof.backend} {prof.version or ''}\n")
        t.append("\ncommand\n", style="bold")
        if pv.argv is not None:
            t.append("  " + shlex.join(pv.argv) + "\n")
        else:
            t.append("  " + (pv.argv_error or "unknown") + "\n", style="red")
        t.append("\npreflight", style="bold")
        t.append(f"  ({pv.measured})\n", style="dim")
        if pv.preflight_error:
            t.append("  " + pv.preflight_error + "\n", style="red")
        elif not pv.findings:
            t.append("  nothing to report\n", style="dim")
        for f in pv.findings:
            style = {"critical": "bold red", "warning": "bold yellow", "ok": "green"}.get(f.severity, "")
            t.append(f"  {MARKS.get(f.severity, '○')} {f.severity}: ", style=style)
            t.append(f.message + "\n")
            if f.changes:
                pred = predicted_words(f, None)
                t.append("    → " + change_words(f) + (f" · {pred}" if pred else "") + "\n", style="bold")
            if f.arithmetic and (self.show_arithmetic or f.severity == "critical"):
                t.append("    " + f.arithmetic.replace("\n", "\n    ") + "\n", style="dim")
        self.query_one("#preview-text", Static).update(t)

    def _deployment_words(self, prof: Profile) -> str:
        path = self.preview.path if self.preview else None
        lines = [f"prefill/decode deployment · backend {prof.backend} {prof.version or ''}",
                 "each group is a run of its own; enter opens the prefill group's dashboard, which shows both",
                 "groups (`g` switches to the other); the rows below open one group", ""]
        for role, gp in prof.group_profiles():
            live = self.group_live.get((path, role)) if path else None
            state = f"● live ({live})" if live else "no live run"
            lines.append(f"  {role} group {gp.name}: {', '.join(h.label for h in gp.hosts)} · {state}")
        if prof.router is not None:
            lines.append(f"  router: port {prof.router.port} (cockpit plan {prof.name} shows its command)")
        return "\n".join(lines) + "\n"

    # ---- actions ----
    def action_open(self) -> None:
        pv = self.preview
        ol = self.query_one(OptionList)
        if ol.highlighted is None or not self.paths:
            return
        path, role = self.paths[ol.highlighted], self.roles[ol.highlighted]
        if pv is None or pv.path != path or pv.group != role or pv.profile is None:
            if pv is not None and pv.path == path and pv.error:
                self.notify(pv.error, severity="error")
            else:
                self.notify("still checking this profile…", severity="warning")
            return
        if role is not None:  # one group: its dashboard, which shows the deployment's both groups
            self.post_message(ProfileChosen(pv.deployment or pv.profile, group=role))
            return
        self.post_message(ProfileChosen(pv.profile))

    def action_why(self) -> None:
        self.show_arithmetic = not self.show_arithmetic
        self._render_preview()

    def action_refresh(self) -> None:
        self._reload()

    def action_history(self) -> None:
        self.app.action_history()  # type: ignore[attr-defined]

    def action_quit_picker(self) -> None:
        self.app.exit(0)
