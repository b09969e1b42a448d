"""The memory plan of a profile, the way a launch sees it: the model's facts read on node 0 over its
transport, the GPUs measured by the agent, the journal's runs for calibration (read by the callers,
which sit above the journal), the backend's budget (`get_backend(name).planner.memory_plan`). The gate
(gate.py: `cockpit check`, `cockpit up`, the picker) calls `profile_plan_finding`, `cockpit plan`
calls `plan_for_profile`; `plan_finding` is the one wording of the result.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cockpit.backends import get_backend
from cockpit.backends.base import unavailable
from cockpit.core.findings import Finding, FlagChange
from cockpit.errors import BadInput, CockpitError
from cockpit.model.config import ModelConfigError
from cockpit.model.plan import PlanUnavailable
from cockpit.model.read import facts_from_probe, probe_program
from cockpit.telemetry.hostfacts import host_facts_for, measure_hosts
from cockpit.transport import transport_for
from cockpit.transport.base import TransportError
from cockpit.transport.local import LocalTransport

if TYPE_CHECKING:
    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import Profile
    from cockpit.model.plan import MemoryPlan
    from cockpit.model.read import ModelFacts
    from cockpit.transport.base import Transport

FINDING_ID = "memory_plan"


async def measured_facts(profile: Profile) -> list[HostFacts]:
    """Every host measured by the telemetry agent (as a launch's preflight does: the simulator's GPUs
    count too); a host that cannot be measured keeps what this machine knows, or stays unknown."""

    return host_facts_for(profile, await measure_hosts(profile, include_local=True))


async def read_model_on_host(
    transport: Transport, model_path: str, *, python: str | None = None, env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> ModelFacts:
    """Facts of `model_path` as the GPU host sees it: cockpit/model/probe.py runs on the host's Python,
    reads a few KB of metadata (never tensor data) and answers in one JSON line."""

    py = python or (sys.executable if isinstance(transport, LocalTransport) else "python3")
    # the request (HF_TOKEN among the env) travels inside the program on stdin, never in argv
    done = await transport.run([py, "-"], stdin=probe_program(model_path, env), timeout=timeout)
    where = f"{transport.label}:{model_path}"
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ModelConfigError(f"{where}: reading the model's metadata failed: {err[-1] if err else f'exit {done.returncode}'}")
    try:
        answer = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ModelConfigError(f"{where}: unreadable answer from the model probe") from None
    return facts_from_probe(answer, where, name=Path(model_path).name)


async def read_profile_model(profile: Profile) -> ModelFacts:
    """The profile's model (the backend says which flag names it) read on its first host (node 0),
    over that host's transport."""

    try:
        backend = get_backend(profile.backend)
        planner = backend.planner
        if planner is None:  # an engine without a plan reads no model for one
            raise unavailable(backend, "planner")
        path = planner.model_location(profile)
    except ValueError as exc:  # an unknown backend, a flag the server refuses
        raise BadInput(str(exc)) from None
    if not path:
        raise ModelConfigError(f"{profile.source or profile.name}: the profile's server: names no model for {backend.name} to load")
    host = profile.hosts[0]
    python = None if host.is_local else profile.python
    facts = await read_model_on_host(transport_for(host), str(path), python=python, env=profile.env)
    # a speculative draft model the flags name is read the same way, beside it (docs/PLAN.md)
    draft_path = planner.draft_model_location(profile)
    if draft_path:
        draft = await read_model_on_host(transport_for(host), str(draft_path), python=python, env=profile.env)
        facts = dataclasses.replace(facts, draft=draft)
    return facts


def backend_plan(
    profile: Profile, facts: list[HostFacts], model: ModelFacts, overrides: dict[str, Any] | None,
    *, runs: Iterable[Any] = (), calibrate_from: str | None = None,
) -> MemoryPlan:
    """The backend's budget (Backend.planner.memory_plan) for facts already gathered; `runs` are the
    journal's records (the caller reads the journal: it sits above this layer)."""

    try:
        backend = get_backend(profile.backend)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if backend.planner is None:
        raise unavailable(backend, "planner")
    mp = backend.planner.memory_plan(profile, facts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)
    if mp is None:
        raise BadInput(f"no memory plan for backend {profile.backend!r} yet (see docs/PLAN.md)")
    return cast("MemoryPlan", mp)


async def plan_for_profile(
    profile: Profile,
    overrides: dict[str, Any] | None = None,
    *,
    facts: list[HostFacts] | None = None,
    runs: Iterable[Any] = (),
    calibrate_from: str | None = None,
    model: ModelFacts | None = None,
) -> MemoryPlan:
    """The profile's memory plan. Raises ModelConfigError (bad or unreadable model), PlanUnavailable
    (GPU memory unknown), BadInput (a flag the server refuses, a backend without a plan)."""

    try:
        backend = get_backend(profile.backend)
        backend.flags.effective(profile, overrides)  # a refused flag: exit 2 before any I/O
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if backend.planner is None:  # said before the model is read or a host asked
        raise unavailable(backend, "planner")
    if model is None:
        model = await read_profile_model(profile)
    if facts is None:
        facts = await measured_facts(profile)
    return backend_plan(profile, facts, model, overrides, runs=runs, calibrate_from=calibrate_from)


