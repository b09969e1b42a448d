"""The SGLang backend: flags per version, command builder, log parser, memory model, diagnosis.

`SGLangBackend` is the only thing the layers above use (through `cockpit.backends.get_backend`);
its modules are imported inside the methods so that importing the package stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cockpit.backends.base import EngineWords, GenerateApi, LogParser
from cockpit.backends.engine import EngineBackend, EngineLaunch, EngineLogs, EngineMetrics, EnginePlanner

if TYPE_CHECKING:  # pydantic + yaml cost ~0.2 s to import; only annotations need Profile here
    from cockpit.backends import engine_modules as em
    from cockpit.backends.sglang import command, diagnosis, flags, logparse, placement, plan, preflight
    from cockpit.core.profile import Profile

    # for the type checker only: this engine's modules are what EngineBackend hands over to
    _modules: tuple[em.FlagsModule, em.CommandModule, em.PlacementModule, em.LogparseModule, em.DiagnosisModule,
                    em.PreflightModule, em.PlanModule] = (flags, command, placement, logparse, diagnosis, preflight, plan)

DEFAULT_PORT = 30000


class SGLangLaunch(EngineLaunch):
    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        from cockpit.backends.sglang.placement import flag_value

        given = flag_value(flags, "dist-init-addr", "nccl-init-addr")
        return str(given) if given else None

    def readiness_path(self, version: str | None) -> str:
        # /ready from 0.5.23 (it reports the scheduler's state), else /health
        from cockpit.backends.sglang.flags import FlagError, version_key

        if version:
            try:
                if version_key(version) >= (0, 5, 23):
                    return "/ready"
            except FlagError:
                return "/health"
        return "/health"

    def pd_role(self, flags: Mapping[str, Any]) -> str | None:
        # `--disaggregation-mode prefill|decode` (SGLang's default "null" is no role)
        mode = self.backend.flags.value(flags, "disaggregation-mode")
        return str(mode) if mode in ("prefill", "decode") else None

    def role_hint(self, role: str) -> str:
        return f"disaggregation-mode: {role}"

    def router_argv(self, profile: Profile) -> list[str]:
        # SGLang's router in PD mode (docs/advanced_features/pd_disaggregation.md):
        # `python -m sglang_router.launch_router --pd-disaggregation --prefill URL [BOOTSTRAP_PORT]
        # --decode URL --host 0.0.0.0 --port P`; the bootstrap port only when the prefill group sets
        # `disaggregation-bootstrap-port` (the router's default is SGLang's 8998)
        router = profile.router
        if router is None:
            return []
        if router.program:
            return [*router.program, *router.args]
        flags = self.backend.flags
        argv = [profile.python, "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        pre = profile.group_profile("prefill")
        boot = flags.value(flags.effective(pre), "disaggregation-bootstrap-port")
        for url in self.group_urls(profile, "prefill"):
            argv += ["--prefill", url] + ([str(boot)] if boot is not None else [])
        for url in self.group_urls(profile, "decode"):
            argv += ["--decode", url]
        return [*argv, "--host", "0.0.0.0", "--port", str(router.port), *router.args]


class SGLangLogs(EngineLogs):
    # the arguments dump of the launch (reference/sglang.md §1): 0.5.9's `server_args=ServerArgs(…)`,
    # 0.5.23's `server_args={'model_path': …}`
    STARTUP_MARKS = re.compile(rb"server_args=(?:ServerArgs\(|\{')")

    def new_parser(self) -> LogParser:
        from cockpit.backends.sglang.logparse import SGLangLogParser

        parser: LogParser = SGLangLogParser()
        return parser

    def score(self, sample: bytes) -> float:
        import re

        from cockpit.backends.sglang.logparse import split_record

        head = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] |Rank \d+: load weight|sglang",
                          re.IGNORECASE)
        lines = [ln for ln in sample.decode("utf-8", "replace").splitlines()[:2000] if ln.strip()]
        if not lines:
            return 0.0
        # the pattern first: it answers for most record lines in ~1 µs, split_record (Python) in ~8
        return sum(1 for ln in lines if head.search(ln) or split_record(ln.lstrip())[0] is not None) / len(lines)

    def record_rank(self, line: str) -> str | None:
        from cockpit.backends.sglang.records import record_rank

        # called for every line shown: from now on the attribute is the function itself
        self.record_rank = record_rank  # type: ignore[method-assign]
        return record_rank(line)

    def filter_presets(self) -> dict[str, tuple[str, ...]]:
        return {
            "memory": ("avail mem", "max_total_num", "KV Cache", "Allocating", "Capture"),
            "errors": ("Traceback", "Error", "CUDA out of memory", "OutOfMemoryError", "RuntimeError", "SIGQUIT",
                       "exception", "Killed"),
            "batches": ("Prefill batch", "Decode batch"),
        }


class SGLangPlanner(EnginePlanner):
    def model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        flags = self.backend.flags
        path = flags.value(flags.effective(profile, overrides), "model-path")
        return str(path) if path else None

    def draft_model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        flags = self.backend.flags
        path = flags.value(flags.effective(profile, overrides), "speculative-draft-model-path")
        return str(path) if path else None

    def server_flags(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]:
        server: dict[str, Any] = {"model-path": model_dir, "tp": tp}
        if dp:
            server["dp"] = dp
        if ep:
            server["ep"] = ep
        return server


class SGLangMetrics(EngineMetrics):
    def native_api(self) -> GenerateApi:
        from cockpit.backends.sglang.nativeapi import SGLangGenerate

        return SGLangGenerate()


class SGLangBackend(EngineBackend):
    name = "sglang"
    package = __name__
    default_port = DEFAULT_PORT
    secret_flags = ("--api-key",)
    Launch = SGLangLaunch
    Logs = SGLangLogs
    Planner = SGLangPlanner
    Metrics = SGLangMetrics
    launch: SGLangLaunch
    logs: SGLangLogs
    planner: SGLangPlanner
    metrics: SGLangMetrics

    def words(self) -> EngineWords:
        return EngineWords(
            display="SGLang",
            memory_flag="mem_fraction_static",
            flag_labels={"mem-fraction-static": "mfs", "hicache-size": "hicache", "cuda-graph-max-bs": "graph bs",
                     "chunked-prefill-size": "chunked prefill", "max-running-requests": "max running"},
            default_port=DEFAULT_PORT,
            demo_profile="demo.yaml",
            rank_axes=(("TP", ("tp", "tp-size", "tensor-parallel-size")), ("DP", ("dp", "dp-size", "data-parallel-size")),
                   ("PP", ("pp-size", "pipeline-parallel-size"))),
            native_api="sglang",
            tuned_flags=("mem-fraction-static", "cuda-graph-max-bs", "cuda-graph-max-bs-decode", "chunked-prefill-size",
                         "max-running-requests"),
            host_cache_label="HiCache",
            host_cache_flags=("enable-hierarchical-cache", "hicache-size"),
            crash_labels={"hicache_host_memory": "HiCache: not enough host memory",
                          "host_cache_smaller_than_device": "HiCache: host pool not larger than the device pool",
                          "watchdog_timeout": "scheduler watchdog timeout"},
            predicted_words={"hicache_size": "--hicache-size {:g} GB per rank"},
            metrics_switch="--enable-metrics",
        )
