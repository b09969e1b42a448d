"""Which advice a restart applies: the headroom advice (`r`, the crash dialog's `r`, unattended
mode's restart-with-advice) and the other changes offered one by one (`A`). Pure functions over
findings, no Textual (the run control and the unattended policy use them without a screen)."""

from __future__ import annotations

from cockpit.face import Finding

# The findings whose change is the headroom advice (δ·P on --mem-fraction-static, or what stands
# for it in a graph-capture OOM): what `r` and the crash dialog's `r` apply. Other findings'
# changes (context length, KV pool, HiCache) are offered one by one, each with its reason.
HEADROOM_FINDINGS = ("low_headroom_after_graph_capture", "oom_crash", "graph_capture_oom")


def headroom_finding(findings: tuple[Finding, ...] | list[Finding]) -> Finding | None:
    """The most severe headroom finding that carries a change, or None."""
    order = {"critical": 0, "warning": 1, "info": 2, "ok": 3}
    cands = [f for f in findings if f.changes and f.id in HEADROOM_FINDINGS]
    cands.sort(key=lambda f: order.get(f.severity, 9))
    return cands[0] if cands else None


def proposed_finding(findings: tuple[Finding, ...] | list[Finding]) -> Finding | None:
    """The finding whose change the crash dialog proposes: the headroom advice when there is
    one, else the most severe finding with a change."""
    found = headroom_finding(findings)
    if found is not None:
        return found
    order = {"critical": 0, "warning": 1, "info": 2, "ok": 3}
    with_change = [f for f in findings if f.changes]
    with_change.sort(key=lambda f: order.get(f.severity, 9))
    return with_change[0] if with_change else None


def other_advice(findings: tuple[Finding, ...] | list[Finding]) -> list[Finding]:
    """Findings with a change that `r` does not apply, one entry per distinct change."""
    head = headroom_finding(findings)
    # the change `r` applies is never "other" advice, whichever finding carries it too
    seen: set[tuple[str, ...]] = {tuple(c.as_diff() for c in head.changes)} if head is not None else set()
    out: list[Finding] = []
    for f in findings:
        key = tuple(c.as_diff() for c in f.changes)
        if not f.changes or f is head or key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out
