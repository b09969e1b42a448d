"""The vLLM backend: flags per version, `vllm serve` argv, log grammar, memory model, diagnosis.

Everything vLLM-specific lives in this package and reaches the rest of Cockpit through
`get_backend("vllm")`; the modules are imported inside the methods so importing the package
stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cockpit.backends.base import HostFacts, LogParser
from cockpit.backends.vllm.flags import VERSIONS
from cockpit.core.findings import Finding
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from cockpit.core.profile import Profile


class VLLMBackend:
    name = "vllm"
    # what the operator sees for this server, in its own words
    readiness_log_line = "Application startup complete."
    metrics_prefix = "vllm:"

    def versions(self) -> tuple[str, ...]:
        return VERSIONS

    def build_argv(
        self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        from cockpit.backends.vllm.command import build_argv

        return build_argv(profile, overrides, version=version)

    def build_node_argv(self, profile: Profile, node_rank: int, dist_init_addr: str | None = None,
                        overrides: dict[str, Any] | None = None, version: str | None = None) -> list[str]:
        from cockpit.backends.vllm.command import build_node_argv

        return build_node_argv(profile, node_rank, dist_init_addr, overrides, version)

    def new_parser(self) -> LogParser:
        from cockpit.backends.vllm.logparse import VLLMLogParser

        return VLLMLogParser()  # type: ignore[return-value]

    def new_state(self) -> RunState:
        return RunState(backend=self.name)

    def read_log(self, source: str | Path | BinaryIO, state: RunState | None = None) -> RunState:
        from cockpit.backends.vllm.logparse import read_log

        return read_log(source, state)

    def log_score(self, sample: bytes) -> float:
        """0..1: how much the opening of a log looks like vLLM's."""
        from cockpit.backends.vllm.logparse import log_score

        return log_score(sample)

    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (),
        *, target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        from cockpit.backends.vllm.diagnosis import diagnose

        return diagnose(state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts]) -> list[Finding]:
        from cockpit.backends.vllm.preflight import preflight

        return preflight(profile, list(hosts))

    def flag_diff(self, profile: Profile, flags: dict[str, Any]) -> list[Any]:
        from cockpit.backends.vllm.command import flag_diff

        return flag_diff(profile, flags)

    def parse_overrides(self, items: list[str] | tuple[str, ...]) -> dict[str, Any]:
        from cockpit.backends.vllm.command import parse_overrides

        return parse_overrides(items)

    def readiness_path(self, version: str | None = None) -> str:
        """vLLM answers /health 200 once ready (no /ready outside the DP supervisor)."""
        return "/health"
