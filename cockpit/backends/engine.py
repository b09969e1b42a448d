"""The engine-neutral half of a Backend: the capability groups whose methods only hand over to an
engine's modules.

Each engine's `Backend` class (cockpit/backends/<engine>/__init__.py) subclasses `EngineBackend`,
names its package, default port and words (`words()`), and writes what its engine does differently:
a group whose calls differ is a subclass of the group here (`class SGLangLaunch(EngineLaunch)`), named
in the backend's class attribute of that group's capitalised name (`Launch = SGLangLaunch`). What
only the engine can say has no default here: its Launch writes `readiness_path`, its Logs
`new_parser`, `score`, `record_rank` and `filter_presets`, its Planner `model_location` and
`server_flags` (abstract here: an engine that leaves one out does not instantiate).
Each call is described once, in base.py; a method here says only why it answers as it does. The
engine's modules (`flags`, `command`, `placement`, `logparse`, `diagnosis`, `preflight`, `plan`,
`tuning`) are found by name inside the engine's package and imported on first use, so importing a
backend stays cheap and this module imports no engine package (import-linter enforces it).
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from cockpit.backends.base import EngineWords, FlagError, GenerateApi, HostFacts, LogParser
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


class EngineGroup:
    """One capability group of an EngineBackend: reaches the engine's modules through its backend."""

    def __init__(self, backend: EngineBackend):
        self.backend = backend

    def _module(self, leaf: str) -> ModuleType:
        return self.backend._module(leaf)

    # typed views of the engine's modules (engine_modules.py; each engine package asserts them)
    def _flags(self) -> FlagsModule:
        return cast("FlagsModule", self._module("flags"))

    def _command(self) -> CommandModule:
        return cast("CommandModule", self._module("command"))

    def _placement(self) -> PlacementModule:
        return cast("PlacementModule", self._module("placement"))


class EngineFlags(EngineGroup):
    def effective(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, Any]:
        flags = self._command().effective_flags(profile, dict(overrides or {}), version=version)
        return {dest: value for dest, (_spec, value) in flags.items()}

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        return self._command().parse_overrides(list(items))

    def diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        return self._command().flag_diff(profile, dict(flags))

    def value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        flag_value = self._placement().flag_value
        try:
            spec = self._flags().canonical(flag)
        except FlagError:
            return flag_value(flags, flag, default=default)
        return flag_value(flags, *spec.option_strings, spec.dest, default=default)


