"""`cockpit report RUN|PROFILE|LOG [--output FILE]`: one Markdown report of a run for an upstream issue.

What the argument names, tried in this order: a log file (an existing file that is not a profile's
YAML) — the report of that log alone; a profile — its run as `cockpit status` sees it (live, or
the newest one ended); a run id of the journal (or the start of one) — that run as the journal
kept it, with its log re-read when it is on this machine. Anything else: exit 2.

The facts are gathered here; cockpit/core/report.py writes them (secrets masked with the run's
own secret values, escape sequences dropped, `~` for the home directory, under GitHub's limit).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

from cockpit.commands._reading import diagnose_logs
from cockpit.commands._support import load_profile_arg, run_command
from cockpit.face import (
    DEFAULT_BACKEND,
    BadInput,
    Journal,
    Known,
    NodeLog,
    Profile,
    ReportFacts,
    Supervisor,
    apply,
    build_argvs,
    end_of_input,
    get_backend,
    load_all_secret_flags,
    load_profile,
    render_report,
    resolve_profile,
    secret_values,
    sort_findings,
)

EXCERPT_CONTEXT = 6
RING_LINES = 4000  # lines of a run's log kept while re-reading it (the excerpt's lines are near the crash)
MAX_LOG_READ = 256 << 20  # a bigger log is not re-read here (its memory table then says why)


def run(args: argparse.Namespace) -> int:

    target = str(args.target)
    if not target.strip():
        raise BadInput("cockpit report: name a run id, a profile or a log file")
    facts = _facts(target, run_command)
    text = render_report(facts)
    if args.output:
        out = Path(args.output)
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise BadInput(f"--output {args.output}: cannot be written ({exc.strerror or exc})") from None
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"cockpit: report written to {out} ({len(text):,} characters)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _cockpit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cockpit")
    except PackageNotFoundError:
        return "unknown (not installed as a package)"


def _facts(target: str, run_command: Any) -> ReportFacts:

    path = Path(target).expanduser()
    if path.is_file() and path.suffix not in (".yaml", ".yml"):
        return _from_log(str(path))
    if path.is_dir():
        raise BadInput(f"{target}: is a directory; name a log file, a profile or a run id")
    profile: Profile | None = None
    try:
        profile = load_profile_arg(target)
    except BadInput:
        profile = None
    if profile is not None:
        if profile.groups:
            raise BadInput(f"{profile.name} has a prefill and a decode group: report one of them, "
                           f"{profile.name}.prefill or {profile.name}.decode")
        facts: ReportFacts | None = run_command(_from_profile(profile))
        if facts is not None:
            return facts
        raise BadInput(f"{profile.name}: no run found on its hosts and none in the journal",
                       hint=f"`cockpit up {profile.name}` launches one; `cockpit runs` lists recorded runs")
    return _from_journal(target)


# ---------------------------------------------------------------- a log file alone
def _from_log(path: str) -> ReportFacts:

    state, findings, _reads = diagnose_logs([path])
    facts = ReportFacts(source=f"the log file {path} alone", cockpit=_cockpit_version(), backend=state.backend,
                        log_path=path)
    facts.engine = Known(f"{state.backend} ({state.format})" if state.format else state.backend,
                         "the log does not say its version")
    _versions_unknown(facts, "a log file alone")
    facts.gpus_why = "a log file alone: no telemetry; the memory table below is the log's"
    facts.command_why = "a log file alone: the launch command is not in it"
    facts.server_args = dict(state.server_args) or None
    facts.secrets = secret_values(state.server_args)
    _from_state(facts, state, [f.to_json() for f in findings])
    with open(path, "rb") as fh:
        _excerpt_from(facts, fh, 0)
    return facts


# ---------------------------------------------------------------- a profile's run (live or ended)
async def _from_profile(profile: Profile) -> ReportFacts | None:
    load_all_secret_flags()
    sup = Supervisor(profile)
    try:
        info = await sup.attach(include_ended=True)
        if info is None:
            return None
        snap = await sup.refresh_once()
        ring = sup.recent_lines()
    finally:
        await sup.close()
    live = snap.ending is None and snap.state.phase not in ("crashed", "stopped")
    facts = ReportFacts(source="a live run" if live else "the run's files (it has ended)", cockpit=_cockpit_version(),
                        profile=profile.name, run_id=info.id, backend=profile.backend,
                        started_at=info.started_at or None, hosts=tuple(info.hosts), log_path=info.log_path,
                        ending=snap.ending, hang=snap.state.hang)
    facts.secrets = secret_values(profile.server, profile.env, info.flags)
    facts.engine = _engine_words(profile.backend, info.version or profile.version, snap.state.format)
    _versions_unknown(facts, "Cockpit does not read the engine's Python environment")
    facts.gpus = [{"host": g.host, "index": g.index, "name": g.name, "used_gb": g.used_gb, "total_gb": g.total_gb}
                  for g in snap.gpus if g.source != "none"] or None
    facts.gpus_why = "telemetry saw no GPU (a CPU engine, or no NVML/nvidia-smi on the host)"
    _command_of(facts, sup, profile, dict(info.flags))
    _from_state(facts, snap.state, [f.to_json() for f in sort_findings(list(snap.findings))])
    if not _excerpt_local(facts, info.hosts, info.log_path, info.run_dir, sup):
        crash_line = (facts.crash or {}).get("line")
        lines = [(ln.number, ln.text) for ln in ring]
        if crash_line and lines and lines[0][0] <= crash_line <= lines[-1][0]:
            facts.excerpt = [(n, x) for n, x in lines if abs(n - crash_line) <= EXCERPT_CONTEXT]
    return facts


def _command_of(facts: ReportFacts, sup: Any, profile: Profile, flags: dict[str, Any]) -> None:
    try:

        argvs = build_argvs(profile, flags)
        facts.command = list(argvs[0])
    except Exception as exc:  # the flags make no argv (a flag error): say why
        facts.command_why = f"the run's flags do not make a command line: {exc}"


def _excerpt_local(facts: ReportFacts, hosts: Any, log_path: str | None, run_dir: str | None, sup: Any) -> bool:
    """The excerpt from the run's log when it is on this machine (from the run's start offset)."""
    local = not hosts or all(h in ("local", "localhost") for h in hosts) or (
        sup is not None and all(n.host.is_local for n in sup.nodes))
    if not (local and log_path and Path(log_path).is_file()):
        facts.excerpt_why = "the run's log is on another host" if log_path else "the run has no log path"
        return False
    offset = _log_offset(run_dir)
    with open(log_path, "rb") as fh:
        _excerpt_from(facts, fh, offset)
    return facts.excerpt is not None


def _excerpt_from(facts: ReportFacts, fh: Any, offset: int) -> None:
    """Lines around the crash's decisive line, numbered as the run's log (from `offset`)."""
    crash_line = (facts.crash or {}).get("line")
    if not crash_line:
        facts.excerpt_why = "no crash line to centre on"
        return
    fh.seek(offset)
    reader = NodeLog(get_backend(facts.backend or DEFAULT_BACKEND), "local", parse=False, catch_up=None)
    kept: deque[tuple[int, str]] = deque(maxlen=RING_LINES)
    read = 0
    while read < MAX_LOG_READ:
        chunk = fh.read(1 << 20)
        if not chunk:
            break
        read += len(chunk)
        _ev, lines = reader.feed_lines(chunk)
        kept.extend((ln.number, ln.text) for ln in lines if ln.number <= crash_line + EXCERPT_CONTEXT)
        if reader.lines > crash_line + EXCERPT_CONTEXT:
            break
    near = [(n, x) for n, x in kept if abs(n - crash_line) <= EXCERPT_CONTEXT]
    if near:
        facts.excerpt = near
    else:
        facts.excerpt_why = f"line {crash_line} is past what was read ({read:,} bytes)"


# ---------------------------------------------------------------- a run id of the journal
def _from_journal(target: str) -> ReportFacts:
    load_all_secret_flags()
    journal = Journal.open(readonly=True)
    try:
        rec = journal.get(target)
    finally:
        journal.close()
    if rec is None:
        raise BadInput(f"{target!r} is not a log file, a profile or a run id in the journal",
                       hint="`cockpit runs` lists the recorded runs; `cockpit report path/to/server.log` reports a log")
    facts = ReportFacts(source="the journal (the run as Cockpit recorded it)", cockpit=_cockpit_version(),
                        profile=rec.profile, run_id=rec.id, backend=rec.backend, started_at=rec.started_at,
                        ended_at=rec.ended_at, hosts=rec.hosts, log_path=rec.log_path,
                        # how it ended, once it has (the phase column keeps the last phase seen)
                        phase=rec.outcome if rec.outcome in ("stopped", "crashed") else (rec.phase or rec.outcome))
    profile: Profile | None = None
    try:
        p = resolve_profile(rec.profile)
        profile = load_profile(p) if p.exists() else None
    except Exception:
        profile = None
    facts.secrets = secret_values(rec.flags, *((profile.server, profile.env) if profile is not None else ()))
    facts.engine = _engine_words(rec.backend or "", None, rec.backend_version)
    _versions_unknown(facts, "the journal does not keep them")
    facts.gpus_why = "the journal keeps no GPU list"
    if profile is not None:
        from types import SimpleNamespace


        # the backend is all _command_of needs
        _command_of(facts, SimpleNamespace(backend=get_backend(profile.backend)), profile, dict(rec.flags))
    else:
        facts.command_why = f"the profile {rec.profile!r} is no longer in the profiles folder"
    if rec.crash_kind:
        facts.crash = {"kind": rec.crash_kind, "phase": rec.crash_phase, "rank": rec.crash_rank,
                       "message": rec.crash_message, "line": None}
    facts.decisive = list(rec.decisive_lines)
    facts.findings = [dict(f) for f in rec.findings]
    # the log, when it is still here: the memory table, the timeline, the line numbers
    if rec.log_path and Path(rec.log_path).is_file() and (not rec.hosts or rec.hosts[0] in ("local", "localhost")):
        _state_from_run_log(facts, rec.log_path, rec.run_dir)
    else:
        facts.excerpt_why = "the run's log is not on this machine" if rec.log_path else "the journal has no log path"
    return facts


def _state_from_run_log(facts: ReportFacts, log_path: str, run_dir: str | None) -> None:
    offset = _log_offset(run_dir)
    backend = get_backend(facts.backend or DEFAULT_BACKEND)
    reader = NodeLog(backend, "local", parse=True, catch_up=None)
    state = backend.logs.new_state()
    read = 0
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        while read < MAX_LOG_READ and (chunk := fh.read(1 << 20)):
            read += len(chunk)
            events, _lines = reader.feed_lines(chunk)
            for ev in events:
                apply(state, ev)
        for ev in reader.finish():
            apply(state, ev)
        end_of_input(state)
        if facts.crash is not None and state.crash is not None:
            facts.crash["line"] = state.crash.line
        facts.state = state
        _excerpt_from(facts, fh, offset)


# ---------------------------------------------------------------- shared
def _log_offset(run_dir: str | None) -> int:
    """Where the run's part of the profile's log begins (the run directory's `log_offset`; 0 when
    it cannot be read: the whole file is then the run's)."""
    if not run_dir:
        return 0
    try:
        return int(Path(run_dir, "log_offset").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _engine_words(backend: str, pinned: str | None, fmt: str | None) -> Known:
    if pinned:
        return Known(f"{backend} {pinned}" + (f" (log format {fmt})" if fmt else ""))
    if fmt:
        return Known(f"{backend} (log format {fmt})")
    return Known(None, "neither the profile nor the log says the version")


def _versions_unknown(facts: ReportFacts, why: str) -> None:
    facts.torch = Known(None, why)
    facts.cuda = Known(None, why)
    facts.driver = Known(None, why)


def _from_state(facts: ReportFacts, state: Any, findings: list[dict[str, Any]]) -> None:
    facts.state = state
    facts.phase = state.phase
    if state.crash is not None:
        facts.crash = state.crash.to_json()
        facts.decisive = list(state.crash.decisive_lines) or [state.crash.message]
    facts.findings = findings
