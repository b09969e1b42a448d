"""The vLLM backend: flags per version, `vllm serve` argv, log grammar, memory model, diagnosis.

Everything vLLM-specific lives in this package and reaches the rest of Cockpit through
`get_backend("vllm")`; the modules are imported inside the methods so importing the package
stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cockpit.backends.base import FlagError, HostFacts, LogParser
from cockpit.backends.vllm.flags import VERSIONS
from cockpit.core.events import ServerArgs
from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from cockpit.core.profile import Profile

DEFAULT_PORT = 8000


class VLLMBackend:
    name = "vllm"

    # ---------------------------------------------------------------- versions and flags
    def versions(self) -> tuple[str, ...]:
        return VERSIONS

    def resolve_version(self, version: str | None) -> str:
        from cockpit.backends.vllm.flags import resolve_version

        return resolve_version(version)

    def effective_flags(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> dict[str, Any]:
        from cockpit.backends.vllm.command import effective_flags

        flags = effective_flags(profile, dict(overrides or {}), version=version)
        return {dest: value for dest, (_spec, value) in flags.items()}

    def parse_overrides(self, items: Iterable[str]) -> dict[str, Any]:
        from cockpit.backends.vllm.command import parse_overrides

        return parse_overrides(list(items))

    def flag_diff(self, profile: Profile, flags: Mapping[str, Any]) -> list[FlagChange]:
        from cockpit.backends.vllm.command import flag_diff

        return flag_diff(profile, dict(flags))

    def flag_value(self, flags: Mapping[str, Any], flag: str, default: Any = None) -> Any:
        from cockpit.backends.base import FlagError
        from cockpit.backends.vllm.flags import canonical
        from cockpit.backends.vllm.placement import flag_value

        try:
            spec = canonical(flag)
        except FlagError:
            return flag_value(flags, flag, default=default)
        return flag_value(flags, *spec.option_strings, spec.dest, default=default)

    # ---------------------------------------------------------------- launching
    def build_argv(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, *, version: str | None = None
    ) -> list[str]:
        from cockpit.backends.vllm.command import build_argv

        return build_argv(profile, dict(overrides or {}), version=version)

    def build_node_argvs(
        self, profile: Profile, overrides: Mapping[str, Any] | None = None, dist_init_addr: str | None = None
    ) -> list[list[str]]:
        from cockpit.backends.vllm import command

        ov = dict(overrides or {})
        if len(profile.hosts) == 1:
            return [command.build_argv(profile, ov, version=profile.version)]
        return [command.build_node_argv(profile, i, dist_init_addr, ov, profile.version) for i in range(len(profile.hosts))]

    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        from cockpit.backends.vllm.placement import flag_value

        host = flag_value(flags, "master-addr")
        port = flag_value(flags, "master-port")
        return f"{host}:{port}" if host and port else None

    # ---------------------------------------------------------------- GPUs
    def rank_gpu_map(
        self, ranks: Iterable[str], hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]
    ) -> dict[str, tuple[str, int]]:
        from cockpit.backends.vllm.placement import rank_gpu_map

        return rank_gpu_map(ranks, hosts, flags, env)

    def gpus_for_flags(self, hosts: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> set[tuple[str, int]]:
        from cockpit.backends.vllm.placement import gpus_for_flags

        return gpus_for_flags(hosts, flags, env)

    # ---------------------------------------------------------------- the log
    def new_parser(self) -> LogParser:
        from cockpit.backends.vllm.logparse import VLLMLogParser

        parser: LogParser = VLLMLogParser()
        return parser

    def new_state(self) -> RunState:
        return RunState(backend=self.name)

    def read_log(self, source: str | Path | BinaryIO, state: RunState | None = None,
                 stats: dict[str, int] | None = None) -> RunState:
        from cockpit.backends.vllm.logparse import read_log

        return read_log(source, state, stats)

    def log_score(self, sample: bytes) -> float:
        """0..1: how much the opening of a log looks like vLLM's (`cockpit diagnose` routing)."""
        from cockpit.backends.vllm.logparse import log_score

        return log_score(sample)

    def record_rank(self, line: str) -> str | None:
        from cockpit.backends.vllm.placement import record_rank

        return record_rank(line)

    def is_server_args(self, event: Any) -> bool:
        return isinstance(event, ServerArgs)

    # ---------------------------------------------------------------- probes
    def api_port(self, flags: Mapping[str, Any]) -> int:
        from cockpit.backends.vllm.placement import flag_value

        try:
            return int(flag_value(flags, "port", default=DEFAULT_PORT))
        except (TypeError, ValueError):
            return DEFAULT_PORT

    def readiness_path(self, version: str | None = None) -> str:
        """vLLM answers /health 200 once it serves (the port refuses connections before)."""
        return "/health"

    def metrics_path(self) -> str:
        return "/metrics"

    def metrics_prefix(self) -> str:
        return "vllm:"

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        if profile is not None and profile.version:
            return profile.version
        fmt = state.format or ""
        v = fmt.removeprefix("vllm-") if fmt.startswith("vllm-") else None
        return v if v and v[:1].isdigit() and not v.endswith("+") else None

    # ---------------------------------------------------------------- advice
    def diagnose(
        self, state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (),
        *, target_headroom_gb: float | None = None,
    ) -> list[Finding]:
        from cockpit.backends.vllm.diagnosis import diagnose

        return diagnose(state, profile, hosts, target_headroom_gb=target_headroom_gb)

    def preflight(self, profile: Profile, hosts: Iterable[HostFacts], *, version: str | None = None) -> list[Finding]:
        from cockpit.backends.vllm.preflight import preflight

        return preflight(profile, list(hosts), version=version)

    def memory_plan(
        self, profile: Profile, hosts: Iterable[HostFacts], *, model: Any = None,
        overrides: Mapping[str, Any] | None = None, runs: Iterable[Any] = (), calibrate_from: str | None = None,
    ) -> Any:
        if model is None:
            return None
        from cockpit.backends.vllm.plan import memory_plan

        return memory_plan(profile, hosts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)

    def model_path(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        """The `serve MODEL` positional (the profile's `model`), with `--set model=…` applied."""
        model = self.effective_flags(profile, overrides).get("model")
        return str(model) if model else None

    def plan_server(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]:
        """The server flags of `cockpit plan --model-config`: vLLM's EP spans TP × DP, so `--ep` is
        `--enable-expert-parallel` and must equal that product."""
        server: dict[str, Any] = {"model": model_dir, "tensor-parallel-size": tp}
        if dp:
            server["data-parallel-size"] = dp
        if ep and ep > 1:
            if ep != tp * (dp or 1):
                raise FlagError("--ep", f"--ep {ep}: vLLM's expert parallelism spans TP × DP = {tp * (dp or 1)} ranks "
                                        "(--enable-expert-parallel); give --ep equal to that, or leave it out")
            server["enable-expert-parallel"] = True
        return server

    def log_filter_presets(self) -> dict[str, tuple[str, ...]]:
        """The words of the log view's presets as vLLM prints them (shared/reference/vllm.md §3, §7,
        §8): the memory lifecycle lines, the failure chain, the periodic stats line."""
        return {
            "memory": ("Model loading took", "KV cache memory", "KV cache size", "Maximum concurrency", "Graph capturing",
                       "CUDA graph", "Free memory on device", "gpu-memory-utilization", "No available memory",
                       "KV cache is needed", "Overriding num_gpu_blocks"),
            "errors": ("Traceback", "ERROR", "Error", "out of memory", "OutOfMemoryError", "exception", "WorkerProc",
                       "EngineCore failed", "EngineCore encountered", "EngineDeadError", "died unexpectedly",
                       "Timed out waiting", "Killed"),
            "batches": ("Avg prompt throughput", "SpecDecoding metrics"),
        }

    def tuning(self) -> Any:
        """The tuning policy `cockpit tune` asks for its next launch (cockpit.backends.vllm.tuning)."""
        from cockpit.backends.vllm import tuning

        return tuning
