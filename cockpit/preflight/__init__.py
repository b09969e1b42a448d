"""The gate between a profile and its launch (gate.py): the argv per node built once, the host
facts, the backend's preflight rules, the launch checks on node 0 (launchcheck.py), the memory
plan (planning.py) and the verdict. It sits above the backends, the model and the telemetry's host
facts, below the Supervisor and the faces (pyproject's import-linter layers)."""

from cockpit.preflight.gate import (
    LAUNCH,
    SHOW,
    GateRefused,
    GateResult,
    WhatIf,
    check_profile,
    gate,
    merged_flags,
)
from cockpit.preflight.launchplan import GatedLaunch

__all__ = ["LAUNCH", "SHOW", "GateRefused", "GateResult", "GatedLaunch", "WhatIf", "check_profile", "gate",
           "merged_flags"]