def plan_finding(mp: MemoryPlan | None, error: str | None = None) -> Finding:
    """The plan as one finding: critical below the warn headroom, warning below the target."""
    if mp is None:
        return Finding(FINDING_ID, "info", f"memory plan not made: {error}")
    cur, rec = mp.current, mp.recommended
    sev = mp.severity
    changes: tuple[FlagChange, ...] = ()
    predicted: dict[str, Any] = {}
    if cur is not None:
        predicted = {"headroom_gb": round(cur.headroom_after_capture_gib, 2), "max_total_num_tokens": cur.max_total_num_tokens,
                     "max_total_num_tokens_low": cur.low, "max_total_num_tokens_high": cur.high}
    if sev in ("critical", "warning") and rec is not None and cur is not None and rec.value != cur.value:
        # below the floor the move is upwards (raise mfs), above it downwards: either way rec
        changes = (FlagChange(rec.flag, None if mp.current_is_default else cur.value, rec.value),)
        predicted = {"headroom_gb": round(rec.headroom_after_capture_gib, 2), "max_total_num_tokens": rec.max_total_num_tokens,
                     "max_total_num_tokens_low": rec.low, "max_total_num_tokens_high": rec.high}
    # the summary says why it cannot (or may not) start; "may run out of memory" would understate it
    cannot_start = cur is not None and (not cur.starts or cur.max_total_num_tokens <= 0)
    verdict = ""
    if cannot_start:
        pass
    elif sev == "critical":
        verdict = f"below the {mp.warn_headroom_gib:g} GiB warn level: the first large prefill may run out of memory"
    elif sev == "warning":
        verdict = f"below the {mp.target_headroom_gib:g} GiB target"
    msg = mp.summary(verdict)
    if verdict and verdict not in msg:  # a summary without a current value's clause: said at the end
        msg += f" — {verdict}"
    msg += f" ({'calibrated from run ' + mp.calibrated_from if mp.calibrated_from else 'estimate, not yet calibrated by a run'})"
    t = mp.terms
    arithmetic = mp.arithmetic or (
        f"P ≈ {t.get('pre_load_avail_gib', 0):.2f} GiB, weights {mp.weights_gib_per_rank:.2f} GiB/rank, "
        f"KV {mp.kv_bytes_per_token:,} B/token; headroom = P·(1 − mfs) − req_to_token {t.get('req_to_token_gib', 0):.2f}"
        f" − workspaces {t.get('attention_workspace_gib', 0):.2f}"
        + (f" − graphs {t['graph_gib']:.2f}" if "graph_gib" in t else " (calibrated: δ·P around the measured run)")
    )
    return Finding(FINDING_ID, "ok" if sev == "ok" else sev, msg, changes=changes, predicted=predicted, arithmetic=arithmetic)


async def profile_plan_finding(
    profile: Profile, overrides: dict[str, Any] | None = None, *, facts: list[HostFacts] | None = None,
    runs: Iterable[Any] = (),
) -> tuple[Finding, MemoryPlan | None]:
    """plan_finding for a profile, never raising for an unreadable model or unknown GPUs (that is an
    info finding: the plan is advice, the launch is the operator's)."""

    try:
        mp = await plan_for_profile(profile, overrides, facts=facts, runs=runs)
    except (CockpitError, TransportError, OSError, ModelConfigError, PlanUnavailable) as exc:
        return plan_finding(None, str(exc)), None
    return plan_finding(mp), mp




def plan_vs_run(mp: MemoryPlan, tokens: int, headroom_gib: float) -> Finding | None:
    """What the plan predicted for a run's own value beside what its log then showed (the TUI's
    advice once capture is over). The journal keeps the run, so the next plan calibrates from it."""
    cur = mp.current
    if cur is None or tokens <= 0:
        return None
    dt = cur.max_total_num_tokens - tokens
    dh = cur.headroom_after_capture_gib - headroom_gib
    basis = f"calibrated from run {mp.calibrated_from}" if mp.calibrated_from else "estimate"
    return Finding(
        "memory_plan_vs_run", "info",
        f"memory plan ({basis}) for {cur.flag} {cur.value:g}: {cur.max_total_num_tokens:,} KV tokens and "
        f"{cur.headroom_after_capture_gib:.2f} GiB after capture; the log shows {tokens:,} and {headroom_gib:.2f} GiB "
        f"({100 * dt / tokens:+.1f} % tokens, {dh:+.2f} GiB); `cockpit plan` calibrates from this run",
        predicted={"max_total_num_tokens": cur.max_total_num_tokens, "headroom_gb": round(cur.headroom_after_capture_gib, 2)},
    )


async def plan_for_run(profile: Profile, flags: Mapping[str, Any]) -> MemoryPlan | None:
    """The estimate for a live run's flags, from the GPUs' totals (their free memory is the run's
    own by now). None when the model cannot be read or the GPUs are unknown."""
    import dataclasses


    try:
        model = await read_profile_model(profile)
        facts = [dataclasses.replace(f, gpu_free_gib=()) for f in await measured_facts(profile)]
        return await plan_for_profile(profile, dict(flags), facts=facts, model=model)
    except (CockpitError, TransportError, OSError, ModelConfigError, PlanUnavailable):
        return None
