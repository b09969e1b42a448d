"""The SGLang backend: flags per version, command builder, log parser, memory model, diagnosis.

Diagnosis and preflight are this package's modules too (they speak SGLang's flags and memory
model); they are imported inside the methods below so that importing the package stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cockpit.backends.base import HostFacts, LogParser
from cockpit.backends.sglang.flags import VERSIONS
from cockpit.core.findings import Finding
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile


class SGLangBackend:
    name = "sglang"

    def versions(self) -> tuple[str, ...]:
        return VERSIONS

    def build_argv(
        self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        from cockpit.backends.sglang.command import build_argv

        return build_argv(profile, overrides, version=version)

    def new_parser(self) -> LogParser:
        from cockpit.backends.sglang.logparse import SGLangLogParser

        return SGLangLogParser()  # type: ignore[return-value]

    def new_state(self) -> RunState:
        return RunState(backend=self.name)

    def read_log(self, source: Any, state: RunState | None = None) -> RunState:
        from cockpit.backends.sglang.logparse import read_log

        return read_log(source, state)

    def log_score(self, sample: bytes) -> float:
        """0..1: the share of the opening lines that are SGLang records (`[2026-02-24 11:55:44 TP3] …`)."""
        from cockpit.backends.sglang.logparse import split_record

        lines = [ln for ln in sample.decode("utf-8", "replace").splitlines()[:2000] if ln.strip()]
        if not lines:
            return 0.0
        return sum(1 for ln in lines if split_record(ln.lstrip())[0] is not None) / len(lines)

    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (),
        *, target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        from cockpit.backends.sglang.diagnosis import diagnose

        return diagnose(state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts]) -> list[Finding]:
        from cockpit.backends.sglang.preflight import preflight

        return preflight(profile, list(hosts))
