"""Plain-text reports for the CLI (`diagnose`, `check`, `status`): short, readable, no colour.

One function per view; the same words and the same `--flag old → new` diffs as the TUI.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from cockpit.face_light import (
    Finding,
    HostFacts,
    RunState,
    engine_name,
    flag_labels,
    normalise_flag_name,
    predicted_phrases,
    rank_sort_key,
)

MARK = {"critical": "✖", "warning": "▲", "info": "·", "ok": "●"}


def gb_text(v: float | None) -> str:
    """A GiB figure for the CLI tables: two decimals, `?` when unknown (never 0)."""
    return "?" if v is None else f"{v:.2f}"


def _int(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def rank_table(state: RunState) -> list[str]:
    """Per-rank memory: P, weights, KV tokens, free before capture, graphs, free after capture."""
    if not state.ranks:
        return ["(no per-rank memory lines in the log)"]
    head = ("RANK", "P GiB", "WEIGHTS", "KV TOKENS", "FREE PRE-CAPTURE", "GRAPHS", "FREE AFTER CAPTURE")
    rows = [head]
    worst = state.worst_rank
    for r in sorted(state.ranks.values(), key=lambda r: rank_sort_key(r.rank)):
        after = gb_text(r.avail_after_capture_gb) + (" ◀ worst" if r.rank == worst and len(state.ranks) > 1 else "")
        rows.append((r.rank, gb_text(r.pre_load_avail_gb), gb_text(r.weights_gb), _int(r.kv_tokens),
                     gb_text(r.avail_before_capture_gb), gb_text(r.graph_gb), after))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    out = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)] + [row[-1]]
        out.append("  ".join(cells).rstrip())
    return out


def findings_lines(findings: Sequence[Finding]) -> list[str]:
    if not findings:
        return ["(no findings)"]
    out: list[str] = []
    for f in findings:
        ranks = f" [{', '.join(f.ranks)}]" if f.ranks else ""
        out.append(f"{MARK.get(f.severity, '?')} {f.severity.upper()} {f.id}{ranks}")
        out.append(f"    {f.message}")
        for c in f.changes:
            out.append(f"    change: {c.as_diff()}")
        if f.predicted:
            out.append("    predicted: " + " · ".join(predicted_phrases(f.predicted)))
        for c in f.alternatives:
            out.append(f"    or: {c.as_diff()}")
    return out


def render_state(state: RunState, findings: Sequence[Finding], *, title: str | None = None) -> str:
    """The `diagnose` / `status` text report."""
    lines: list[str] = []
    if title:
        lines.append(title)
    setting = state.memory_setting
    head = f"{state.format or 'format unknown'} · phase {state.phase.upper()}"
    if setting is not None:

        flag = normalise_flag_name(setting[0])
        head += f" · {flag_labels().get(flag, flag)} {setting[1]:g}"
    if state.max_total_num_tokens is not None:
        head += f" · KV pool {state.max_total_num_tokens:,} tokens"
    if state.min_headroom_gb is not None:
        head += f" · worst headroom {state.min_headroom_gb:.2f} GiB ({state.worst_rank})"
    lines.append(head)
    lines.append("")
    lines += rank_table(state)
    if state.crash is not None:
        c = state.crash
        lines.append("")
        phase = "an unknown phase" if c.phase == "unknown" else c.phase
        lines.append(f"CRASH {c.kind} in {phase}" + (f" on {c.rank}" if c.rank else "") + f" (line {c.line})")
        lines.append(f"    {c.message.strip()[:300]}")
        for d in c.decisive_lines[:5]:
            if d.strip() and d.strip() != c.message.strip():
                lines.append(f"    | {d.strip()[:200]}")
        if c.phase_reason:
            lines.append(f"    phase {c.phase}: {c.phase_reason}")
    for w in state.log_warnings[:5]:
        if "survived" in w:
            lines.append(f"note: {w[:240]}")
    for a in state.engine_advice[:3]:
        lines.append(f"{engine_name(state.backend)}'s own advice: {a[:240]}")
    lines.append("")
    lines += findings_lines(findings)
    return "\n".join(lines) + "\n"


def render_check(
    profile_name: str, hosts: Iterable[HostFacts], findings: Sequence[Finding], argvs: Sequence[Sequence[str]] = ()
) -> str:
    """The `check` text report: what was measured, the command per node, then the findings."""
    lines = [f"check {profile_name}"]
    for h in hosts:
        gpus = "?" if h.gpu_count is None else str(h.gpu_count)
        gmem = "?" if h.gpu_mem_total_gib is None else f"{h.gpu_mem_total_gib:g} GiB"
        avail = "?" if h.mem_available_gb is None else f"{h.mem_available_gb:g} GB"
        lines.append(f"  host {h.host}: RAM available {avail} · GPUs {gpus} × {gmem} ({h.source})")
    for i, argv in enumerate(argvs):
        label = "command" if len(argvs) == 1 else f"node {i}"
        lines.append(f"  {label}: " + " ".join(shlex.quote(a) for a in argv))
    lines.append("")
    lines += findings_lines(findings)
    return "\n".join(lines) + "\n"
