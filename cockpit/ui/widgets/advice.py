"""The advice panel: findings, most severe first, each with its change and predicted effect."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit.face import Finding, predicted_phrases, sort_findings

MARKS = {"critical": "●", "warning": "▲", "info": "○", "ok": "✓"}


def predicted_words(finding: Finding, current_tokens: int | None) -> str:
    """`predicted 5.55 GiB free per rank · −67,000 KV tokens (→ 174,654)`: the finding's prediction in
    words with units (GiB with the two decimals SGLang prints, so it reads beside the log's figures)."""
    parts = predicted_phrases(finding.predicted, current_tokens)
    return ("predicted " + " · ".join(parts)) if parts else ""


def change_words(finding: Finding) -> str:
    return ", ".join(c.as_diff() for c in finding.changes)


def dedupe(findings: list[Finding]) -> list[Finding]:
    """One entry per thing said: findings with the same message and the same changes (an OOM and
    a low-headroom finding that both carry the headroom advice) are shown once, the most severe."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.message.strip(), tuple(c.as_diff() for c in f.changes))
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out


def _direction(c: object) -> int:
    a, b = getattr(c, "from_value", None), getattr(c, "to_value", None)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return (b > a) - (b < a)
    return 0


def conflicts(findings: list[Finding]) -> dict[int, str]:
    """For a finding whose change moves a flag the other way than a more severe finding's change
    (raise mfs for the context vs lower it for headroom), the words that reconcile them."""
    out: dict[int, str] = {}
    for i, f in enumerate(findings):
        for c in f.changes:
            for g in findings[:i]:
                for d in g.changes:
                    if d.flag == c.flag and _direction(c) * _direction(d) < 0:
                        out[i] = (f"opposite to the change above ({d.as_diff()}): that one keeps the server from "
                                  "crashing, so apply it first; this one only if what it costs is worth more")
    return out


class AdvicePanel(Widget):
    DEFAULT_CSS = """
    AdvicePanel { height: auto; }
    """

    COMPONENT_CLASSES = {
        "advice--critical",
        "advice--warning",
        "advice--info",
        "advice--ok",
        "advice--change",
        "advice--dim",
    }

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._findings: list[Finding] = []
        self._tokens: int | None = None
        self._key: tuple[object, ...] = ()
        self.show_arithmetic = False

    def show(self, findings: list[Finding] | tuple[Finding, ...], current_tokens: int | None) -> None:
        key = (tuple(findings), current_tokens, self.show_arithmetic)
        if key == self._key:
            return  # nothing new: no repaint
        self._key = key
        self._findings = dedupe(sort_findings(list(findings)))
        self._tokens = current_tokens
        self.refresh(layout=True)

    def toggle_arithmetic(self) -> None:
        self.show_arithmetic = not self.show_arithmetic
        self._key = ()
        self.refresh(layout=True)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"advice--{name}", partial=True)

    def render(self) -> Text:
        if not self._findings:
            return Text("no findings yet", style=self._style("dim"))
        lines: list[Text] = []
        opposite = conflicts(self._findings)
        for i, f in enumerate(self._findings):
            t = Text()
            sev = f.severity if f.severity in MARKS else "info"
            t.append(MARKS[sev] + " ", style=self._style(sev))
            if f.ranks and len(f.ranks) <= 3 and not any(r in f.message for r in f.ranks):
                t.append(", ".join(f.ranks) + ": ", style=self._style(sev))
            t.append(f.message)
            if f.changes:
                t.append("\n  → ", style=self._style("dim"))
                t.append(change_words(f), style=self._style("change"))
                pred = predicted_words(f, self._tokens)
                if pred:
                    t.append(" · " + pred, style=self._style("dim"))
                if i in opposite:
                    t.append("\n  ↔ " + opposite[i], style=self._style("dim"))
            if self.show_arithmetic and f.arithmetic:
                t.append("\n  " + f.arithmetic.replace("\n", "\n  "), style=self._style("dim"))
            lines.append(t)
        return Text("\n").join(lines)
