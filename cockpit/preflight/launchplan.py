"""The gate's go for one launch: `GatedLaunch`, the only thing a target launches.

`Target.start` (and `Supervisor.start`, `Supervisor.restart` through it) takes a `GatedLaunch`, and
only the gate makes one: `GateResult.launch(force=…)` mints it from a verdict of `go` (or `force`),
and raises `GateRefused` (carrying the whole GateResult, for the caller to show the arithmetic) or
the gate's bad input (FlagError) otherwise. Its constructor refuses any caller without the
module's private key, and a target checks the value it is given (`check_gated`) before anything
else: a launch whose flags the gate never saw is a TypeError, not a server. Each one is used once
(a restart walks the gate again: the facts of a minute ago are not the facts now).
tests/preflight/test_every_launch_gated.py finds every call of `.start(` in cockpit/ and holds
each to this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cockpit.errors import CockpitError

if TYPE_CHECKING:
    from cockpit.preflight.gate import GateResult

_MINT = object()  # the gate's key: GateResult.launch passes it, nothing else in cockpit/ names it


class GateRefused(CockpitError):
    """The gate refused the launch (a critical preflight finding, or a critical memory plan without
    --force): nothing was launched, and on a restart nothing was stopped. `result` is the gate's
    whole answer (its findings carry the arithmetic)."""

    def __init__(self, result: GateResult):
        from cockpit.core.findings import sort_findings

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


class GatedLaunch:
    """What the gate let through: the argv per node it built, for these overrides of this profile.
    Made only by `GateResult.launch`; launched once."""

    __slots__ = ("_used", "argvs", "overrides", "plan_note", "profile_name", "verdict")

    def __init__(self, key: object, *, profile_name: str, overrides: Mapping[str, Any],
                 argvs: list[list[str]], verdict: str, plan_note: str | None = None):
        if key is not _MINT:
            raise TypeError("a GatedLaunch is made only by the gate (GateResult.launch): walk the gate first")
        self.profile_name = profile_name
        self.overrides = dict(overrides)
        self.argvs = [list(a) for a in argvs]
        self.verdict = verdict  # "go", or "force" (a critical memory plan launched anyway)
        self.plan_note = plan_note  # the plan's words when it was forced
        self._used = False

    def __repr__(self) -> str:
        return f"GatedLaunch({self.profile_name!r}, {self.verdict}, nodes={len(self.argvs)})"


def mint(result: GateResult, *, force: bool = False) -> GatedLaunch:
    """The gate's go for `result` (GateResult.launch calls this): GateRefused when it refuses, the
    FlagError when the flags made no argv."""
    verdict = result.verdict(force=force)
    argvs = result.node_argvs()  # bad input: raises the gate's FlagError (exit 2)
    if verdict == "refuse":
        raise GateRefused(result)
    note = result.plan.message if verdict == "force" and result.plan is not None else None
    return GatedLaunch(_MINT, profile_name=result.profile.name, overrides=result.overrides, argvs=argvs,
                       verdict=verdict, plan_note=note)


def check_gated(plan: object, profile_name: str, nodes: int) -> GatedLaunch:
    """What every target's start does first: `plan` is the gate's, for this profile and as many
    nodes, not launched before. Marks it used."""
    if not isinstance(plan, GatedLaunch):
        raise TypeError(f"a launch takes the gate's GatedLaunch, not {type(plan).__name__}: walk the gate first")
    if plan.profile_name != profile_name:
        raise TypeError(f"the gate passed {plan.profile_name}, not {profile_name}")
    if len(plan.argvs) != nodes:
        raise CockpitError(f"{profile_name}: the gate built {len(plan.argvs)} argvs for {nodes} nodes")
    if plan._used:
        raise TypeError(f"{profile_name}: this gate's verdict was launched already: walk the gate again")
    plan._used = True
    return plan
