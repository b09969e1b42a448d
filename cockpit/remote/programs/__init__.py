"""The stdlib programs Cockpit sends to hosts and login nodes, as text.

Nothing is installed on a GPU host or a login node: a client sends a program's text on stdin to
`python3 -` (Python 3.8+, stdlib only), followed by the line that calls its main() with the request.
A program is assembled from this folder's files in order, so code several programs need lives once
in a module sent ahead of them (`assemble`). Imported from the package (tests), each module imports
the names it uses from the modules sent before it.

  runtree.py     the run tree's trust checks, sent ahead of the host and login-node programs
  the host program, by job (client: cockpit/remote/host.py):
    runfiles.py  run files (0600, atomic, durable, disk errors named); sent to login nodes too
    procfs.py    /proc readers (stat, cmdline, comm, alive), shared with the telemetry agent
    oomwatch.py  the evidence an OOM kill needs (memory.events oom_kill, memory at its limit)
    proctree.py  the run's process tree, its leftovers, signals to a whole run
    logfiles.py  the run's log and the profile's link to it; read, scan, follow
    hostside.py  runs: launch (and its waiter), find, stop, kill, alive, free_port, launch_check; main
    hoststacks.py  stacks (py-spy), added to the operations
  loginside.py   the login-node program of a Slurm run; client: cockpit/remote/login.py
  the telemetry agent (client: cockpit/telemetry/client.py):
    procfs.py    the same /proc readers as the host program's
    agent.py     GPU and host samples
  vocab_probe.py the model's token ids for `cockpit bench`; client: cockpit/serving/workload.py
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

PROGRAMS_DIR = Path(__file__).resolve().parent

HOST_PROGRAM = ("runtree.py", "runfiles.py", "procfs.py", "oomwatch.py", "proctree.py", "logfiles.py", "hostside.py",
                "hoststacks.py")
LOGIN_PROGRAM = ("runtree.py", "runfiles.py", "loginside.py")
AGENT_PROGRAM = ("procfs.py", "agent.py")
VOCAB_PROBE_PROGRAM = ("vocab_probe.py",)


@cache
def assemble(names: tuple[str, ...]) -> bytes:
    """The text sent to the remote python: the named files of this folder, in order."""
    return b"\n".join((PROGRAMS_DIR / name).read_bytes() for name in names)
