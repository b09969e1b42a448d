"""Drive loginside.py on the login node over any Transport, and read Slurm's answers."""

from __future__ import annotations

from typing import Any

from cockpit.errors import CockpitError
from cockpit.remote import programs
from cockpit.remote.calls import ProgramClient
from cockpit.slurm import jobstate
from cockpit.slurm.jobstate import SlurmJob
from cockpit.transport.base import TransportError

LOGINSIDE_SOURCE: bytes = programs.assemble(programs.LOGIN_PROGRAM)


class SubmitRejected(CockpitError):
    """sbatch refused the job; the message carries Slurm's own words."""


class LoginError(TransportError):
    """The login-side program ran but failed (its message is for the operator)."""


class UntrustedRunTree(CockpitError):
    """The run tree on the shared filesystem has a part that is not the operator's alone (another
    user's directory or file, a link, a mode others can write): nothing of it is used."""


class SlurmLogin(ProgramClient):
    """loginside.py's operations on the login node: the same calls as HostOps (request on stdin,
    retried when the connection drops), submit excepted: a second sbatch would queue a second job."""

    source = LOGINSIDE_SOURCE
    once_only = frozenset({"submit"})
    error = LoginError
    program_words = "the login-node program"
    answer_words = "the login node"

    async def call(self, req: dict[str, Any], timeout: float | None = 90.0) -> dict[str, Any]:
        return await self._call(req, timeout)

    def _checked(self, req: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("untrusted"):
            raise UntrustedRunTree(f"{self.label}: {answer.get('error')}",
                                   hint="a run tree in a shared workdir must be yours alone; Cockpit read nothing from it")
        return answer

    async def submit(self, profile: str, run_id: str, *, workdir: str, script: str, sbatch: list[str],
                     meta: dict[str, Any]) -> dict[str, Any]:
        """{"submitted": True, "run": {...}} or {"refused": "live", "run": {...}}; raises SubmitRejected."""
        ans = await self.call({"op": "submit", "profile": profile, "run_id": run_id, "workdir": workdir,
                               "script": script, "sbatch": sbatch, "meta": meta}, timeout=180)
        if "error" in ans:
            raise SubmitRejected(f"{profile}: Slurm refused the job: {ans['error']}",
                                 hint="check target: (partition, account, qos, time, sbatch-args) in the profile")
        return ans

    async def find(self, profile: str, workdir: str, run_id: str | None = None) -> dict[str, Any] | None:
        ans = await self.call({"op": "find", "profile": profile, "workdir": workdir, "run_id": run_id})
        if "error" in ans:
            raise LoginError(f"{self.label}: find: {ans['error']}")
        run: dict[str, Any] | None = ans.get("run")
        return run

    async def query(self, job_ids: list[str]) -> dict[str, SlurmJob]:
        ans = await self.call({"op": "query", "job_ids": [str(j) for j in job_ids]}, timeout=120)
        if "error" in ans:
            raise LoginError(f"{self.label}: query: {ans['error']}")
        return {jid: job_from_answer(jid, raw) for jid, raw in (ans.get("jobs") or {}).items()}

    async def cancel(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        ans = await self.call({"op": "cancel", "job_id": str(job_id), "timeout": timeout}, timeout=timeout + 60)
        if "error" in ans:
            raise LoginError(f"{self.label}: scancel {job_id}: {ans['error']}")
        return ans


def job_from_answer(job_id: str, raw: dict[str, Any]) -> SlurmJob:
    """scontrol's answer, else sacct's, else the job-completion record; else UNKNOWN with why."""
    job = jobstate.from_scontrol(raw.get("scontrol") or "")
    if job is None:
        job = jobstate.from_sacct(raw.get("sacct") or "", job_id)
    if job is None:
        job = jobstate.from_jobcomp(raw.get("jobcomp") or "", job_id)
    if job is None:
        why = "; ".join(str(raw[k]) for k in ("scontrol_error", "sacct_error", "jobcomp_error") if raw.get(k))
        return SlurmJob(job_id=job_id, state="UNKNOWN", reason=why or "no Slurm command knew the job")
    hostnames = raw.get("hostnames") or []
    return jobstate.with_nodes(job, list(hostnames)) if hostnames else job
