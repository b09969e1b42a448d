"""The face: the domain surface cockpit/ui and cockpit/commands use, in one place, imported plainly.

The TUI and the commands reach the supervisor, the journal, telemetry, transport, the backends, the
model, the core, errors and locations only through this module (`from cockpit.face import
Supervisor`) or its light half, `cockpit.face_light`, the way nvitop's TUI reaches its library only
through `tui/library`. Three checks hold the rule: an import-linter contract and ruff's banned-API
rule (pyproject.toml; an editor running ruff flags the reach as it is typed) and the walk in
tests/test_layering.py. A name the faces need is added here, under the module it lives in (and in
`face_light` too when `cockpit diagnose` needs it: the test keeps the two in step).

Every import below runs when this module is imported (~0.7 s: the Supervisor, pydantic, asyncssh,
httpx), so a command whose start-up is measured imports `cockpit.face_light` instead, or this module
inside the function that needs it, with the measurement named beside it.
"""

from __future__ import annotations

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
    load_all_secret_flags,
    words_of,
)
from cockpit.backends.base import HostFacts, unavailable
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
from cockpit.core.overrides import Overrides, normalise_flag_name
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
from cockpit.journal import Journal, RunRecord, calibration_runs
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
from cockpit.preflight.gate import GateRefused, GateResult, WhatIf, build_argvs, check_profile, gate
from cockpit.preflight.launchplan import GatedLaunch
from cockpit.preflight.planning import backend_plan, measured_facts, plan_finding, plan_for_profile
from cockpit.remote.host import LinkState, LogReset, ServerExited
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
from cockpit.telemetry.hostfacts import apply_what_if
from cockpit.transport import close_all
from cockpit.transport.base import TransportError
