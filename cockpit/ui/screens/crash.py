"""The crash modal: what died, where, the decisive lines, the diagnosis and the proposed change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from cockpit.face import (
    DEFAULT_BACKEND,
    ENGINE_WATCHDOG,
    HOST_CACHE_SHORT,
    KILLED_BY_SIGNAL,
    Crash,
    Finding,
    FlagChange,
    clean_text,
    decisive_tail,
    get_backend,
    value_text,
    words_of,
)
from cockpit.ui import format as fmt
from cockpit.ui.advice import proposed_finding
from cockpit.ui.keys import CRASH_BINDINGS
from cockpit.ui.widgets.advice import change_words, predicted_words


@dataclass(frozen=True)
class RestartChoice:
    """What the operator chose: restart with these changes (empty = unchanged)."""

    changes: tuple[FlagChange, ...]


def phase_words(phase: str) -> str:
    """A crash phase as the operator says it (`graph_capture` → `CUDA graph capture`)."""
    return {
        "graph_capture": "CUDA graph capture",
        "startup": "start-up",
        "unknown": "an unknown phase",
        "kv_pool": "KV pool allocation",
    }.get(phase, phase.replace("_", " "))


def crash_kind_words(kind: str, backend: str | None = None) -> str:
    """The crash kind in words: the engine's own label for a kind named in its words (SGLang's
    HiCache), the concept's otherwise."""
    own = words_of(backend).crash_labels.get(kind) if backend else None
    if own:
        return own
    return {
        "cuda_oom": "CUDA out of memory",
        "graph_capture_oom": "out of memory during CUDA graph capture",
        "kv_pool_exhausted": "KV pool exhausted",
        "init_not_enough_memory": "not enough memory at startup",
        HOST_CACHE_SHORT: "host cache: not enough host memory",
        "host_oom_killed": "killed by the host's OOM killer",
        KILLED_BY_SIGNAL: "killed by signal 9 (SIGKILL)",
        "nccl_timeout": "NCCL timeout",
        "nccl_error": "NCCL error",
        ENGINE_WATCHDOG: "the engine's watchdog fired",
        "startup_error": "startup error",
        "warmup_failed": "warmup failed",
        "port_in_use": "port already in use",
    }.get(kind, "unknown crash")


