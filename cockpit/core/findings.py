"""Findings: what diagnosis and preflight tell the operator, with the flag changes that fix it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cockpit.core.secrets import mask_value

Severity = Literal["critical", "warning", "info", "ok"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2, "ok": 3}


@dataclass(frozen=True)
class FlagChange:
    flag: str  # spelled as the server version accepts it, with leading dashes: "--mem-fraction-static"
    from_value: Any  # None when the flag was not set
    to_value: Any

    def to_json(self) -> dict[str, Any]:
        """The change as every JSON shows it (`status`, `check`, the journal): a secret value masked."""
        return {"flag": self.flag, "from": mask_value(self.flag, self.from_value), "to": mask_value(self.flag, self.to_value)}

    def as_diff(self) -> str:
        """`--mem-fraction-static 0.93 → 0.88` — the form the TUI, the CLI and the docs all use."""
        return f"{self.flag} {value_text(mask_value(self.flag, self.from_value))} → {value_text(mask_value(self.flag, self.to_value))}"


# A prediction's keys (the JSON contract) as the operator reads them: words and units, never the key.
# GiB for GPU memory (the engines print GiB); GB for host RAM (an engine's host cache is sized in GB).
# Each engine adds the keys in its own words when its backend loads (`register_predicted_words`).
_PREDICTED_WORDS: dict[str, str] = {
    "headroom_gb": "{:.2f} GiB free per rank",
    "freed_gb_per_gpu": "{:.2f} GiB freed per GPU",
    "kv_gb": "KV cache {:.2f} GiB per GPU",
    "kv_pool_gb": "KV pool {:.2f} GiB per GPU",
    "kv_gb_gain_per_gpu": "KV cache {:+.2f} GiB per GPU",
    "budget_gb": "budget {:.2f} GiB per GPU",
    "free_gb": "{:.2f} GiB free on the GPU",
    "gap_gb": "{:.2f} GiB gap between ranks",
    "full_length_requests": "{:g} full-length requests fit",
    "host_gb": "{:.1f} GB of host RAM needed",
}


def register_predicted_words(words: dict[str, str] | Any) -> None:
    """An engine's own predicted-effect keys with their words (`EngineWords.predicted_words`): the
    backend registry adds them when it loads the engine; a key already known keeps its words."""
    for key, template in dict(words).items():
        _PREDICTED_WORDS.setdefault(key, template)


def predicted_phrases(predicted: dict[str, Any], current_tokens: int | None = None) -> list[str]:
    """The predicted effect of a change in words with units (`5.55 GiB free per rank`, `−72,276 KV
    tokens (→ 174,654)`): what every view prints; the keys stay in the JSON only."""
    out: list[str] = []
    for key in ("headroom_gb", "max_total_num_tokens", *[k for k in predicted if k not in ("headroom_gb", "max_total_num_tokens")]):
        v = predicted.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            continue
        if key == "max_total_num_tokens":
            if not isinstance(v, int):
                continue
            if current_tokens is not None:
                d = v - current_tokens
                sign = f"+{d:,}" if d > 0 else f"−{abs(d):,}" if d < 0 else "±0"
                out.append(f"{sign} KV tokens (→ {v:,})")
            else:
                out.append(f"{v:,} KV tokens")
            continue
        template = _PREDICTED_WORDS.get(key)
        if template is not None and not isinstance(v, str):
            text = template.format(v)
            out.append(text.replace("-", "−", 1) if "{:+" in template else text)
        else:  # a key no view knows yet: its words, and GiB for a `_gb` figure, never the raw key
            name = key.removesuffix("_gb").replace("_", " ")
            unit = " GiB" if key.endswith("_gb") else ""
            out.append(f"{name} {value_text(v)}{unit}")
    return out


def quoted(text: str, limit: int) -> str:
    """A server's message placed inside a sentence of ours: stripped, cut at `limit` characters with
    `…`, and without its own closing full stop, so `…: {quoted(m, 200)}. Next sentence` never reads
    `needed.. Next`."""
    t = " ".join(text.split())
    if len(t) > limit:
        t = t[: limit - 1].rstrip() + "…"
    return t.rstrip(" .")


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
