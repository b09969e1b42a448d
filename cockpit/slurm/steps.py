"""A Transport that runs each command as a Slurm step on one node of a running job.

`srun --jobid=J --overlap --nodes=1 --ntasks=1 --nodelist=<node> --quiet -- <argv>` on the login
node: the step shares the job's allocation (`--overlap`), so the telemetry agent measures the
node's GPUs next to the server without taking resources from it; it asks for the job's
`--gpus-per-node`, since a step confined by cgroups sees only the GPUs it requested. Clusters that forbid extra
steps make the agent fail; telemetry then says "not measured" with srun's words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cockpit.transport.base import Completed, Stream, Transport


class SrunStepTransport(Transport):
    def __init__(self, login: Transport, job_id: str, node: str, gpus_per_node: int | None = None):
        self.login = login
        self.job_id = job_id
        self.node = node
        self.label = node
        # where Slurm confines devices (cgroup ConstrainDevices) a step sees only the GPUs it
        # asked for: ask for the job's (shared with the server's step thanks to --overlap)
        self.gpus_per_node = gpus_per_node

    def _argv(self, argv: Sequence[str]) -> list[str]:
        gpus = [f"--gpus-per-node={self.gpus_per_node}"] if self.gpus_per_node else []
        return ["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={self.node}",
                *gpus, "--quiet", f"--job-name=cockpit-telemetry-{self.node}", "--", *argv]

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None, env: Mapping[str, str] | None = None,
                  cwd: str | None = None, timeout: float | None = 60.0) -> Completed:
        return await self.login.run(self._argv(argv), stdin=stdin, env=env, cwd=cwd, timeout=timeout)

    async def stream(self, argv: Sequence[str], *, stdin: bytes | None = None, env: Mapping[str, str] | None = None,
                     cwd: str | None = None) -> Stream:
        return await self.login.stream(self._argv(argv), stdin=stdin, env=env, cwd=cwd)

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        # the node's ports are reached from the login node by the node's name
        host = self.node if remote_host in ("127.0.0.1", "localhost") else remote_host
        return await self.login.forward_port(remote_port, host)

    async def close(self) -> None:
        """The login transport is pooled and owned by whoever made it."""
