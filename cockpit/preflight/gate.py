"""The gate between a profile and its launch, walked once: the argv per node (built here, once —
the target launches these), the host facts (measured by the agent, or the what-ifs), the
preflight rules of the backend, the launch checks on node 0 (launchcheck.py), the memory plan
(planning.py) and the verdict. `cockpit up`, `cockpit check`, the picker's preview and its
measurement, and the Supervisor's (the dashboard's) launch all call `gate`; none assembles the
sequence again.

| verdict | when | `up` | `check` |
|---|---|---|---|
| `bad-input` | the flags make no argv (FlagError, a refused flag) | exit 2 | exit 2 |
| `refuse` | a critical preflight or launch finding (`host_unreachable`, `port_in_use`, …) | exit 1 | exit 1 |
| `refuse` | the memory plan is critical (below the warn headroom), without `--force` | exit 1 | exit 1 |
| `force` | the memory plan is critical, with `--force` | launches, says so | — |
| `go` | otherwise | launches | exit 0 (or 1 on a critical plan) |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cockpit.backends import get_backend
from cockpit.core.findings import Finding, exit_code_for, sort_findings
from cockpit.core.overrides import Overrides
from cockpit.errors import CockpitError
from cockpit.preflight.launchcheck import launch_findings, node_zero
from cockpit.preflight.launchplan import mint
from cockpit.preflight.planning import plan_finding, profile_plan_finding
from cockpit.slurm.script import DIST_ADDR
from cockpit.telemetry.hostfacts import (
    apply_what_if,
    host_facts_for,
    local_host_facts,
    measure_hosts,
    sim_dir_of,
)

if TYPE_CHECKING:
    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import Profile
    from cockpit.model.plan import MemoryPlan
    from cockpit.preflight.launchcheck import HostNode
    from cockpit.preflight.launchplan import GatedLaunch
    from cockpit.remote.host import HostOps

# where a multi-node argv's rendezvous address goes when no launch is made: the argv is shown, and
# the address is said to be the head node's (a launch picks a free port on node 0, or Slurm's head)
HEAD_PLACEHOLDER = "HEAD_NODE:PORT"
LAUNCH = "launch"  # dist_addr=LAUNCH: the address the launch itself uses (gate(..., dist_addr=...))
SHOW = "show"  # dist_addr=SHOW: HEAD_PLACEHOLDER, nothing asked (an argv shown, not launched)


def merged_flags(profile: Profile, overrides: Overrides | Mapping[str, Any] | None) -> dict[str, Any]:
    """The server flags of a run: the profile's, with the run's overrides on top."""
    return Overrides.of(overrides).applied_to(profile.server)


def build_argvs(profile: Profile, overrides: Overrides | Mapping[str, Any] | None,
                dist_addr: str | None = HEAD_PLACEHOLDER) -> list[list[str]]:
    """The argv per node of `profile` with `overrides`, the rendezvous address `dist_addr` in a
    multi-node one: the one place cockpit builds a server's command line (the gate for a launch;
    `check`, `report` and the TUI's copied command for one shown). A secret flag the engine reads
    from its environment is left out (Backend.launch.secret_env). Raises FlagError."""

    argvs = get_backend(profile.backend).launch.node_argvs(profile, Overrides.of(overrides), dist_addr)
    return [list(a) for a in argvs]


def check_profile(
    profile: Profile,
    facts_overrides: Mapping[str, HostFacts] | None = None,
    *,
    host_mem_gb: float | None = None,
    gpu_mem_gb: float | None = None,
    gpus: int | None = None,
    version: str | None = None,
) -> tuple[list[Finding], list[HostFacts]]:
    """The backend's preflight rules over `profile`'s hosts: (findings most severe first, the host
    facts they were computed from). `facts_overrides` maps a host label to facts measured elsewhere
    (the agent over SSH); the what-ifs replace them on every host. Raises FlagError / ProfileError
    for a profile the server would refuse."""

    facts = apply_what_if(host_facts_for(profile, facts_overrides), host_mem_gb, gpu_mem_gb, gpus)
    backend = get_backend(profile.backend)
    if backend.doctor is None:  # an engine without preflight rules: said, not passed over in silence
        return [Finding("preflight_rules_unavailable", "info",
                        f"preflight rules unavailable for this engine ({backend.words().display}): "
                        "only the hosts and the launch are checked")], facts
    return backend.doctor.preflight(profile, facts, version=version), facts


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """Facts given instead of measured (`cockpit check --host-mem-gb/--gpu-mem-gb/--gpus`): the gate
    then describes another host, and asks node 0 nothing (its model path, its port)."""

    host_mem_gb: float | None = None
    gpu_mem_gb: float | None = None
    gpus: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.host_mem_gb, self.gpu_mem_gb, self.gpus))


class GateRefused(CockpitError):
    """The gate refused the launch (a critical preflight finding, or a critical memory plan without
    --force): nothing was launched, and on a restart nothing was stopped. `result` is the gate's
    whole answer (its findings carry the arithmetic)."""

    def __init__(self, result: GateResult):
        self.result = result
        name = result.profile.name
        shown = result.findings if result.preflight_refuses or result.plan is None else [result.plan]
        critical = [f for f in sort_findings(list(shown)) if f.severity == "critical"]
        first = critical[0].message if critical else "a critical finding"
        more = f" (+{len(critical) - 1} more)" if len(critical) > 1 else ""
        super().__init__(f"{name}: refused before launch: {first}{more}",
                         hint=None if result.preflight_refuses else "apply the change with --set, or launch anyway with --force")

    @property
    def findings(self) -> list[Any]:
        """The findings that refused it, most severe first (the plan's when only the plan did)."""
        r = self.result
        return list(r.findings) if r.preflight_refuses or r.plan is None else [r.plan]


@dataclasses.dataclass
class GateResult:
    """What the gate found for one profile and its overrides."""

    profile: Profile
    overrides: Overrides
    argvs: list[list[str]] | None  # one per node, as the target launches them (None: bad input)
    bad_input: Exception | None = None  # why no argv (FlagError): exit 2
    dist_addr: str | None = None  # the rendezvous address inside a multi-node argv
    facts: list[HostFacts] = dataclasses.field(default_factory=list)
    measured: bool = False  # the facts came from the hosts (not only this machine, not what-ifs)
    unreachable: dict[str, str] = dataclasses.field(default_factory=dict)  # host label -> why
    findings: list[Finding] = dataclasses.field(default_factory=list)  # rules, unreachable, launch checks
    plan: Finding | None = None  # the memory plan as one finding (None: not asked)
    memory_plan: MemoryPlan | None = None

    def __post_init__(self) -> None:
        self.overrides = Overrides.of(self.overrides)

    @property
    def flags(self) -> dict[str, Any]:
        """The run's server flags: the profile's with the overrides on top."""
        return self.overrides.applied_to(self.profile.server)

    @property
    def all_findings(self) -> list[Finding]:
        """Every finding, the plan's among them, most severe first (what `check` prints)."""
        return sort_findings([*self.findings, *([self.plan] if self.plan is not None else [])])

    @property
    def preflight_refuses(self) -> bool:
        return bool(exit_code_for(self.findings))

    @property
    def plan_refuses(self) -> bool:
        return self.plan is not None and self.plan.severity == "critical"

    def verdict(self, *, force: bool = False) -> str:
        """`bad-input`, `refuse`, `force` (a critical plan launched anyway) or `go`."""
        if self.bad_input is not None:
            return "bad-input"
        if self.preflight_refuses:
            return "refuse"
        if self.plan_refuses:
            return "force" if force else "refuse"
        return "go"

    def launch(self, *, force: bool = False) -> GatedLaunch:
        """The go a target launches (launchplan.py): GateRefused when the verdict refuses, the
        FlagError when the flags made no argv. The only way to a launch."""

        verdict = self.verdict(force=force)
        argvs = self.node_argvs()  # bad input: raises the gate's FlagError (exit 2)
        if verdict == "refuse":
            raise GateRefused(self)
        note = self.plan.message if verdict == "force" and self.plan is not None else None
        return mint(profile_name=self.profile.name, overrides=self.overrides, flags=self.flags, argvs=argvs,
                    verdict=verdict,
                    plan_note=note)

    def node_argvs(self) -> list[list[str]]:
        """The argv per node; raises the gate's bad input (FlagError: the commands exit 2 on it)."""
        if self.bad_input is not None:
            raise self.bad_input
        assert self.argvs is not None
        return self.argvs


async def _dist_addr(profile: Profile, flags: Mapping[str, Any], node0: HostNode | None, launching: bool) -> str | None:
    """The rendezvous address a multi-node launch puts in its argvs: the flags' own, else Slurm's
    head node (filled in by the batch script), else a free port on node 0 (asked only for a launch)."""

    nodes = profile.target.nodes if profile.target is not None else len(profile.hosts)
    if nodes <= 1:
        return None
    own = get_backend(profile.backend).launch.rendezvous_addr(flags)
    if own is not None:
        return own
    if not launching:
        return HEAD_PLACEHOLDER
    if profile.target is not None:

        return DIST_ADDR
    if node0 is None:
        return HEAD_PLACEHOLDER
    return await head_rendezvous(profile, node0.ops)


async def head_rendezvous(profile: Profile, ops: HostOps) -> str:
    """HOST:PORT for a multi-node launch on hosts: a port free on node 0 now, at the address the
    profile names for node 0 (`hosts[0].address`), else the one node 0 reaches outwards from."""
    addr, port = await ops.free_port()
    return f"{profile.hosts[0].address or addr}:{port}"


async def _measure(profile: Profile, unreachable: dict[str, str]) -> dict[str, HostFacts]:
    """Every host of `profile`: remote ones by the agent over their transport (one that cannot be
    reached gets why in `unreachable`); this machine in-process (NVML, else nvidia-smi: in a thread,
    it may take its timeout), or by the agent too when the profile runs the simulator, whose GPUs
    only the agent sees (as the launch's telemetry does). This machine is never unreachable: when
    the agent cannot run here, it is read in-process (host_facts_for)."""
    import asyncio


    simulated = sim_dir_of(profile) is not None
    measured = await measure_hosts(profile, unreachable, include_local=simulated)
    local = [h.label for h in profile.hosts if h.is_local]
    for label in local:
        unreachable.pop(label, None)
        if label in measured:  # RAM in GB to two places, as this machine's own reading gives it
            f = measured[label]
            measured[label] = dataclasses.replace(
                f, mem_total_gb=None if f.mem_total_gb is None else round(f.mem_total_gb, 2),
                mem_available_gb=None if f.mem_available_gb is None else round(f.mem_available_gb, 2))
    if local and not simulated:
        here = await asyncio.to_thread(local_host_facts)
        measured.update({label: here for label in local})
    return measured


async def gate(
    profile: Profile,
    overrides: Mapping[str, Any] | None = None,
    *,
    measure: bool = True,
    facts: Mapping[str, HostFacts] | None = None,
    what_if: WhatIf | None = None,
    runs: Iterable[Any] = (),
    plan: bool = True,
    launch_check: bool = True,
    dist_addr: str | None = LAUNCH,
    node0: HostNode | None = None,
) -> GateResult:
    """Walk the gate for `profile` with `overrides` (flag → value, any spelling).

    measure: the hosts are measured (`_measure`: the agent over each transport, this machine
    in-process; the simulator's GPUs count); a host that cannot be reached is a critical `host_unreachable` finding saying why.
    Without it only this machine is measured and nothing is asked of node 0 (the picker's first
    preview: a multi-node argv then names its rendezvous address HEAD_NODE:PORT). `facts`: measured
    already (the Supervisor's nodes), used instead. `runs`: the journal's runs for the plan's
    calibration (read by the caller, which sits above the journal). `dist_addr`: LAUNCH asks node 0
    for a free port when a multi-node launch needs one; SHOW puts HEAD_PLACEHOLDER there instead
    (asking nothing); any other string or None goes in the argv as is (what `check` shows).
    `node0`: node 0's host program (the Supervisor's); else one over the pooled transport.
    """

    ov = Overrides.of(overrides)  # any spelling: from here on, the one the profile uses
    backend = get_backend(profile.backend)
    what_if = what_if or WhatIf()
    flags = ov.applied_to(profile.server)
    launching = dist_addr in (LAUNCH, SHOW)
    if profile.target is None and measure and not what_if:  # node 0 is asked: its port, its model path
        node0 = node0 or node_zero(profile)
    # the argv first: a flag the server would refuse is refused before any I/O
    try:
        dist = await _dist_addr(profile, flags, node0, measure and dist_addr == LAUNCH) if launching else dist_addr
        argvs = build_argvs(profile, ov, dist)
    except ValueError as exc:  # FlagError, a backend that does not know the profile
        return GateResult(profile, ov, None, bad_input=exc)
    result = GateResult(profile, ov, argvs, dist_addr=dist)
    measured: Mapping[str, HostFacts] | None = facts
    if measured is None and measure and profile.target is None:  # a Slurm job's nodes are unknown yet
        measured = await _measure(profile, result.unreachable)
    result.measured = measured is not None
    checked = profile.model_copy(update={"server": flags}) if ov else profile
    findings, result.facts = check_profile(checked, measured, host_mem_gb=what_if.host_mem_gb,
                                           gpu_mem_gb=what_if.gpu_mem_gb, gpus=what_if.gpus)
    # a host that cannot be reached is a failed gate, with the reason (exit 1), not "unknown"
    lost = [Finding(id="host_unreachable", severity="critical", message=f"{label}: {why}")
            for label, why in result.unreachable.items()]
    # the model path missing on node 0, its API port bound: the launch would die of them (not with
    # what-if facts: the host they describe is not the one that could be asked)
    n0 = profile.hosts[0].label
    asked = launch_check and measure and not what_if and n0 not in result.unreachable
    # the rendezvous port checked free on node 0 is the flags' own (one the gate picked is free)
    own_rdv = backend.launch.rendezvous_addr(flags) if dist is not None else None
    result.findings = sort_findings([*findings, *lost, *(await launch_findings(profile, ov, node0, own_rdv)
                                                         if asked else [])])
    if plan:
        result.plan, result.memory_plan = await _plan(profile, ov, result, runs)
        # the engine's rules that need the plan's device pool (SGLang: HiCache's host pool against it)
        if result.memory_plan is not None and backend.doctor is not None:
            result.findings = sort_findings([*result.findings, *backend.doctor.after_plan(checked, result.memory_plan)])
    return result


async def _plan(profile: Profile, overrides: Overrides, result: GateResult,
                runs: Iterable[Any]) -> tuple[Finding, MemoryPlan | None]:
    """The memory plan from the gate's facts; the model's metadata is read on node 0, which is not
    tried again when the agent could not reach it."""

    node0 = profile.hosts[0]
    if node0.label in result.unreachable:
        return plan_finding(None, f"{node0.label} could not be reached to read the model's config.json"), None
    return await profile_plan_finding(profile, overrides.as_dict(), facts=result.facts, runs=runs)
