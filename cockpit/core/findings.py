"""Findings: what diagnosis and preflight tell the operator, with the flag changes that fix it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "warning", "info", "ok"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2, "ok": 3}


@dataclass(frozen=True)
class FlagChange:
    flag: str  # spelled as the server version accepts it, with leading dashes: "--mem-fraction-static"
    from_value: Any  # None when the flag was not set
    to_value: Any

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "from": self.from_value, "to": self.to_value}

    def as_diff(self) -> str:
        """`--mem-fraction-static 0.93 → 0.88` — the form the TUI, the CLI and the docs all use."""
        from cockpit.core.secrets import mask_value

        return f"{self.flag} {value_text(mask_value(self.flag, self.from_value))} → {value_text(mask_value(self.flag, self.to_value))}"


def value_text(v: Any) -> str:
    """A flag's value as every view shows it: `true`/`false` (the spelling a profile and `--set`
    take back), floats without trailing zeros, `unset` for a flag not given, lists as JSON."""
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict | list | tuple):
        import json

        return json.dumps(v, sort_keys=True)
    return str(v)


@dataclass(frozen=True)
class Finding:
    id: str  # stable snake_case, e.g. "low_headroom_after_graph_capture"
    severity: str  # critical / warning / info / ok
    message: str  # one or two sentences an operator understands, with the numbers
    ranks: tuple[str, ...] = ()
    changes: tuple[FlagChange, ...] = ()
    predicted: dict[str, Any] = field(default_factory=dict)  # e.g. {"headroom_gb": 5.5, "max_total_num_tokens": 60000}
    arithmetic: str | None = None  # the worked numbers behind the advice, shown on request
    alternatives: tuple[FlagChange, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "ranks": list(self.ranks),
            "message": self.message,
            "changes": [c.to_json() for c in self.changes],
            "predicted": dict(self.predicted),
        }
        if self.arithmetic:
            out["arithmetic"] = self.arithmetic
        if self.alternatives:
            out["alternatives"] = [c.to_json() for c in self.alternatives]
        return out


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first; stable otherwise."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))


def exit_code_for(findings: list[Finding]) -> int:
    """The CLI contract: 1 when any finding is critical, else 0."""
    return 1 if any(f.severity == "critical" for f in findings) else 0