class CrashScreen(ModalScreen[RestartChoice | None]):
    BINDINGS = CRASH_BINDINGS

    def __init__(
        self,
        crash: Crash,
        findings: tuple[Finding, ...] | list[Finding],
        current_tokens: int | None,
        run_flags: dict[str, object] | None = None,
        validate: Callable[[dict[str, Any]], None] | None = None,
        backend: str = DEFAULT_BACKEND,
        log_tail: list[str] | None = None,
        log_format: str | None = "unknown",
    ) -> None:
        super().__init__()
        self.backend = backend
        self.log_tail = log_tail or []
        self.log_format = log_format
        self.crash = crash
        self.findings = list(findings)
        self.proposal = proposed_finding(self.findings)
        self.current_tokens = current_tokens
        self.run_flags = run_flags or {}
        self.validate = validate

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="crash-dialog"):
            yield Static("", classes="dialog-title", id="crash-title", markup=False)
            yield Static("", id="crash-info", markup=False)
            with VerticalScroll(id="crash-lines"):
                yield Static("", classes="dialog-lines", id="crash-decisive", markup=False)
            yield Static("", id="crash-diagnosis", markup=False)
            yield Static("", classes="dialog-diff", id="crash-diff", markup=False)
            yield Input(placeholder="FLAG=VALUE …", id="crash-edit")
            yield Static("", classes="dialog-keys", id="crash-keys", markup=False)

    def update_crash(
        self,
        crash: Crash,
        findings: tuple[Finding, ...] | list[Finding],
        current_tokens: int | None,
        log_tail: list[str] | None = None,
        log_format: str | None = "unknown",
    ) -> None:
        """The same crash, judged again as more of its lines arrived: this dialog is updated in
        place (one crash, one dialog: stacked dialogs made `R` look as if it did nothing)."""
        self.crash, self.findings = crash, list(findings)
        self.proposal = proposed_finding(self.findings)
        self.current_tokens = current_tokens
        self.log_tail = log_tail or self.log_tail
        self.log_format = log_format
        if self.is_mounted:
            self._fill()

    def _keys_words(self) -> str:
        if self.proposal is not None:
            return "r restart with the change · e edit flags first · R restart unchanged · esc dismiss"
        return "e edit flags first · R restart unchanged · esc dismiss"

    def _fill(self) -> None:
        c = self.crash
        # No log line decided this crash (the process just exited): say so, and show the log's
        # own last lines, as `cockpit up`/`status` do, rather than a kind and phase we do not know.
        unexplained = c.kind == "unknown" and c.line <= 0
        where = f" on {c.rank}" if c.rank else ""
        phase = phase_words(c.phase)
        if unexplained:
            title = "ENDED: the server exited, and its log names no known crash"
        else:
            title = f"CRASHED: {crash_kind_words(c.kind, self.backend)}{where} in {phase}"
        self.query_one("#crash-title", Static).update(title)
        exit_words = f" · {fmt.exit_words(c.exit_code, c.kind)}" if c.exit_code is not None else ""
        if unexplained and c.exit_code is not None:
            # the exit is the whole story: its one sentence (the message is the same exit, told again)
            info = fmt.exit_words(c.exit_code, c.kind)
        elif unexplained:
            info = c.message
        else:
            info = f"{c.rank or 'main process'} · during {phase} · log line {c.line:,}{exit_words}"
        self.query_one("#crash-info", Static).update(info)
        lines = c.decisive_lines or [c.message]
        if unexplained:

            lines = decisive_tail(self.log_tail, 8) or ["the log is empty: the server printed nothing"]
            if self.log_format in (None, "unknown"):
                lines = [*lines, "(no line of this log is one Cockpit knows from the server: nothing here is a diagnosis)"]
        # whole lines, wrapped: the engine's own fix is often at the end of a long one
        self.query_one("#crash-decisive", Static).update(clean_text("\n".join(lines[-8:])))
        p = self.proposal
        diff = self.query_one("#crash-diff", Static)
        if p is not None:
            self.query_one("#crash-diagnosis", Static).update(clean_text(p.message))
            pred = predicted_words(p, self.current_tokens)
            diff.update(change_words(p) + (f" · {pred}" if pred else ""))
            diff.display = True
        else:
            others = [f.message for f in self.findings[:3]]
            self.query_one("#crash-diagnosis", Static).update(
                clean_text("\n".join(others)) or "no diagnosis: the log did not say why")
            diff.display = False
        if not self.query_one("#crash-edit", Input).display:
            self.query_one("#crash-keys", Static).update(self._keys_words())

    def on_mount(self) -> None:
        edit = self.query_one("#crash-edit", Input)
        edit.display = False
        self._fill()

    def action_restart_with_change(self) -> None:
        if self._editing():
            return
        if self.proposal is None:
            self.notify("no change is proposed: use e to edit flags or R to restart unchanged", severity="warning")
            return
        self.dismiss(RestartChoice(tuple(self.proposal.changes)))

    def action_restart_unchanged(self) -> None:
        if self._editing():
            return
        self.dismiss(RestartChoice(()))

    def action_edit(self) -> None:
        if self._editing():
            return
        edit = self.query_one("#crash-edit", Input)
        changes = self.proposal.changes if self.proposal else ()
        edit.value = " ".join(f"{c.flag.lstrip('-')}={value_text(c.to_value)}" for c in changes)
        edit.display = True
        edit.focus()
        self.query_one("#crash-keys", Static).update("enter restart with these flags · esc back")

    def action_dismiss_modal(self) -> None:
        edit = self.query_one("#crash-edit", Input)
        if edit.display:
            edit.display = False
            self.set_focus(None)
            self.query_one("#crash-keys", Static).update(self._keys_words())
            return
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            changes = parse_flag_edits(event.value, self.run_flags, self.validate, backend=self.backend)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.dismiss(RestartChoice(tuple(changes)))

    def _editing(self) -> bool:
        return self.query_one("#crash-edit", Input).has_focus


def parse_flag_edits(
    text: str, run_flags: dict[str, object], validate: Callable[[dict[str, Any]], None] | None = None,
    *, backend: str = DEFAULT_BACKEND,
) -> list[FlagChange]:
    """`mem-fraction-static=0.88 hicache-size=48` → FlagChanges (from = the run's value).

    Values are typed by the backend's own parser (the same as `cockpit up --set`), and
    `validate` (the flag table) refuses unknown flags before anything is stopped.
    """
    items = text.split()
    if not items:
        raise ValueError("no flags given: type FLAG=VALUE pairs separated by spaces")
    try:
        overrides = get_backend(backend).flags.parse_overrides(items)
        if validate is not None:
            validate(overrides)
    except Exception as exc:  # FlagError: the flag table's own words
        raise ValueError(str(exc)) from None
    out: list[FlagChange] = []
    for key, value in overrides.items():
        before = run_flags.get(key, run_flags.get(key.replace("-", "_")))
        out.append(FlagChange(flag=f"--{key}", from_value=before, to_value=value))
    return out
