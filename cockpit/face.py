"""The face: everything cockpit/ui and cockpit/commands use from the rest of the package, in one place.

The TUI and the commands reach the supervisor, the journal, telemetry, transport, the backends, the
model, the core, errors and locations only through this module (`from cockpit.face import
Supervisor`), the way nvitop's TUI reaches its library only through `tui/library`. An import-linter
contract in pyproject.toml and tests/test_layering.py hold the rule; a name the faces need is added
here, under the module it lives in.

Names load on first use (PEP 562 `__getattr__`), from the module that defines them, each time
(nothing is cached here, so a test that patches the defining module is seen): `cockpit diagnose`
still never imports asyncssh or httpx, and `cockpit --help` never imports this module at all. The
`TYPE_CHECKING` block below gives mypy the same names with their types; a test keeps it and
`EXPORTS` equal.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cockpit.aio import reap
    from cockpit.backends import (
        DEFAULT_BACKEND,
        backend_names,
        detect_backend,
        engine_name,
        engine_names,
        engine_words,
        flag_labels,
        get_backend,
        host_cache_gb_per_rank,
        load_all_secret_flags,
        words_of,
    )
    from cockpit.backends.base import HostFacts
    from cockpit.backends.foreign import foreign_lines, refusal
    from cockpit.core.crashstory import SIGKILL_SENDERS, signal_words
    from cockpit.core.findings import (
        Finding,
        FlagChange,
        exit_code_for,
        predicted_phrases,
        sort_findings,
        value_text,
    )
    from cockpit.core.logfilter import GENERIC_ERROR_WORDS, PRESET_NAMES, LineFilter
    from cockpit.core.logtail import decisive_tail
    from cockpit.core.numbers import plural
    from cockpit.core.profile import (
        NAME_RE,
        PD_ROLES,
        Profile,
        ProfileError,
        load_profile,
        parse_profile,
        read_profile_yaml,
    )
    from cockpit.core.ranks import rank_sort_key
    from cockpit.core.redact import secret_values
    from cockpit.core.reducer import apply, end_of_input
    from cockpit.core.report import Known, ReportFacts, render_report
    from cockpit.core.sanitize import clean_text, has_control
    from cockpit.core.secrets import is_secret_name, mask_mapping, mask_value, without_masked
    from cockpit.core.serving import serving_words
    from cockpit.core.state import (
        ENGINE_WATCHDOG,
        HOST_CACHE_SHORT,
        HOST_CACHE_SMALL,
        KILLED_BY_SIGNAL,
        SERIES_MAX_POINTS,
        Crash,
        RankMemory,
        RunState,
        SeriesPoint,
    )
    from cockpit.errors import BadInput, CockpitError, close_words
    from cockpit.journal import Journal, RunRecord
    from cockpit.journal.views import (
        RUN_ROW_HEADER,
        UNKNOWN,
        backend_words,
        bench_value,
        compare_rows,
        differing_flags,
        fmt_gb,
        fmt_int,
        fmt_outcome,
        fmt_secs,
        fmt_time,
        fmt_tps,
        run_rows,
        table,
    )
    from cockpit.locations import (
        bundled_dir,
        config_dir,
        data_dir,
        list_profile_files,
        profile_dirs,
        resolve_profile,
    )
    from cockpit.model.config import ModelConfigError
    from cockpit.model.plan import MemoryPlan, PlanUnavailable
    from cockpit.model.read import read_model_dir
    from cockpit.preflight.gate import GateRefused, GateResult, WhatIf, check_profile, gate
    from cockpit.preflight.launchplan import GatedLaunch
    from cockpit.preflight.planning import (
        backend_plan,
        measured_facts,
        plan_finding,
        plan_for_profile,
    )
    from cockpit.remote.host import LinkState, LogChunk, LogFollower, LogReset, ServerExited
    from cockpit.serving.answers import served_model
    from cockpit.serving.loadgen import finite_json, run_bench
    from cockpit.serving.workload import DEFAULT_MAX_ERROR_SHARE, BenchSpec, load_dataset, read_vocab
    from cockpit.supervisor.api import (
        GpuProcess,
        GpuSample,
        HostSample,
        LogBatch,
        LogLine,
        NodeView,
        RunInfo,
        RunSnapshot,
        SlurmView,
    )
    from cockpit.supervisor.logstream import Read, read_log
    from cockpit.supervisor.nodelog import NodeLog
    from cockpit.supervisor.nodes import Node
    from cockpit.supervisor.servingwatch import api_key_of
    from cockpit.supervisor.stacks import collect as collect_stacks
    from cockpit.supervisor.stacks import render as render_stacks
    from cockpit.supervisor.stacks import save as save_stacks
    from cockpit.supervisor.stacks import saved as saved_stacks
    from cockpit.supervisor.supervisor import Supervisor
    from cockpit.telemetry.hostfacts import apply_what_if, local_host_facts, measure_hosts
    from cockpit.transport import close_all
    from cockpit.transport.base import TransportError

# module → the names the faces use from it
EXPORTS: dict[str, tuple[str, ...]] = {
    "cockpit.supervisor.api": (
        "GpuProcess", "GpuSample", "HostSample", "LogBatch", "LogLine", "NodeView", "RunInfo", "RunSnapshot",
        "SlurmView",
    ),
    "cockpit.remote.host": ("LinkState", "LogChunk", "LogFollower", "LogReset", "ServerExited"),
    "cockpit.supervisor.logstream": ("Read", "read_log"),
    "cockpit.supervisor.nodelog": ("NodeLog",),
    "cockpit.supervisor.nodes": ("Node",),
    "cockpit.supervisor.servingwatch": ("api_key_of",),
    "cockpit.supervisor.supervisor": ("Supervisor",),
    "cockpit.journal": ("Journal", "RunRecord"),
    "cockpit.journal.views": (
        "RUN_ROW_HEADER", "UNKNOWN", "backend_words", "bench_value", "compare_rows", "differing_flags",
        "fmt_gb", "fmt_int", "fmt_outcome", "fmt_secs", "fmt_time", "fmt_tps", "run_rows", "table",
    ),
    "cockpit.telemetry.hostfacts": ("apply_what_if", "local_host_facts", "measure_hosts"),
    "cockpit.preflight.gate": ("GateRefused", "GateResult", "WhatIf", "check_profile", "gate"),
    "cockpit.preflight.launchplan": ("GatedLaunch",),
    "cockpit.preflight.planning": ("backend_plan", "measured_facts", "plan_finding", "plan_for_profile"),
    "cockpit.serving.answers": ("served_model",),
    "cockpit.serving.loadgen": ("finite_json", "run_bench"),
    "cockpit.serving.workload": ("BenchSpec", "DEFAULT_MAX_ERROR_SHARE", "load_dataset", "read_vocab"),
    "cockpit.transport": ("close_all",),
    "cockpit.transport.base": ("TransportError",),
    "cockpit.aio": ("reap",),
    "cockpit.backends": (
        "DEFAULT_BACKEND", "backend_names", "detect_backend", "engine_name", "engine_names", "engine_words", "flag_labels",
        "get_backend", "host_cache_gb_per_rank", "load_all_secret_flags", "words_of",
    ),
    "cockpit.backends.base": ("HostFacts",),
    "cockpit.backends.foreign": ("foreign_lines", "refusal"),
    "cockpit.model.config": ("ModelConfigError",),
    "cockpit.model.plan": ("MemoryPlan", "PlanUnavailable"),
    "cockpit.model.read": ("read_model_dir",),
    "cockpit.core.crashstory": ("SIGKILL_SENDERS", "signal_words"),
    "cockpit.core.findings": (
        "Finding", "FlagChange", "exit_code_for", "predicted_phrases", "sort_findings", "value_text",
    ),
    "cockpit.core.logfilter": ("GENERIC_ERROR_WORDS", "LineFilter", "PRESET_NAMES"),
    "cockpit.core.logtail": ("decisive_tail",),
    "cockpit.core.numbers": ("plural",),
    "cockpit.core.profile": (
        "NAME_RE", "PD_ROLES", "Profile", "ProfileError", "load_profile", "parse_profile", "read_profile_yaml",
    ),
    "cockpit.core.ranks": ("rank_sort_key",),
    "cockpit.core.redact": ("secret_values",),
    "cockpit.core.reducer": ("apply", "end_of_input"),
    "cockpit.core.report": ("Known", "ReportFacts", "render_report"),
    "cockpit.core.sanitize": ("clean_text", "has_control"),
    "cockpit.core.secrets": ("is_secret_name", "mask_mapping", "mask_value", "without_masked"),
    "cockpit.core.serving": ("serving_words",),
    "cockpit.core.state": (
        "Crash", "ENGINE_WATCHDOG", "HOST_CACHE_SHORT", "HOST_CACHE_SMALL", "KILLED_BY_SIGNAL", "RankMemory", "RunState", "SERIES_MAX_POINTS", "SeriesPoint",
    ),
    "cockpit.errors": ("BadInput", "CockpitError", "close_words"),
    "cockpit.locations": (
        "bundled_dir", "config_dir", "data_dir", "list_profile_files", "profile_dirs", "resolve_profile",
    ),
}
# names whose own spelling is too general for one namespace (face name → module, name there)
RENAMED: dict[str, tuple[str, str]] = {
    "collect_stacks": ("cockpit.supervisor.stacks", "collect"),
    "render_stacks": ("cockpit.supervisor.stacks", "render"),
    "save_stacks": ("cockpit.supervisor.stacks", "save"),
    "saved_stacks": ("cockpit.supervisor.stacks", "saved"),
}
# face name → (module, name there): what `__getattr__` loads
SOURCES: dict[str, tuple[str, str]] = {
    **{name: (module, name) for module, names in EXPORTS.items() for name in names},
    **RENAMED,
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = SOURCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    # an imported module straight from sys.modules: this runs at every function-level import
    return getattr(sys.modules.get(module) or importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted([*globals(), *SOURCES])
