"""The vLLM backend: flags per version, `vllm serve` argv, log grammar, memory model, diagnosis.

Everything vLLM-specific lives in this package and reaches the rest of Cockpit through
`get_backend("vllm")`; the modules are imported inside the methods so importing the package
stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cockpit.backends.base import EngineWords, FlagError, LogParser
from cockpit.backends.engine import EngineBackend, EngineLaunch, EngineLogs, EnginePlanner
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from cockpit.backends import engine_modules as em
    from cockpit.backends.vllm import command, diagnosis, flags, logparse, placement, plan, preflight
    from cockpit.core.profile import Profile

    # for the type checker only: this engine's modules are what EngineBackend hands over to
    _modules: tuple[em.FlagsModule, em.CommandModule, em.PlacementModule, em.LogparseModule, em.DiagnosisModule,
                    em.PreflightModule, em.PlanModule] = (flags, command, placement, logparse, diagnosis, preflight, plan)

DEFAULT_PORT = 8000


class VLLMLaunch(EngineLaunch):
    def rendezvous_addr(self, flags: Mapping[str, Any]) -> str | None:
        from cockpit.backends.vllm.command import rendezvous_addr

        return rendezvous_addr(dict(flags))

    def node_env(self, profile: Profile, index: int) -> dict[str, str]:
        # vLLM finds the address its other nodes reach it at by itself (the outward interface);
        # a profile that names a node's `address` has it used instead (VLLM_HOST_IP, vllm/envs.py)
        host = profile.hosts[index]
        return {"VLLM_HOST_IP": host.address} if len(profile.hosts) > 1 and host.address else {}

    def readiness_path(self, version: str | None = None) -> str:
        # vLLM answers /health 200 once it serves (the port refuses connections before)
        return "/health"

    def pd_role(self, flags: Mapping[str, Any]) -> str | None:
        # `--kv-transfer-config`'s kv_role: kv_producer → prefill, kv_consumer → decode, kv_both
        from cockpit.backends.vllm.plan import _kv_role

        try:
            return _kv_role(self.backend.flags.value(flags, "kv-transfer-config"))
        except ValueError:
            return None

    def role_hint(self, role: str) -> str:
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        return f"kv-transfer-config with kv_role {kv_role} (or kv_both)"

    def router_argv(self, profile: Profile) -> list[str]:
        # vLLM ships no router of its own for P/D (its disaggregated examples run a proxy script,
        # e.g. tests/v1/kv_connector/nixl_integration/toy_proxy_server.py), so `router.program`
        # names the one the operator runs
        router = profile.router
        if router is None:
            return []
        if not router.program:
            raise FlagError("router.program", "vLLM has no built-in prefill/decode router: name the proxy's command "
                            "(router: {program: [python3, toy_proxy_server.py, …]})")
        return [*router.program, *router.args]


class VLLMLogs(EngineLogs):
    # the API server's start-up (reference/vllm.md §1): `non-default args: {…}`, the banner without
    # the logo (`vLLM server version %s`, 0.8.5–0.10.x `vLLM API server version %s`), and the
    # engine core's `Initializing a V1 LLM engine (v0.32.0) with config:`
    STARTUP_MARKS = re.compile(rb"non-default args: \{|vLLM (?:API )?server version |Initializing a V1 LLM engine \(v")

    def new_parser(self) -> LogParser:
        from cockpit.backends.vllm.logparse import VLLMLogParser

        parser: LogParser = VLLMLogParser()
        return parser

    def score(self, sample: bytes) -> float:
        from cockpit.backends.vllm.sniff import may_be_vllm

        if not may_be_vllm(sample):  # most logs are SGLang's: spare them importing the grammar
            return 0.0
        from cockpit.backends.vllm.logparse import log_score

        return log_score(sample)

    def record_rank(self, line: str) -> str | None:
        from cockpit.backends.vllm.placement import record_rank

        return record_rank(line)

    def filter_presets(self) -> dict[str, tuple[str, ...]]:
        # as vLLM prints them (shared/reference/vllm.md §3, §7, §8): the memory lifecycle lines, the
        # failure chain, the periodic stats line
        return {
            "memory": ("Model loading took", "KV cache memory", "KV cache size", "Maximum concurrency", "Graph capturing",
                       "CUDA graph", "Free memory on device", "gpu-memory-utilization", "No available memory",
                       "KV cache is needed", "Overriding num_gpu_blocks"),
            "errors": ("Traceback", "ERROR", "Error", "out of memory", "OutOfMemoryError", "exception", "WorkerProc",
                       "EngineCore failed", "EngineCore encountered", "EngineDeadError", "died unexpectedly",
                       "Timed out waiting", "Killed"),
            "batches": ("Avg prompt throughput", "SpecDecoding metrics"),
        }


class VLLMPlanner(EnginePlanner):
    def model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        # the `serve MODEL` positional (the profile's `model`)
        model = self.backend.flags.effective(profile, overrides).get("model")
        return str(model) if model else None

    def draft_model_location(self, profile: Profile, overrides: Mapping[str, Any] | None = None) -> str | None:
        from cockpit.backends.vllm.plan import _speculative

        flags = self.backend.flags
        spec = _speculative(flags.value(flags.effective(profile, overrides), "speculative-config"))
        path = (spec or {}).get("model")
        return str(path) if path else None

    def server_flags(self, model_dir: str, tp: int, dp: int | None = None, ep: int | None = None) -> dict[str, Any]:
        # vLLM's EP spans TP × DP, so `--ep` is `--enable-expert-parallel` and must equal that product
        server: dict[str, Any] = {"model": model_dir, "tensor-parallel-size": tp}
        if dp:
            server["data-parallel-size"] = dp
        if ep and ep > 1:
            if ep != tp * (dp or 1):
                raise FlagError("--ep", f"--ep {ep}: vLLM's expert parallelism spans TP × DP = {tp * (dp or 1)} ranks "
                                        "(--enable-expert-parallel); give --ep equal to that, or leave it out")
            server["enable-expert-parallel"] = True
        return server


class VLLMBackend(EngineBackend):
    name = "vllm"
    package = __name__
    default_port = DEFAULT_PORT
    secret_flags = ("--api-key",)
    Launch = VLLMLaunch
    Logs = VLLMLogs
    Planner = VLLMPlanner
    launch: VLLMLaunch
    logs: VLLMLogs
    planner: VLLMPlanner

    def words(self) -> EngineWords:
        return EngineWords(
            display="vLLM",
            memory_flag="gpu_memory_utilization",
            flag_labels={"gpu-memory-utilization": "gpu mem util", "kv-cache-memory-bytes": "kv cache bytes"},
            default_port=DEFAULT_PORT,
            demo_profile="demo-vllm.yaml",
            rank_axes=(("TP", ("tp", "tensor-parallel-size")), ("DP", ("dp", "data-parallel-size")),
                   ("PP", ("pp", "pipeline-parallel-size"))),
            native_api=None,
            tuned_flags=("gpu-memory-utilization", "kv-cache-memory-bytes", "max-num-seqs", "max-num-batched-tokens",
                         "max-cudagraph-capture-size"),
            predicted_words={"max_model_len": "context length {:,} tokens"},
        )

    def run_version(self, state: RunState, profile: Profile | None = None) -> str | None:
        # the log's version only when it names a release (not "vllm-0.x+")
        v = super().run_version(state, profile)
        if profile is not None and profile.version:
            return v
        return v if v and v[:1].isdigit() and not v.endswith("+") else None
