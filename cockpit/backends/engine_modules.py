"""What EngineBackend expects of an engine's modules, written down so that mypy checks both sides.

EngineBackend finds an engine's modules by name and imports them on first use (a backend stays cheap
to import). Typed through these protocols, every hand-over in engine.py is checked against one
signature, and each engine package asserts, for the type checker only, that its modules satisfy
them (`if TYPE_CHECKING:` in cockpit/backends/<engine>/__init__.py): a module whose function drifts
from what EngineBackend passes fails `mypy`, not a launch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

if TYPE_CHECKING:
    from cockpit.backends.base import HostFacts
    from cockpit.core.findings import Finding, FlagChange
    from cockpit.core.profile import Profile
    from cockpit.core.state import RunState


class FlagsModule(Protocol):
    VERSIONS: tuple[str, ...]

    def resolve_version(self, version: str | None) -> str: ...

    def canonical(self, name: str, version: str | None = None) -> Any: ...


class CommandModule(Protocol):
    # flags the engine also reads from its environment: {ServerArgs dest: variable}; empty when none
    SECRET_ENV: dict[str, str]

    def effective_flags(
        self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, tuple[Any, Any]]: ...

    def parse_overrides(self, items: list[str] | tuple[str, ...]) -> dict[str, Any]: ...

    def flag_diff(self, profile: Profile, flags_as_launched: dict[str, Any], *, version: str | None = None
                  ) -> list[FlagChange]: ...

    def build_argv(self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None,
                   secrets_in_env: bool = False) -> list[str]: ...

    def build_node_argv(self, profile: Profile, node_rank: int, dist_init_addr: str | None = None,
                        overrides: dict[str, Any] | None = None, version: str | None = None,
                        secrets_in_env: bool = False) -> list[str]: ...

    def secret_env(self, profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
                   ) -> dict[str, str]: ...


class PlacementModule(Protocol):
    def flag_value(self, flags: Mapping[str, Any], *names: str, default: Any = None) -> Any: ...

    def rank_gpu_map(self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
                     ) -> dict[str, tuple[str, int]]: ...

    def gpus_for_flags(self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
                       ) -> set[tuple[str, int]]: ...


class LogparseModule(Protocol):
    def read_log(self, source: str | Path | BinaryIO, state: RunState | None = None,
                 stats: dict[str, int] | None = None) -> RunState: ...


class DiagnosisModule(Protocol):
    def diagnose(self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (), *,
                 target_headroom_gb: float | None = None, warn_headroom_gb: float | None = None) -> list[Finding]: ...


class PreflightModule(Protocol):
    def preflight(self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None
                  ) -> list[Finding]: ...


class PlanModule(Protocol):
    def memory_plan(self, profile: Profile, hosts: Iterable[HostFacts], *, model: Any,
                    overrides: Mapping[str, Any] | None = None, runs: Iterable[Any] = (),
                    calibrate_from: str | None = None) -> Any: ...
