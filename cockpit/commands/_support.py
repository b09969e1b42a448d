"""What `cockpit up/status/logs/down` share: loading the profile, the status JSON, text output.

The JSON is the one shape DESIGN.md fixes for `diagnose`, `check` and `status`: RunState.to_json()
plus findings, with `status` adding each rank's GPU as telemetry sees it and the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from cockpit.commands._render import gb_text, render_state
from cockpit.face import (
    PD_ROLES,
    BadInput,
    CockpitError,
    Finding,
    Journal,
    Profile,
    RunSnapshot,
    SlurmView,
    TransportError,
    close_all,
    close_words,
    exit_code_for,
    list_profile_files,
    load_all_secret_flags,
    load_profile,
    mask_mapping,
    predicted_phrases,
    profile_dirs,
    rank_sort_key,
    resolve_profile,
    serving_words,
    sort_findings,
)

T = TypeVar("T")


def load_profile_arg(arg: str) -> Profile:
    path = resolve_profile(arg)
    if not path.exists() and "/" not in arg and not arg.endswith((".yaml", ".yml")):
        base, _, role = arg.rpartition(".")
        if role in PD_ROLES and base and resolve_profile(base).exists():
            # NAME.prefill / NAME.decode: one group of a prefill/decode profile, run as a profile
            whole = load_profile(resolve_profile(base))
            if whole.groups is None:
                raise BadInput(f"{base} declares no prefill/decode groups, so there is no {arg!r}")
            return whole.group_profile(role)
        raise missing_profile(arg)
    return load_profile(path)


def one_server(profile: Profile, verb: str) -> Profile:
    """`up`/`down`/`logs` act on one group of a prefill/decode profile, named NAME.prefill or
    NAME.decode: the whole profile is refused (exit 2) rather than run as one plain server."""
    if profile.groups:
        raise BadInput(f"{profile.name} declares a prefill group and a decode group: cockpit {verb} one of them, "
                       f"{profile.name}.prefill or {profile.name}.decode",
                       hint=f"cockpit plan {profile.name} plans both and shows the router's command; "
                            f"cockpit status {profile.name} shows both")
    return profile


def missing_profile(name: str) -> Exception:
    """No profile of that name: the directories searched, the profiles found, the close ones."""
    found = sorted({p.stem for p in list_profile_files()})
    near = close_words(name, found)
    hint = (f"did you mean {' or '.join(near)}? " if near else "") + (
        "searched " + ", ".join(str(d) for d in profile_dirs()) + "; profiles found: " + (", ".join(found) or "none"))
    return BadInput(f"no profile named {name!r}", hint=hint)


def open_journal() -> Any:
    """The journal, or None when it cannot be opened (a run is never refused for that)."""
    try:
        load_all_secret_flags()  # what it writes and reads is masked, abbreviations of any engine's flags too
        journal = Journal.open()
        if journal.note:  # a network filesystem: a rollback journal, not WAL (cockpit/journal/fs.py)
            import sys

            print(f"cockpit: note: {journal.note}", file=sys.stderr)
        return journal
    except Exception as exc:
        if "read-only" in str(exc):  # a valid journal this cockpit cannot write: say so, once
            import sys

            print(f"cockpit: warning: {exc}", file=sys.stderr)
        return None


def run_command(coro: Awaitable[T]) -> T:
    """asyncio.run, closing every pooled transport (SSH connections) before returning."""
    async def main() -> T:
        try:
            return await coro
        except TransportError as exc:
            # an unreachable host or a refused key: one line and the transport's hint, exit 1
            raise CockpitError(str(exc), hint=exc.hint) from None
        finally:

            await close_all()

    return asyncio.run(main())


def rank_gpu_json(snap: RunSnapshot, rank: str) -> dict[str, Any]:
    """{"index", "used_gb", "total_gb", "age_s"}; nulls when unknown, never 0."""
    where = snap.rank_gpu.get(rank)
    out: dict[str, Any] = {"host": None, "index": None, "used_gb": None, "total_gb": None, "age_s": None}
    if where is None:
        return out
    host, index = where
    out["host"], out["index"] = host, index
    for g in snap.gpus:
        if g.host == host and g.index == index:
            out["used_gb"] = None if g.used_gb is None else round(g.used_gb, 2)
            out["total_gb"] = None if g.total_gb is None else round(g.total_gb, 2)
            out["age_s"] = round(max(0.0, snap.taken_at - g.sampled_at), 1)
            break
    return out


def status_json(snap: RunSnapshot) -> dict[str, Any]:
    out = snap.state.to_json()
    for r in out["ranks"]:
        r["gpu"] = rank_gpu_json(snap, r["rank"])
    out["findings"] = [f.to_json() for f in sort_findings(list(snap.findings))]
    run = snap.run
    out["run"] = (
        None
        if run is None
        else {
            "id": run.id,
            "host": run.hosts[0] if run.hosts else None,
            "hosts": list(run.hosts),
            "pid": run.pid,
            "started_at": run.started_at or None,
            "run_dir": run.run_dir,
            "log_path": run.log_path,
            "flags": mask_mapping(run.flags),
        }
    )
    out["ending"] = snap.ending
    out["lifecycle"] = snap.lifecycle
    out["health"] = snap.health
    out["readiness"] = snap.readiness
    out["ready"] = snap.state.phase == "ready" and snap.health == "200"
    out["flag_diff"] = [c.to_json() for c in snap.flag_diff]  # masked as every FlagChange's JSON is
    if snap.target is not None:
        out["target"] = snap.target.to_json()
        if isinstance(snap.target, SlurmView):  # the job under its own key too (docs/OPERATIONS.md, "Slurm")
            out["slurm"] = snap.target.job_json()
    out["serving"] = snap.serving
    out["gpu_processes"] = [
        {"host": p.host, "pid": p.pid, "gpu": p.gpu_index, "used_gb": p.used_gb, "belongs_to_run": p.belongs_to_run}
        for p in snap.gpu_processes
    ]
    return out


def status_exit_code(snap: RunSnapshot) -> int:
    if snap.state.phase in ("crashed", "hung"):
        return 1
    return exit_code_for(list(snap.findings))


def render_findings(findings: list[Finding]) -> list[str]:
    lines = []
    marks = {"critical": "✖", "warning": "▲", "info": "●", "ok": "✔"}
    for f in sort_findings(findings):
        lines.append(f"{marks.get(f.severity, '-')} {f.severity.upper()} {f.id}: {f.message}")
        for c in f.changes:
            lines.append(f"    change: {c.as_diff()}")
        if f.predicted:
            lines.append("    predicted: " + " · ".join(predicted_phrases(f.predicted)))
    return lines


def render_status(snap: RunSnapshot, group: str | None = None) -> str:
    """The operator's text view of a snapshot (report.py renders the diagnosis when present);
    `group` (a prefill/decode profile's "prefill" or "decode") heads each rank row."""
    st = snap.state
    run = snap.run
    head = f"{snap.profile}"
    if run is not None:
        where = "" if run.pid is None else f" · pid {run.pid}"
        head += f" · {','.join(run.hosts)} · run {run.id}{where} · started {run.started_at}"
    lines = [head]
    sl = snap.target
    if isinstance(sl, SlurmView):  # a Slurm run: what Slurm says about the job
        left = f" · {sl.time_left} left" if sl.time_left else ""
        lines.append(f"Slurm job {sl.job_id} · {sl.words or sl.state}{left}"
                     + (f" · GPUs {sl.telemetry}" if sl.telemetry else ""))
    phase = st.phase.upper().replace("_", " ")
    ready = "ready: log" + (" + " + snap.readiness.split("+")[-1].strip() if snap.readiness else "")
    lines.append(f"phase {phase} · health {snap.health or 'not probed'} · {ready} · lifecycle {snap.lifecycle}")
    if st.hang:
        lines.append(f"HUNG: {st.hang.get('reason', '')} (window {st.hang.get('hang_after_s')} s); "
                     f"`cockpit stacks {snap.profile}` shows where every process is")
    if snap.serving:
        lines.append("serving " + serving_words(snap.serving))
    if snap.flag_diff:
        lines.append("flags changed from the profile: " + "; ".join(c.as_diff() for c in snap.flag_diff))
    if st.max_total_num_tokens is not None:
        lines.append(f"KV pool: max_total_num_tokens={st.max_total_num_tokens}")
    if st.ranks:
        grp = f"{'GROUP':<8} " if group else ""
        lines.append(f"{grp}{'RANK':<10} {'GPU':>8} {'USED/TOTAL GiB':>15} {'AGE':>6} {'WEIGHTS':>8} {'FREE AFTER CAPTURE':>19}")
        for r in sorted(st.ranks.values(), key=lambda r: rank_sort_key(r.rank)):
            g = rank_gpu_json(snap, r.rank)
            gpu = "?" if g["index"] is None else f"{g['host']}:{g['index']}" if len(snap.rank_gpu) and run and len(run.hosts) > 1 else str(g["index"])
            used = f"{gb_text(g['used_gb'])}/{gb_text(g['total_gb'])}"
            age = "?" if g["age_s"] is None else f"{g['age_s']:.1f}s"
            lines.append(
                (f"{group:<8} " if group else "")
                + f"{r.rank:<10} {gpu:>8} {used:>15} {age:>6} {gb_text(r.weights_gb):>8} {gb_text(r.avail_after_capture_gb):>19}"
            )
    if st.crash is not None:
        c = st.crash
        phase = "an unknown phase" if c.phase == "unknown" else c.phase
        lines.append(f"CRASH {c.kind} in {phase} on {c.rank or 'main'} (line {c.line}): {c.message}")
    leftovers = [p for p in snap.gpu_processes if not p.belongs_to_run]
    if leftovers and st.phase in ("stopped", "crashed"):
        lines.append("GPU memory held by: " + ", ".join(f"pid {p.pid} (GPU {p.gpu_index} on {p.host})" for p in leftovers))
    lines += render_findings(list(snap.findings))
    if snap.progress:
        lines.append(snap.progress)
    return "\n".join(lines)


def render_report(snap: RunSnapshot) -> str:
    """The diagnosis as `cockpit diagnose` renders it (cockpit/report.py), with the run's header."""
    head = render_status(snap).splitlines()[0]
    return head + "\n" + render_state(snap.state, list(snap.findings))


def elapsed(since: float) -> str:
    s = int(time.monotonic() - since)
    return f"{s // 60:02d}:{s % 60:02d}"
