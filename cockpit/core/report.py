"""`cockpit report`: one Markdown report of a run, to paste into an upstream issue.

Pure: the command (cockpit/commands/report.py) gathers the facts — from a live run, the journal or
a log file alone — into `ReportFacts`; this module writes them. Every piece of text that came
from a log, a profile or a host passes through one function (`_t`): escape sequences and control
characters dropped (cockpit.core.sanitize), secrets masked (cockpit.core.redact, with the run's own
secret values), the operator's home directory written `~`. A fact Cockpit does not have says
"not recorded" or "unknown" and why. The whole stays under GitHub's comment limit
(MAX_CHARS): the long parts (the excerpt, the timeline, the findings' arithmetic) are cut first,
and a cut says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.redact import redact_argv, redact_text
from cockpit.core.sanitize import clean_text
from cockpit.core.secrets import mask_deep
from cockpit.core.state import RunState

MAX_CHARS = 65_536  # GitHub's limit on an issue comment's body
LINE_CAP = 1000  # characters of one log line in the report
DECISIVE_MAX = 40
EXCERPT_CONTEXT = 6  # lines either side of the decisive line
TIMELINE_STAGES = ("init", "weights_begin", "weights_end", "kv_pool", "capture_begin", "capture_end", "ready")


@dataclass
class Known:
    """A fact, or why it is not known."""

    value: str | None
    why: str = ""

    def text(self) -> str:
        return self.value if self.value else f"not recorded ({self.why})" if self.why else "unknown"


@dataclass
class ReportFacts:
    source: str  # what the report was made from, in words
    profile: str | None = None
    run_id: str | None = None
    backend: str | None = None
    engine: Known = field(default_factory=lambda: Known(None))
    torch: Known = field(default_factory=lambda: Known(None))
    cuda: Known = field(default_factory=lambda: Known(None))
    driver: Known = field(default_factory=lambda: Known(None))
    cockpit: str = ""
    started_at: str | None = None
    ended_at: str | None = None
    hosts: Sequence[str] = ()
    gpus: list[dict[str, Any]] | None = None
    gpus_why: str = ""
    command: list[str] | None = None
    command_why: str = ""
    server_args: dict[str, Any] | None = None  # what the engine printed (a log file alone)
    state: RunState | None = None
    phase: str | None = None
    crash: dict[str, Any] | None = None  # Crash.to_json() (or the journal's columns)
    ending: dict[str, Any] | None = None
    hang: dict[str, Any] | None = None
    decisive: list[str] = field(default_factory=list)
    excerpt: list[tuple[int, str]] | None = None
    excerpt_why: str = ""
    log_path: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)


def _home_short(text: str, home: str) -> str:
    if home and home != "/" and home in text:
        return text.replace(home, "~")
    return text


def make_cleaner(secrets: set[str], home: str | None = None) -> Callable[[Any], str]:
    home = home if home is not None else os.path.expanduser("~")

    def t(value: Any) -> str:
        text = clean_text(str(value)).replace("\r", " ").replace("\n", " ")
        if len(text) > LINE_CAP:
            text = text[:LINE_CAP] + " …"
        return _home_short(redact_text(text, secrets), home)

    return t


def _code(lines: Sequence[str]) -> str:
    body = "\n".join(lines).replace("```", "`\u200b``")  # a log line cannot close the block
    return f"```\n{body}\n```"


def _gib(v: Any) -> str:
    return "—" if v is None else f"{float(v):.2f}"


def render_report(f: ReportFacts, home: str | None = None) -> str:
    t = make_cleaner(f.secrets, home)
    home = home if home is not None else os.path.expanduser("~")
    head = [f"## Cockpit report: {t(f.profile or 'a log file')}" + (f" · run {t(f.run_id)}" if f.run_id else ""),
            "",
            f"_Made by Cockpit {t(f.cockpit)} from {t(f.source)}. Secrets (tokens, keys, passwords, URL "
            "passwords) are replaced by `***`; paths under the home directory start with `~`._",
            ""]
    verdict = _verdict(f, t)
    versions = ["### Versions", "", "| | |", "| --- | --- |",
                f"| engine | {t(f.engine.text())} |", f"| torch | {t(f.torch.text())} |",
                f"| CUDA | {t(f.cuda.text())} |", f"| NVIDIA driver | {t(f.driver.text())} |",
                f"| Cockpit | {t(f.cockpit)} |", ""]
    gpus = _gpus(f, t)
    command = _command(f, t, home)
    memory = _memory(f, t)
    timeline = _timeline(f, t)
    decisive = _decisive(f, t)
    excerpt = _excerpt(f, t)
    advice = _advice(f, t, arithmetic=True)
    parts = [head, verdict, versions, gpus, command, memory, timeline, decisive, excerpt, advice]
    out = "\n".join(line for p in parts for line in p)
    # over the limit: the long, optional parts go first, each cut said
    for cut in ("excerpt", "arithmetic", "timeline", "decisive", "command"):
        if len(out) <= MAX_CHARS:
            break
        if cut == "excerpt":
            excerpt = ["### Log excerpt", "", "_cut: the report would pass GitHub's comment limit_", ""]
        elif cut == "arithmetic":
            advice = _advice(f, t, arithmetic=False)
        elif cut == "timeline":
            timeline = ["### Phase timeline", "", "_cut: the report would pass GitHub's comment limit_", ""]
        elif cut == "decisive":
            decisive = [*decisive[:12], "", "_the rest cut: the report would pass GitHub's comment limit_", ""]
        else:
            command = ["### Command", "", "_cut: the report would pass GitHub's comment limit_", ""]
        parts = [head, verdict, versions, gpus, command, memory, timeline, decisive, excerpt, advice]
        out = "\n".join(line for p in parts for line in p)
    if len(out) > MAX_CHARS:
        out = out[: MAX_CHARS - 80] + "\n\n_…cut at GitHub's comment limit_\n"
    return out


def _verdict(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### Verdict", ""]
    phase = (f.phase or "unknown").upper().replace("_", " ")
    out.append(f"- **phase**: {t(phase)}")
    if f.started_at or f.ended_at:
        out.append(f"- **started** {t(f.started_at or 'unknown')} · **ended** "
                   f"{t(f.ended_at or ('still running' if f.phase not in ('crashed', 'stopped') else 'unknown'))}")
    if f.hosts:
        out.append(f"- **hosts**: {t(', '.join(f.hosts))}")
    c = f.crash
    if c:
        where = f" on {t(c['rank'])}" if c.get("rank") else ""
        line = f" (log line {c['line']})" if c.get("line") else ""
        out.append(f"- **crash**: `{t(c.get('kind') or 'unknown')}` during {t(c.get('phase') or 'an unknown phase')}"
                   f"{where}{line}")
        if c.get("message"):
            message = t(c["message"]).replace("`", "'")
            out.append(f"- **message**: `{message}`")
    if f.ending:
        e = f.ending
        sig = f", {t(e['signal'])}" if e.get("signal") else ""
        out.append(f"- **exit**: code {t(e.get('exit_code'))}{sig}, ended by {t(e.get('by', 'unknown'))}")
    if f.hang:
        out.append(f"- **hang evidence**: {t(f.hang.get('reason', ''))}")
    out.append("")
    return out


def _gpus(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### GPUs", ""]
    if not f.gpus:
        out += [f"not recorded ({t(f.gpus_why or 'no telemetry')})", ""]
        return out
    out += ["| host | GPU | name | memory used / total (GiB) |", "| --- | --- | --- | --- |"]
    for g in f.gpus:
        out.append(f"| {t(g.get('host', '?'))} | {t(g.get('index', '?'))} | {t(g.get('name') or 'unknown')} | "
                   f"{_gib(g.get('used_gb'))} / {_gib(g.get('total_gb'))} |")
    out.append("")
    return out


def _command(f: ReportFacts, t: Callable[[Any], str], home: str) -> list[str]:
    out = ["### Command", ""]
    if f.command:
        import shlex

        argv = [_home_short(clean_text(a), home) for a in redact_argv(f.command, f.secrets)]
        out += [_code([" ".join(shlex.quote(a) for a in argv)]), ""]
    else:
        out += [f"not recorded ({t(f.command_why or 'unknown')})", ""]
        if f.server_args:
            out += ["The server's arguments as its log printed them:", "",
                    _code([f"{t(k)} = {t(v)}" for k, v in sorted(redact_args(f.server_args).items())]), ""]
    return out


def redact_args(args: dict[str, Any]) -> dict[str, Any]:
    return dict(mask_deep(args))


def _memory(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### Memory per rank (GiB)", ""]
    st = f.state
    if st is None or not st.ranks:
        out += ["not recorded (the log shows no rank's memory lines)" if st is not None else
                "not recorded (the log is not readable from here)", ""]
        return out
    out += ["| rank | free before load | weights | KV tokens | KV | free before capture | graphs | free after capture |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in st.ranks.values():
        out.append(f"| {t(r.rank)} | {_gib(r.pre_load_avail_gb)} | {_gib(r.weights_gb)} | "
                   f"{'—' if r.kv_tokens is None else r.kv_tokens} | {_gib(r.kv_gb)} | {_gib(r.avail_before_capture_gb)} | "
                   f"{_gib(r.graph_gb)} | {_gib(r.avail_after_capture_gb)} |")
    if st.max_total_num_tokens is not None:
        out += ["", f"KV pool: {st.max_total_num_tokens} tokens."]
    out.append("")
    return out


def _timeline(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### Phase timeline", ""]
    st = f.state
    ranks = [r for r in (st.ranks.values() if st is not None else ()) if r.timeline]
    if not ranks:
        out += ["not recorded (no start-up milestones in the log)", ""]
        return out
    stages = [s for s in TIMELINE_STAGES if any(s in r.timeline for r in ranks)]
    out += ["| rank | " + " | ".join(s.replace("_", " ") for s in stages) + " |",
            "| --- | " + " | ".join("---" for _ in stages) + " |"]
    for r in ranks[:64]:
        out.append(f"| {t(r.rank)} | " + " | ".join(t(r.timeline.get(s, "—")) for s in stages) + " |")
    if len(ranks) > 64:
        out.append(f"| … {len(ranks) - 64} more ranks | " + " | ".join("" for _ in stages) + " |")
    out.append("")
    return out


def _decisive(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### Decisive lines", ""]
    lines = f.decisive[:DECISIVE_MAX]
    if not lines:
        out += ["none (no crash in the log)" if f.crash is None else "not recorded", ""]
        return out
    at = (f.crash or {}).get("line")
    if at:
        out.append(f"The decisive line is line {at} of the log.")
        out.append("")
    out += [_code([t(x) for x in lines]), ""]
    return out


def _excerpt(f: ReportFacts, t: Callable[[Any], str]) -> list[str]:
    out = ["### Log excerpt", ""]
    if not f.excerpt:
        out += [f"not recorded ({t(f.excerpt_why or 'no crash line to centre on')})", ""]
        return out
    width = len(str(f.excerpt[-1][0]))
    where = f"`{t(f.log_path)}`, " if f.log_path else ""
    out += [f"{where}lines {f.excerpt[0][0]}–{f.excerpt[-1][0]}:", "",
            _code([f"{n:>{width}} | {t(text)}" for n, text in f.excerpt]), ""]
    return out


def _advice(f: ReportFacts, t: Callable[[Any], str], *, arithmetic: bool) -> list[str]:
    out = ["### Advice", ""]
    if not f.findings:
        out += ["none: Cockpit found nothing to change", ""]
        return out
    for fd in f.findings:
        out.append(f"- **{t(fd.get('severity', ''))}** `{t(fd.get('id', ''))}`: {t(fd.get('message', ''))}")
        for c in fd.get("changes") or ():
            out.append(f"  - change `{t(c.get('flag'))}` from {t(c.get('from'))} to {t(c.get('to'))}")
        if arithmetic and fd.get("arithmetic"):
            out.append(f"  - arithmetic: {t(fd['arithmetic'])}")
    out.append("")
    return out
