"""`cockpit check PROFILE [--json] [--host-mem-gb X] [--gpu-mem-gb Y] [--gpus N]`: preflight.

Validates every flag (a bad profile exits 2 with one line naming the file and key), measures the
local host (RAM, GPUs) and runs the preflight rules. The options are what-ifs: they replace the
measured facts on every host (`--host-mem-gb` = RAM available in decimal GB, `--gpu-mem-gb` = memory
per GPU in GiB as nvidia-smi/SGLang report it, `--gpus` = GPUs per node). The check is the gate
`cockpit up` walks (cockpit/preflight/gate.py): the hosts are measured by the telemetry agent (over
SSH; this machine too, where the simulator's GPUs count); a host that cannot be reached is a critical `host_unreachable` finding saying why (DNS, refused, timeout, no route,
authentication, host key), so the check exits 1. A model path that does not exist on node 0 and an
API port already bound there are critical too (`model_path_missing`, `port_in_use`): `up` refuses them.
With a what-if option the check describes another host, and these two are not asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from cockpit.commands._render import render_check
from cockpit.commands._support import load_profile_arg, one_server, run_command
from cockpit.face import (
    PD_ROLES,
    BadInput,
    WhatIf,
    calibration_runs,
    check_profile,
    exit_code_for,
    gate,
    get_backend,
    load_profile,
    resolve_profile,
)

__all__ = ["check_profile", "run"]


def run(args: argparse.Namespace) -> int:
    # host RAM in decimal GB (the unit of --hicache-size), GPU memory in GiB (nvidia-smi's, SGLang's)
    for name, val, unit in (("--host-mem-gb", args.host_mem_gb, "GB"), ("--gpu-mem-gb", args.gpu_mem_gb, "GiB")):
        if val is not None and val <= 0:
            raise BadInput(f"{name} {val:g}: expected a positive number of {unit}")
    if args.gpus is not None and args.gpus <= 0:
        raise BadInput(f"--gpus {args.gpus}: expected a positive number of GPUs")

    path = resolve_profile(args.profile)
    group = not path.exists() and args.profile.rpartition(".")[2] in PD_ROLES  # NAME.prefill / NAME.decode
    profile = one_server(load_profile_arg(args.profile) if group else load_profile(path), "check")

    # the gate `up` walks: the hosts measured by the agent (a host that cannot be reached is a
    # critical host_unreachable finding, with the reason), the preflight rules, node 0's model path
    # and port (not with what-if facts: they describe another host), the memory plan. A multi-node
    # run starts one command per node: each is shown (a Slurm job's head node comes from the
    # allocation: the batch script fills it in)
    what_if = WhatIf(host_mem_gb=args.host_mem_gb, gpu_mem_gb=args.gpu_mem_gb, gpus=args.gpus)
    head = "HEAD_NODE:PORT" if profile.target is not None and len(profile.hosts) > 1 else None
    checked = run_command(gate(profile, None, what_if=what_if, runs=calibration_runs(profile.name), dist_addr=head))
    node_argvs = checked.node_argvs()
    facts, findings = checked.facts, checked.all_findings
    backend = get_backend(profile.backend)
    argv = node_argvs[0]
    if args.json:
        # the same shape as `diagnose` and `status` (nothing has run yet: phase unknown, no ranks)
        version = backend.resolve_version(profile.version)
        state = backend.logs.new_state()
        state.format = f"{profile.backend}-{version}"
        state.server_args = backend.flags.effective(profile, version=version)
        out = state.to_json()
        out.update(
            profile=profile.name,
            version=version,
            argv=argv,
            node_argv=node_argvs,
            hosts=[dataclasses.asdict(f) for f in facts],
            findings=[f.to_json() for f in findings],
        )
        print(json.dumps(out, indent=2))
    else:

        sys.stdout.write(render_check(profile.name, facts, findings, node_argvs))
    return exit_code_for(findings)
