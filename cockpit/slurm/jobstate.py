"""What Slurm says about a job, and what it means for the run.

Parsers for the answers the login node gives (`scontrol show job -o`, `sacct -P`, the
jobcomp/filetxt record; all `Key=Value` or `|`-separated text) and the one mapping from a
Slurm job state to the cockpit's words: queued (with Slurm's reason), running, stopped (the
operator or the scheduler ended it) or crashed (the job or its node failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# state -> (outcome, words). Outcome "stop": ended on purpose (by the operator, the scheduler's
# time limit or a preemption) — not the server's fault. "crash": the job, its node or its memory
# failed. Slurm's own words stay visible next to ours.
END_STATES: dict[str, tuple[str, str]] = {
    "COMPLETED": ("stop", "the job completed (every step exited 0)"),
    "CANCELLED": ("stop", "the job was cancelled (scancel)"),
    "TIMEOUT": ("stop", "the job reached its time limit"),
    "PREEMPTED": ("stop", "the job was preempted by a higher-priority job"),
    "DEADLINE": ("stop", "the job reached its deadline"),
    "FAILED": ("crash", "the job failed (a step exited non-zero)"),
    "NODE_FAIL": ("crash", "a node of the job failed"),
    "OUT_OF_MEMORY": ("crash", "the job ran out of host memory (Slurm's memory limit)"),
    "BOOT_FAIL": ("crash", "a node of the job failed to boot"),
}
QUEUED_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED")
RUNNING_STATES = ("RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
ALL_STATES = (*QUEUED_STATES, *RUNNING_STATES, *END_STATES)

_KV_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reported it. None / "" = Slurm did not say (never a made-up default)."""

    job_id: str
    state: str  # Slurm's word: PENDING, RUNNING, TIMEOUT, … ("UNKNOWN" when no source knew the job)
    reason: str = ""  # Slurm's Reason (Resources, Priority, JobHeldUser, TimeLimit, …); "" for None
    nodes: tuple[str, ...] = ()  # expanded node names, in allocation order (node rank order)
    node_list: str = ""  # Slurm's compressed form: gpu[01-02]
    time_limit: str = ""  # as Slurm prints it: 1:00:00, UNLIMITED
    run_time: str = ""
    exit_code: str = ""  # "rc:signal" as Slurm prints it
    source: str = ""  # scontrol, sacct, jobcomp
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def outcome(self) -> str:
        """queued, running, stop, crash or unknown."""
        base = self.state.split()[0] if self.state else ""
        if base in QUEUED_STATES:
            return "queued"
        if base in RUNNING_STATES:
            return "running"
        if base in END_STATES:
            return END_STATES[base][0]
        return "unknown"

    @property
    def ended(self) -> bool:
        return self.outcome in ("stop", "crash")

    @property
    def time_left(self) -> str | None:
        """Time left before the time limit as H:MM:SS (None while queued, unlimited or unknown)."""
        if self.outcome != "running":
            return None
        limit = parse_duration(self.time_limit)
        used = parse_duration(self.run_time)
        if limit is None or used is None:
            return None
        return format_duration(max(0, limit - used))

    @property
    def exit_status(self) -> int | None:
        """The shell-convention exit code of the job: rc, or 128+signal when a signal ended it."""
        m = re.fullmatch(r"(\d+):(\d+)\Z", self.exit_code or "")
        if not m:
            return None
        rc, sig = int(m.group(1)), int(m.group(2))
        return 128 + sig if sig else rc

    def describe(self) -> str:
        """The operator's line: `queued: Resources`, `running on gpu[01-02]`, `TIMEOUT: … (exit 0:15)`."""
        base = self.state.split()[0] if self.state else "UNKNOWN"
        reason = self.reason if self.reason and self.reason != "None" else ""
        if self.outcome == "queued":
            return f"queued: {reason or base}" if base == "PENDING" else f"queued: {base}" + (f" ({reason})" if reason else "")
        if self.outcome == "running":
            return f"{base.lower()} on {self.node_list or 'nodes not known yet'}"
        if self.ended:
            words = END_STATES[base][1]
            bits = [f"Slurm: job {self.job_id} {base}: {words}"]
            if reason:
                bits.append(f"reason {reason}")
            if self.exit_code:
                bits.append(f"exit code {self.exit_code}")
            return ", ".join(bits)
        return f"Slurm: job {self.job_id} state {base}" + (f" ({reason})" if reason else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason or None,
            "nodes": list(self.nodes),
            "time_left": self.time_left,
            "exit_code": self.exit_code or None,
            "source": self.source or None,
        }


