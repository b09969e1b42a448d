"""The engine-neutral half of a Backend: the methods that only hand over to an engine's modules.

Each engine's `Backend` class (cockpit/backends/<engine>/__init__.py) subclasses `EngineBackend`,
names its package and default port, and writes only what its engine does differently. The
engine's modules (`flags`, `command`, `placement`, `logparse`, `diagnosis`, `preflight`, `plan`,
`tuning`) are found by name inside the engine's package and imported on first use, so importing a
backend stays cheap and this module imports no engine package (import-linter enforces it).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from cockpit.backends.base import EngineWords, FlagError, GenerateApi, HostFacts
from cockpit.core.events import ServerArgs
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from pathlib import Path

    from cockpit.backends.engine_modules import (
        CommandModule,
        DiagnosisModule,
        FlagsModule,
        LogparseModule,
        PlacementModule,
        PlanModule,
        PreflightModule,
    )
    from cockpit.core.profile import Profile


class EngineBackend:
    name: str  # "sglang": the key of get_backend and the prefix of its metrics
    package: str  # the engine's package: "cockpit.backends.sglang"
    default_port: int  # the engine's HTTP port when the profile sets none
    # The options of every version's flag table that read as secret (`--api-key`), declared so that
    # get_backend need not import the tables to register them (~3 ms of each `diagnose`, which asks
    # every engine for its log score); None: read from the tables. tests/test_backends.py holds the
    # declaration equal to the tables.
    secret_flags: tuple[str, ...] | None = None

    def _module(self, leaf: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.{leaf}")

    # typed views of the engine's modules (engine_modules.py; each engine package asserts them)
    def _flags(self) -> FlagsModule:
        return cast("FlagsModule", self._module("flags"))

    def _command(self) -> CommandModule:
        return cast("CommandModule", self._module("command"))

    def _placement(self) -> PlacementModule:
        return cast("PlacementModule", self._module("placement"))

    # ---------------------------------------------------------------- versions and flags
    def versions(self) -> tuple[str, ...]:
        return self._flags().VERSIONS

    def resolve_version(self, version: str | None) -> str:
        return self._flags().resolve_version(version)

    def effective_flags(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, Any]:
        flags = self._command().effective_flags(profile, dict(overrides or {}), version=version)
        return {dest: value for dest, (_spec, value) in flags.items()}

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        return self._command().parse_overrides(list(items))

    def flag_diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        return self._command().flag_diff(profile, dict(flags))

    def flag_value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        flag_value = self._placement().flag_value
        try:
            spec = self._flags().canonical(flag)
        except FlagError:
            return flag_value(flags, flag, default=default)
        return flag_value(flags, *spec.option_strings, spec.dest, default=default)

    # ---------------------------------------------------------------- launching
    def build_argv(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        return self._command().build_argv(profile, dict(overrides or {}), version=version)

    def build_node_argvs(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, dist_init_addr: str | None = None
    ) -> list[list[str]]:
        command = self._command()
        ov = dict(overrides or {})
        # a secret flag the engine also reads from its environment goes there (secret_env), not in argv
        if len(profile.hosts) == 1:
            return [command.build_argv(profile, ov, version=profile.version, secrets_in_env=True)]
        return [command.build_node_argv(profile, i, dist_init_addr, ov, profile.version, secrets_in_env=True)
                for i in range(len(profile.hosts))]

    def secret_env(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
        return self._command().secret_env(profile, dict(overrides or {}), version=profile.version)

    # ---------------------------------------------------------------- GPUs
    def rank_gpu_map(
        self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> dict[str, tuple[str, int]]:
        return self._placement().rank_gpu_map(ranks, hosts, flags, env)

    def gpus_for_flags(
        self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> set[tuple[str, int]]:
        return self._placement().gpus_for_flags(hosts, flags, env)

    def native_api(self) -> GenerateApi | None:
        return None  # an engine with its own generate API says so (SGLang's /generate)

    def words(self) -> EngineWords:
        """What the UI and the CLI say about this engine: each engine's class declares its own."""
        raise NotImplementedError(f"{type(self).__name__} declares no EngineWords")

    # ---------------------------------------------------------------- the log
    def new_state(self) -> RunState:
        return RunState(backend=self.name, memory_flag=self.words().memory_flag)

    def read_log(self, source: str | Path | BinaryIO, state: RunState | None = None,
                 stats: dict[str, int] | None = None) -> RunState:
        return cast("LogparseModule", self._module("logparse")).read_log(source, state, stats)

    def is_server_args(self, event: Any) -> bool:
        return isinstance(event, ServerArgs)

    # ---------------------------------------------------------------- probes
    def api_port(self, flags: Mapping[str, Any]) -> int:
        try:
            return int(self._placement().flag_value(flags, "port", default=self.default_port))
        except (TypeError, ValueError):
            return self.default_port

    def metrics_path(self) -> str:
        return "/metrics"

    def group_urls(self, profile: Profile, role: str) -> list[str]:
        """A prefill/decode profile's group as the router reaches it: its first host's API port
        (a local group as 127.0.0.1, a user@host:port destination as its host)."""
        g = profile.group_profile(role)
        host = g.hosts[0]
        name = "127.0.0.1" if host.is_local else host.ssh.rpartition("@")[2].split(":")[0]
        return [f"http://{name}:{self.api_port(self.effective_flags(g))}"]

    def metrics_prefix(self) -> str:
        return f"{self.name}:"

    def debug_settings(self) -> tuple[dict[str, str], dict[str, Any]]:
        settings: tuple[dict[str, str], dict[str, Any]] = self._module("debugging").debug_settings()
        return settings

    def process_role(self, name: str, is_server: bool) -> tuple[str, str | None]:
        role: tuple[str, str | None] = self._module("processes").role(name, is_server)
        return role

    def serving_metrics(self) -> Mapping[str, tuple[str, ...]]:
        table: Mapping[str, tuple[str, ...]] = self._module("metricnames").SERVING_METRICS
        return table

    # ---------------------------------------------------------------- advice
    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (),
        *, target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        return cast("DiagnosisModule", self._module("diagnosis")).diagnose(
            state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None) -> list[Finding]:
        return cast("PreflightModule", self._module("preflight")).preflight(profile, list(hosts), version=version)

    def memory_plan(
        self, profile: Profile, hosts: Iterable[HostFacts], *, model: Any = None,
        overrides: Mapping[str, Any] | None = None, runs: Iterable[Any] = (), calibrate_from: str | None = None,
    ) -> Any:
        if model is None:
            return None
        return cast("PlanModule", self._module("plan")).memory_plan(
            profile, hosts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)

    def role_hint(self, role: str) -> str:
        return f"this engine's flags for a {role} server"  # each engine says its own

    def plan_term_lines(self, terms: Mapping[str, float]) -> list[str]:
        term_lines = getattr(self._module("plan"), "term_lines", None)
        return list(term_lines(terms)) if term_lines is not None else []

    def tuning(self) -> Any:
        """The tuning policy `cockpit tune` asks for its next launch (`<engine package>.tuning`)."""
        return self._module("tuning")
