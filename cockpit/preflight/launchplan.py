"""The gate's go for one launch: `GatedLaunch`, the only thing a target launches.

`Target.start` (and `Supervisor.start`, `Supervisor.restart` through it) takes a `GatedLaunch`, and
only the gate makes one: `GateResult.launch(force=…)` mints it from a verdict of `go` (or `force`),
and raises `GateRefused` (gate.py; carrying the whole GateResult, for the caller to show the
arithmetic) or the gate's bad input (FlagError) otherwise. Its constructor refuses any caller without the
module's private key, and a target checks the value it is given (`check_gated`) before anything
else: a launch whose flags the gate never saw is a TypeError, not a server. Each one is used once
(a restart walks the gate again: the facts of a minute ago are not the facts now).
tests/preflight/test_every_launch_gated.py finds every call of `.start(` in cockpit/ and holds
each to this.
"""

from __future__ import annotations

from typing import Any

from cockpit.core.overrides import Overrides
from cockpit.errors import CockpitError

_MINT = object()  # the gate's key: GateResult.launch passes it, nothing else in cockpit/ names it


class GatedLaunch:
    """What the gate let through: the argv per node it built, for these overrides of this profile.
    Made only by `GateResult.launch`; launched once."""

    __slots__ = ("_used", "argvs", "flags", "overrides", "plan_note", "profile_name", "verdict")

    def __init__(self, key: object, *, profile_name: str, overrides: Overrides, flags: dict[str, Any],
                 argvs: list[list[str]], verdict: str, plan_note: str | None = None):
        if key is not _MINT:
            raise TypeError("a GatedLaunch is made only by the gate (GateResult.launch): walk the gate first")
        self.profile_name = profile_name
        self.overrides = Overrides.of(overrides)
        self.flags = dict(flags)  # the run's server flags: the profile's with the overrides on top
        self.argvs = [list(a) for a in argvs]
        self.verdict = verdict  # "go", or "force" (a critical memory plan launched anyway)
        self.plan_note = plan_note  # the plan's words when it was forced
        self._used = False

    def __repr__(self) -> str:
        return f"GatedLaunch({self.profile_name!r}, {self.verdict}, nodes={len(self.argvs)})"


def mint(*, profile_name: str, overrides: Overrides, flags: dict[str, Any], argvs: list[list[str]], verdict: str,
         plan_note: str | None) -> GatedLaunch:
    """The gate's go (GateResult.launch calls this, once its verdict let the launch through): the
    pieces, not the GateResult, so that this module sits below the gate and never reads it."""
    return GatedLaunch(_MINT, profile_name=profile_name, overrides=overrides, flags=flags, argvs=argvs, verdict=verdict,
                       plan_note=plan_note)


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