def parse_kv(line: str) -> dict[str, str]:
    """`Key=Value Key2=Value with spaces …` (scontrol -o, jobcomp/filetxt) → dict.

    Values may hold spaces (Reason=ReqNodeNotAvail, Reserved …): a value runs until the next
    ` Key=`. Keys are what Slurm prints (AllocNode:Sid, CPUs/Task)."""
    out: dict[str, str] = {}
    matches = list(_KV_RE.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def _blank(v: str | None) -> str:
    return "" if v in (None, "(null)", "None", "Unknown", "N/A") else str(v)


def from_scontrol(text: str) -> SlurmJob | None:
    """The first job of `scontrol show job -o J` (None when there is none)."""
    for line in text.splitlines():
        if line.startswith("JobId="):
            kv = parse_kv(line)
            return SlurmJob(
                job_id=kv.get("JobId", ""),
                state=kv.get("JobState", "UNKNOWN"),
                reason=_blank(kv.get("Reason")),
                node_list=_blank(kv.get("NodeList")),
                time_limit=_blank(kv.get("TimeLimit")),
                run_time=_blank(kv.get("RunTime")),
                exit_code=_blank(kv.get("ExitCode")),
                source="scontrol",
                extra={k: kv[k] for k in ("StartTime", "EndTime", "Partition", "BatchHost") if k in kv},
            )
    return None


SACCT_FIELDS = ("JobID", "State", "ExitCode", "Reason", "NodeList", "Elapsed", "Timelimit")


def from_sacct(text: str, job_id: str) -> SlurmJob | None:
    """`sacct -j J -X -n -P -o JobID,State,ExitCode,Reason,NodeList,Elapsed,Timelimit`.

    sacct writes `CANCELLED by 0` as the state; the first word is the state."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS) or parts[0] != job_id:
            continue
        jid, state, exit_code, reason, node_list, elapsed, limit = parts[: len(SACCT_FIELDS)]
        extra = {"StateDetail": state} if " " in state else {}
        return SlurmJob(job_id=jid, state=state.split()[0] if state else "UNKNOWN", reason=_blank(reason),
                        node_list=_blank(node_list) if node_list != "None assigned" else "",
                        time_limit=_blank(limit), run_time=_blank(elapsed), exit_code=_blank(exit_code),
                        source="sacct", extra=extra)
    return None


def from_jobcomp(text: str, job_id: str) -> SlurmJob | None:
    """The jobcomp/filetxt record of a job (one `JobId=… JobState=…` line per finished job)."""
    found: SlurmJob | None = None
    for line in text.splitlines():
        if not line.startswith(f"JobId={job_id} "):
            continue
        kv = parse_kv(line)
        found = SlurmJob(job_id=job_id, state=kv.get("JobState", "UNKNOWN"), reason="",
                         node_list=_blank(kv.get("NodeList")), time_limit=_blank(kv.get("TimeLimit")),
                         exit_code=_blank(kv.get("ExitCode")), source="jobcomp")
    return found  # the last record wins (a requeued job is recorded again)


def with_nodes(job: SlurmJob, nodes: list[str]) -> SlurmJob:
    from dataclasses import replace

    return replace(job, nodes=tuple(nodes))


def parse_duration(text: str | None) -> int | None:
    """Slurm's durations in seconds: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
    None for UNLIMITED / INFINITE / unknown."""
    if not text:
        return None
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", "UNKNOWN"):
        return None
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
        parts = t.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        nums = [int(p) for p in parts] + [0] * (3 - len(parts))  # D-HH, D-HH:MM, D-HH:MM:SS
        return days * 86400 + nums[0] * 3600 + nums[1] * 60 + nums[2]
    parts = t.split(":")
    if not all(p.isdigit() for p in parts):
        return None
    if len(parts) == 1:
        return int(parts[0]) * 60  # minutes
    if len(parts) == 2:
        return int(parts[0]) * 60 + int(parts[1])  # MM:SS
    if len(parts) == 3:
        return int(parts[0]) * 3600 + int(parts[1]) * 60 + int(parts[2])
    return None


def format_duration(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h}:{m:02d}:{s:02d}"

