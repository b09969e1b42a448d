"""The SGLang backend: flags per version, command builder, log parser, memory model, diagnosis.

`SGLangBackend` is the only thing the layers above use (through `cockpit.backends.get_backend`);
its modules are imported inside the methods so that importing the package stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cockpit.backends.base import HostFacts, LogParser
from cockpit.backends.sglang.flags import VERSIONS
from cockpit.core.events import ServerArgs
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.core.profile import Profile

DEFAULT_PORT = 30000


class SGLangBackend:
    name = "sglang"

    # ---------------------------------------------------------------- versions and flags
    def versions(self) -> tuple[str, ...]:
        return VERSIONS

    def resolve_version(self, version: str | None) -> str:
        from cockpit.backends.sglang.flags import resolve_version

        return resolve_version(version)

    def effective_flags(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, Any]:
        from cockpit.backends.sglang.command import effective_flags

        flags = effective_flags(profile, dict(overrides or {}), version=version)
        return {dest: value for dest, (_spec, value) in flags.items()}

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        from cockpit.backends.sglang.command import parse_overrides

        return parse_overrides(list(items))

    def flag_diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        from cockpit.backends.sglang.command import flag_diff

        return flag_diff(profile, dict(flags))

    def flag_value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        from cockpit.backends.sglang.flags import FlagError, canonical
        from cockpit.backends.sglang.placement import flag_value

        try:
            spec = canonical(flag)
        except FlagError:
            return flag_value(flags, flag, default=default)
        return flag_value(flags, *spec.option_strings, spec.dest, default=default)

    # ---------------------------------------------------------------- launching
    def build_argv(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        from cockpit.backends.sglang.command import build_argv

        return build_argv(profile, dict(overrides or {}), version=version)

    def build_node_argvs(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, dist_init_addr: str | None = None
    ) -> list[list[str]]:
        from cockpit.backends.sglang import command

        ov = dict(overrides or {})
        if len(profile.hosts) == 1:
            return [command.build_argv(profile, ov, version=profile.version)]
        return [command.build_node_argv(profile, i, dist_init_addr, ov, profile.version)
                for i in range(len(profile.hosts))]

    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        from cockpit.backends.sglang.placement import flag_value

        given = flag_value(flags, "dist-init-addr", "nccl-init-addr")
        return str(given) if given else None

    # ---------------------------------------------------------------- GPUs
    def rank_gpu_map(
        self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> dict[str, tuple[str, int]]:
        from cockpit.backends.sglang.placement import rank_gpu_map

        return rank_gpu_map(ranks, hosts, flags, env)

    def gpus_for_flags(
        self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> set[tuple[str, int]]:
        from cockpit.backends.sglang.placement import gpus_for_flags

        return gpus_for_flags(hosts, flags, env)

    # ---------------------------------------------------------------- the log
    def new_parser(self) -> LogParser:
        from cockpit.backends.sglang.logparse import SGLangLogParser

        parser: LogParser = SGLangLogParser()
        return parser

    def new_state(self) -> RunState:
        return RunState(backend=self.name)

    def read_log(self, source: str | Path | BinaryIO, state: RunState | None = None,
                 stats: dict[str, int] | None = None) -> RunState:
        from cockpit.backends.sglang.logparse import read_log

        return read_log(source, state, stats)

    def log_score(self, sample: bytes) -> float:
        """0..1: the share of a log's opening lines that are SGLang records (`cockpit diagnose`
        picks the backend whose score is highest)."""
        import re

        from cockpit.backends.sglang.logparse import split_record

        head = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] |Rank \d+: load weight|sglang",
                          re.IGNORECASE)
        lines = [ln for ln in sample.decode("utf-8", "replace").splitlines()[:2000] if ln.strip()]
        if not lines:
            return 0.0
        return sum(1 for ln in lines if split_record(ln.lstrip())[0] is not None or head.search(ln)) / len(lines)

    def record_rank(self, line: str) -> str | None:
        from cockpit.backends.sglang.records import record_rank

        # called for every line shown: from now on the attribute is the function itself
        self.record_rank = record_rank  # type: ignore[method-assign]
        return record_rank(line)

    def is_server_args(self, event: Any) -> bool:
        return isinstance(event, ServerArgs)

    # ---------------------------------------------------------------- probes
    def api_port(self, flags: Mapping[str, Any]) -> int:
        from cockpit.backends.sglang.placement import flag_value

        try:
            return int(flag_value(flags, "port", default=DEFAULT_PORT))
        except (TypeError, ValueError):
            return DEFAULT_PORT

    def readiness_path(self, version: str | None) -> str:
        """/ready from 0.5.23 (it reports the scheduler's state), else /health."""
        from cockpit.backends.sglang.flags import FlagError, version_key

        if version:
            try:
                if version_key(version) >= (0, 5, 23):
                    return "/ready"
            except FlagError:
                return "/health"
        return "/health"

    def metrics_path(self) -> str:
        return "/metrics"

    def metrics_prefix(self) -> str:
        return "sglang:"

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        if profile is not None and profile.version:
            return profile.version
        fmt = state.format or ""
        return fmt.removeprefix("sglang-") if fmt.startswith("sglang-") else None

    # ---------------------------------------------------------------- advice
    def diagnose(
        self,
        state: RunState,
        profile: Profile | None = None,
        hosts: Iterable[HostFacts] = (),
        *,
        target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        from cockpit.backends.sglang.diagnosis import diagnose

        return diagnose(state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(
        self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None
    ) -> list[Finding]:
        from cockpit.backends.sglang.preflight import preflight

        return preflight(profile, list(hosts), version=version)

    def memory_plan(
        self,
        profile: Profile,
        hosts: Iterable[HostFacts],
        *,
        model: Any = None,
        overrides: Mapping[str, Any] | None = None,
        runs: Iterable[Any] = (),
        calibrate_from: str | None = None,
    ) -> Any:
        if model is None:
            return None
        from cockpit.backends.sglang.plan import memory_plan

        return memory_plan(profile, hosts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)

    def model_path(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        """The profile's `model-path` (with `--set model-path=…` applied)."""
        path = self.flag_value(self.effective_flags(profile, overrides), "model-path")
        return str(path) if path else None

    def plan_server(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]:
        """The server flags of `cockpit plan --model-config` (no profile): the model and parallelism."""
        server: dict[str, Any] = {"model-path": model_dir, "tp": tp}
        if dp:
            server["dp"] = dp
        if ep:
            server["ep"] = ep
        return server

    def log_filter_presets(self) -> dict[str, tuple[str, ...]]:
        """The words of the log view's presets as SGLang prints them."""
        return {
            "memory": ("avail mem", "max_total_num", "KV Cache", "Allocating", "Capture"),
            "errors": ("Traceback", "Error", "CUDA out of memory", "OutOfMemoryError", "RuntimeError", "SIGQUIT",
                       "exception", "Killed"),
            "batches": ("Prefill batch", "Decode batch"),
        }

    def tuning(self) -> Any:
        """The tuning policy `cockpit tune` asks for its next launch (cockpit.backends.sglang.tuning)."""
        from cockpit.backends.sglang import tuning

        return tuning
