"""The batch script and the sbatch argv of a Slurm run, rendered from argv lists.

Every value that comes from the profile or the backend (program, flags, environment, workdir)
reaches the shell quoted by `shlex.quote`, one argv element at a time; the only unquoted words
are the script's own variables. Two values are only known on the allocation and are written as
placeholders the renderer turns into shell variables: the head node's address (the first name
`scontrol show hostnames` gives, i.e. SLURM_NODEID 0) and the rendezvous port.

Layout of a run directory (on the shared filesystem, the sbatch working directory, so the script
finds it as $SLURM_SUBMIT_DIR): batch.sh, batch.log (the script's own output), nodes (the
allocation's node names, one a line, written when the job starts), node<k>.log (node k's server
output: one srun step per node).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from cockpit.core.numbers import plural
from cockpit.core.profile import SlurmTarget

# Placeholders inside an argv element (NUL never survives profile validation, so no value can
# forge one). Each becomes a double-quoted shell variable.
HEAD = "\x00HEAD\x00"  # the head node's name
DIST_PORT = "\x00DIST_PORT\x00"  # a port for the servers' rendezvous, derived from the job id
_PLACEHOLDERS = {HEAD: "COCKPIT_HEAD", DIST_PORT: "COCKPIT_DIST_PORT"}
DIST_ADDR = f"{HEAD}:{DIST_PORT}"
NODE_LOG = "node{k}.log"
NODE_STEP = "node{k}"  # node k's server step's name (srun --job-name): SLURM_JOB_NAME in its tasks


def quote_word(word: str) -> str:
    """One argv element for bash: quoted, with placeholders as "$VAR"."""
    pieces: list[str] = []
    rest = word
    while rest:
        hits = [(rest.find(p), p) for p in _PLACEHOLDERS if p in rest]
        if not hits:
            pieces.append(shlex.quote(rest))
            break
        at, ph = min(hits)
        if at:
            pieces.append(shlex.quote(rest[:at]))
        pieces.append(f'"${{{_PLACEHOLDERS[ph]}}}"')
        rest = rest[at + len(ph):]
    return "".join(pieces) or "''"


def quote_argv(argv: Sequence[str]) -> str:
    return " ".join(quote_word(str(a)) for a in argv)


def render_batch_script(
    node_argvs: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str],
    profile: str,
    run_id: str,
) -> str:
    """The script sbatch runs on the first node: one `srun` step per node, node k's log in
    node<k>.log of the run directory, the job's exit status that of the first step that failed."""
    n = len(node_argvs)
    lines = [
        "#!/bin/bash",
        f"# cockpit run {run_id} of profile {shlex.quote(profile)}: {plural(n, 'node')}, one srun step per node.",
        "# Every value below is quoted; $COCKPIT_HEAD and $COCKPIT_DIST_PORT are set from the allocation.",
        "set -u",
        'COCKPIT_RUN_DIR=$SLURM_SUBMIT_DIR',
        'mapfile -t COCKPIT_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'if [ "${#COCKPIT_NODES[@]}" -lt ' + str(n) + " ]; then",
        f'  echo "cockpit: the run needs {plural(n, "node")}; the allocation has only ${{#COCKPIT_NODES[@]}}" >&2',
        "  exit 2",
        "fi",
        "# the run's files are the operator's alone (node logs hold the server's args, e.g. --api-key);",
        "# created 0600 here, Slurm and printf then write into them without changing the mode",
        '(umask 077 && for f in nodes ' + " ".join(NODE_LOG.format(k=k) for k in range(n))
        + '; do : >> "$COCKPIT_RUN_DIR/$f"; done)',
        'printf "%s\\n" "${COCKPIT_NODES[@]}" > "$COCKPIT_RUN_DIR/nodes"',
        "COCKPIT_HEAD=${COCKPIT_NODES[0]}",
        "COCKPIT_DIST_PORT=$((20000 + SLURM_JOB_ID % 20000))",
    ]
    for name, value in env.items():
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append("pids=()")
    for k, argv in enumerate(node_argvs):
        step = [
            "srun", "--nodes=1", "--ntasks=1", f'--nodelist="${{COCKPIT_NODES[{k}]}}"',
            f'--output="$COCKPIT_RUN_DIR/{NODE_LOG.format(k=k)}"', "--open-mode=append", "--unbuffered",
            f"--job-name={NODE_STEP.format(k=k)}", "--",
        ]
        lines.append(" ".join(step) + " " + quote_argv(argv) + " &")
        lines.append("pids+=($!)")
    lines += [
        "# the first step to end decides: a node that dies leaves its peers waiting on it forever",
        "wait -n",
        "rc=$?",
        'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done',
        "wait",
        'echo "cockpit: first step ended with $rc" >&2',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


def sbatch_argv(target: SlurmTarget, *, job_name: str) -> list[str]:
    """sbatch's options for the run (the login side adds --chdir, --output and the script path).
    Each option is one `--name=value` element: no value can read as another option."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--nodes={target.nodes}", "--ntasks-per-node=1"]
    for opt, value in (("partition", target.partition), ("account", target.account), ("qos", target.qos),
                       ("time", target.time)):
        if value is not None:
            argv.append(f"--{opt}={value}")
    if target.gpus_per_node is not None:
        argv.append(f"--gpus-per-node={target.gpus_per_node}")
    argv += list(target.sbatch_args)
    return argv
