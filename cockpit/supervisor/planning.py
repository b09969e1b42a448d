"""The memory plan of a profile, the way a launch sees it: the model's facts read on node 0 over its
transport, the GPUs measured by the agent, the journal's runs for calibration, the backend's budget
(`get_backend(name).memory_plan`). `cockpit plan`, `cockpit check`, `cockpit up` and the picker all
call `plan_for_profile` / `profile_plan_finding`; `plan_finding` is the one wording of the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from cockpit.core.findings import Finding, FlagChange
from cockpit.errors import BadInput, CockpitError

if TYPE_CHECKING:
    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import Profile
    from cockpit.model.plan import MemoryPlan
    from cockpit.model.read import ModelFacts

FINDING_ID = "memory_plan"


# ---- the pieces --------------------------------------------------------------------------------


def _journal_runs(profile_name: str | None = None) -> list[Any]:
    """Finished and live runs from the journal (read-only; an unusable journal calibrates nothing)."""
    try:
        from cockpit.journal import Journal

        j = Journal.open(readonly=True)
    except CockpitError:
        return []
    try:
        return j.list_runs(profile_name)
    finally:
        j.close()


async def measured_facts(profile: Profile) -> list[HostFacts]:
    """Every host measured by the telemetry agent (as a launch's preflight does: the simulator's GPUs
    count too); a host that cannot be measured keeps what this machine knows, or stays unknown."""
    from cockpit.telemetry.hostfacts import host_facts_for, measure, sim_dir_of, sim_env
    from cockpit.transport import transport_for
    from cockpit.transport.base import TransportError

    measured: dict[str, HostFacts] = {}
    for host in profile.hosts:
        try:
            measured[host.label] = await measure(transport_for(host), env=sim_env(sim_dir_of(profile)))
        except (TransportError, OSError, ValueError):
            continue
    return host_facts_for(profile, measured)


async def read_profile_model(profile: Profile) -> ModelFacts:
    """The profile's model-path read on its first host (node 0), over that host's transport."""
    from cockpit.model.config import ModelConfigError
    from cockpit.model.read import read_model_on_host
    from cockpit.transport import transport_for

    path = profile.flag("model-path")
    if not path:
        raise ModelConfigError(f"{profile.name}: server.model-path is not set")
    host = profile.hosts[0]
    python = None if host.is_local else profile.python
    return await read_model_on_host(transport_for(host), str(path), python=python, env=profile.env)


def backend_plan(
    profile: Profile, facts: list[HostFacts], model: ModelFacts, overrides: dict[str, Any] | None,
    *, calibrate: bool = True, calibrate_from: str | None = None,
) -> MemoryPlan:
    from cockpit.backends import get_backend

    try:
        backend = get_backend(profile.backend)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    runs = _journal_runs(None if calibrate_from else profile.name) if (calibrate or calibrate_from) else []
    mp = backend.memory_plan(profile, facts, model=model, overrides=overrides, runs=runs, calibrate_from=calibrate_from)
    if mp is None:
        raise BadInput(f"no memory plan for backend {profile.backend!r} yet (see docs/PLAN.md)")
    return cast("MemoryPlan", mp)


async def plan_for_profile(
    profile: Profile,
    overrides: dict[str, Any] | None = None,
    *,
    facts: list[HostFacts] | None = None,
    calibrate: bool = True,
    calibrate_from: str | None = None,
    model: ModelFacts | None = None,
) -> MemoryPlan:
    """The profile's memory plan. Raises ModelConfigError (bad or unreadable model), CockpitError."""
    from cockpit.backends import get_backend

    try:
        get_backend(profile.backend).effective_flags(profile, overrides)  # a refused flag: exit 2 before any I/O
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if model is None:
        model = await read_profile_model(profile)
    if facts is None:
        facts = await measured_facts(profile)
    return backend_plan(profile, facts, model, overrides, calibrate=calibrate, calibrate_from=calibrate_from)


def plan_finding(mp: MemoryPlan | None, error: str | None = None) -> Finding:
    """The plan as one finding: critical below the warn headroom, warning below the target."""
    if mp is None:
        return Finding(FINDING_ID, "info", f"memory plan not made: {error}")
    cur, rec = mp.current, mp.recommended
    sev = mp.severity
    changes: tuple[FlagChange, ...] = ()
    predicted: dict[str, Any] = {}
    if cur is not None:
        predicted = {"headroom_gb": round(cur.headroom_after_capture_gib, 2), "max_total_num_tokens": cur.max_total_num_tokens}
    if sev in ("critical", "warning") and rec is not None and cur is not None and rec.value != cur.value:
        changes = (FlagChange(rec.flag, None if mp.current_is_default else cur.value, rec.value),)
        predicted = {"headroom_gb": round(rec.headroom_after_capture_gib, 2), "max_total_num_tokens": rec.max_total_num_tokens}
    msg = mp.summary()
    if sev == "critical":
        msg += f" — below the {mp.warn_headroom_gib:g} GiB warn level: the first large prefill may run out of memory"
    elif sev == "warning":
        msg += f" — below the {mp.target_headroom_gib:g} GiB target"
    msg += f" ({'calibrated from run ' + mp.calibrated_from if mp.calibrated_from else 'estimate, not yet calibrated by a run'})"
    t = mp.terms
    arithmetic = (
        f"P ≈ {t.get('pre_load_avail_gib', 0):.2f} GiB, weights {mp.weights_gib_per_rank:.2f} GiB/rank, "
        f"KV {mp.kv_bytes_per_token:,} B/token; headroom = P·(1 − mfs) − req_to_token {t.get('req_to_token_gib', 0):.2f}"
        f" − workspaces {t.get('attention_workspace_gib', 0):.2f}"
        + (f" − graphs {t['graph_gib']:.2f}" if "graph_gib" in t else " (calibrated: δ·P around the measured run)")
    )
    return Finding(FINDING_ID, "ok" if sev == "ok" else sev, msg, changes=changes, predicted=predicted, arithmetic=arithmetic)


async def profile_plan_finding(
    profile: Profile, overrides: dict[str, Any] | None = None, *, facts: list[HostFacts] | None = None,
) -> tuple[Finding, MemoryPlan | None]:
    """plan_finding for a profile, never raising for an unreadable model or unknown GPUs (that is an
    info finding: the plan is advice, the launch is the operator's)."""
    from cockpit.transport.base import TransportError

    try:
        mp = await plan_for_profile(profile, overrides, facts=facts)
    except (CockpitError, TransportError, OSError) as exc:
        return plan_finding(None, str(exc)), None
    return plan_finding(mp), mp