class EngineLaunch(EngineGroup, ABC):
    def argv(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        return self._command().build_argv(profile, dict(overrides or {}), version=version)

    def node_argvs(
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

    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        return None  # an engine whose flags name a rendezvous says so

    def node_env(self, profile: Profile, index: int) -> dict[str, str]:
        return {}  # an engine that must be told a node's own address says how

    def debug_settings(self) -> tuple[dict[str, str], dict[str, Any]]:
        settings: tuple[dict[str, str], dict[str, Any]] = self._module("debugging").debug_settings()
        return settings

    # ---------------------------------------------------------------- GPUs and processes
    def rank_gpus(
        self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> dict[str, tuple[str, int]]:
        return self._placement().rank_gpu_map(ranks, hosts, flags, env)

    def gpus(self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
        return self._placement().gpus_for_flags(hosts, flags, env)

    def process_role(self, name: str, is_server: bool) -> tuple[str, str | None]:
        role: tuple[str, str | None] = self._module("processes").role(name, is_server)
        return role

    # ---------------------------------------------------------------- where it serves
    @abstractmethod
    def readiness_path(self, version: str | None) -> str: ...

    def api_port(self, flags: Mapping[str, Any]) -> int:
        default_port = self.backend.default_port
        try:
            return int(self._placement().flag_value(flags, "port", default=default_port))
        except (TypeError, ValueError):
            return default_port

    # ---------------------------------------------------------------- prefill/decode
    def pd_role(self, flags: Mapping[str, Any]) -> str | None:
        return None  # an engine with prefill/decode roles says how its flags give one

    def role_hint(self, role: str) -> str:
        return f"this engine's flags for a {role} server"  # each engine says its own

    def group_urls(self, profile: Profile, role: str) -> list[str]:
        """A prefill/decode profile's group as the router reaches it: its first host's API port
        (a local group as 127.0.0.1, a user@host:port destination as its host)."""
        g = profile.group_profile(role)
        host = g.hosts[0]
        name = "127.0.0.1" if host.is_local else host.ssh.rpartition("@")[2].split(":")[0]
        return [f"http://{name}:{self.api_port(self.backend.flags.effective(g))}"]

    def router_argv(self, profile: Profile) -> list[str]:
        router = profile.router
        if router is None:
            return []
        if not router.program:
            raise FlagError("router.program", f"{self.backend.words().display} has no built-in prefill/decode "
                            "router: name the router's command (router: {program: [...]})")
        return [*router.program, *router.args]


class EngineLogs(EngineGroup, ABC):
    @abstractmethod
    def new_parser(self) -> LogParser: ...

    @abstractmethod
    def score(self, sample: bytes) -> float: ...

    @abstractmethod
    def record_rank(self, line: str) -> str | None: ...

    @abstractmethod
    def filter_presets(self) -> Mapping[str, tuple[str, ...]]: ...

    def new_state(self) -> RunState:
        return RunState(backend=self.backend.name, memory_flag=self.backend.words().memory_flag)

    def read(self, source: str | Path | BinaryIO, state: RunState | None = None,
             stats: dict[str, int] | None = None) -> RunState:
        return cast("LogparseModule", self._module("logparse")).read_log(source, state, stats)

    # What only this engine's start-up prints (its arguments dump, its version banner): found in a
    # log's opening, it outweighs any share of lines that merely look like another engine's.
    STARTUP_MARKS: re.Pattern[bytes] | None = None

    def startup_marked(self, sample: bytes) -> bool:
        return self.STARTUP_MARKS is not None and self.STARTUP_MARKS.search(sample) is not None

    def is_server_args(self, event: Any) -> bool:
        return isinstance(event, ServerArgs)


class EngineDoctor(EngineGroup):
    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (),
        *, target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        return cast("DiagnosisModule", self._module("diagnosis")).diagnose(
            state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None) -> list[Finding]:
        return cast("PreflightModule", self._module("preflight")).preflight(profile, list(hosts), version=version)

    def after_plan(self, profile: Profile, plan: Any) -> list[Finding]:
        rule = getattr(self._module("preflight"), "after_plan", None)
        return list(rule(profile, plan)) if rule is not None else []


class EnginePlanner(EngineGroup, ABC):
    def memory_plan(
        self, profile: Profile, hosts: Iterable[HostFacts], *, model: Any = None,
        overrides: Mapping[str, Any] | None = None, runs: Iterable[Any] = (), calibrate_from: str | None = None,
    ) -> Any:
        if model is None:
            return None
        return cast("PlanModule", self._module("plan")).memory_plan(
            profile, hosts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)

    @abstractmethod
    def model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None: ...

    @abstractmethod
    def server_flags(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]: ...

    def draft_model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        return None  # an engine with speculative decoding names its draft model's flag

    def term_lines(self, terms: Mapping[str, float]) -> list[str]:
        term_lines = getattr(self._module("plan"), "term_lines", None)
        return list(term_lines(terms)) if term_lines is not None else []


class EngineTuner(EngineGroup):
    def policy(self) -> Any:
        return self._module("tuning")


class EngineMetrics(EngineGroup):
    def path(self) -> str:
        return "/metrics"

    def prefix(self) -> str:
        return f"{self.backend.name}:"

    def serving(self) -> Mapping[str, tuple[str, ...]]:
        table: Mapping[str, tuple[str, ...]] = self._module("metricnames").SERVING_METRICS
        return table

    def native_api(self) -> GenerateApi | None:
        return None  # an engine with its own generate API says so (SGLang's /generate)


class EngineBackend(ABC):
    name: str  # "sglang": the key of get_backend and the prefix of its metrics
    package: str  # the engine's package: "cockpit.backends.sglang"
    default_port: int  # the engine's HTTP port when the profile sets none
    # The options of every version's flag table that read as secret (`--api-key`), declared so that
    # get_backend need not import the tables to register them (~3 ms of each `diagnose`, which asks
    # every engine for its log score); None: read from the tables. tests/backends/test_backends.py holds the
    # declaration equal to the tables.
    secret_flags: tuple[str, ...] | None = None
    # the group classes: an engine names its subclass of the group whose calls differ, and None for
    # an optional group it lacks (base.OPTIONAL: the caller then says what it cannot do)
    Flags: type[EngineFlags] = EngineFlags
    Launch: type[EngineLaunch]  # abstract here: each engine names its own
    Logs: type[EngineLogs]
    Doctor: type[EngineDoctor] | None = EngineDoctor
    Planner: type[EnginePlanner] | None
    Tuner: type[EngineTuner] | None = EngineTuner
    Metrics: type[EngineMetrics] | None = EngineMetrics

    def __init__(self) -> None:
        self.flags = self.Flags(self)
        self.launch = self.Launch(self)
        self.logs = self.Logs(self)
        self.doctor = self.Doctor(self) if self.Doctor is not None else None
        self.planner = self.Planner(self) if self.Planner is not None else None
        self.tuner = self.Tuner(self) if self.Tuner is not None else None
        self.metrics = self.Metrics(self) if self.Metrics is not None else None

    def _module(self, leaf: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.{leaf}")

    @abstractmethod
    def words(self) -> EngineWords: ...

    def versions(self) -> tuple[str, ...]:
        return cast("FlagsModule", self._module("flags")).VERSIONS

    def resolve_version(self, version: str | None) -> str:
        return cast("FlagsModule", self._module("flags")).resolve_version(version)

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        # the profile's, else the one the log's format names ("sglang-0.5.9")
        if profile is not None and profile.version:
            return profile.version
        fmt = state.format or ""
        return fmt.removeprefix(f"{self.name}-") if fmt.startswith(f"{self.name}-") else None
