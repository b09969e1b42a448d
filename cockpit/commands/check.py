"""`cockpit check PROFILE [--json] [--host-mem-gb X] [--gpu-mem-gb Y] [--gpus N]`: preflight.

Validates every flag (a bad profile exits 2 with one line naming the file and key), measures the
local host (RAM, GPUs) and runs the preflight rules. The options are what-ifs: they replace the
measured facts on every host (`--host-mem-gb` = RAM available in decimal GB, `--gpu-mem-gb` = memory
per GPU in GiB as nvidia-smi/SGLang report it, `--gpus` = GPUs per node). SSH hosts are measured by
the telemetry agent over SSH (cockpit.telemetry.hostfacts.measure_hosts); a host that cannot
be reached is a critical `host_unreachable` finding saying why (DNS, refused, timeout, no route,
authentication, host key), so the check exits 1. A model path that does not exist on node 0 and an
API port already bound there are critical too (`model_path_missing`, `port_in_use`): `up` refuses them.
With a what-if option the check describes another host, and these two are not asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cockpit.face import (
    BadInput,
    Finding,
    Profile,
    check_profile,
    exit_code_for,
    get_backend,
    load_profile,
    sort_findings,
)

if TYPE_CHECKING:
    from cockpit.face import HostFacts

__all__ = ["check_profile", "run"]


def _plan_finding(profile: Profile, facts: list[HostFacts], measured: Mapping[str, HostFacts] | None) -> Finding:
    """The memory plan (cockpit plan) as one finding, from the same host facts and what-ifs. The
    model's metadata is read on node 0; a host the agent could not reach is not tried twice."""
    from cockpit.commands._support import run_command
    from cockpit.face import plan_finding, profile_plan_finding

    node0 = profile.hosts[0]
    if not node0.is_local and node0.label not in (measured or {}):
        return plan_finding(None, f"{node0.label} could not be reached to read the model's config.json")
    from cockpit.commands.plan import journal_runs

    finding, _plan = run_command(profile_plan_finding(profile, facts=facts, runs=journal_runs(profile.name)))
    return finding


def _launch_findings(profile: Profile, unreachable: Mapping[str, str], what_if: bool) -> list[Finding]:
    """The model path missing on node 0, its API port bound (cockpit/supervisor/launchcheck.py).
    Not with what-if facts: the host they describe is not the one that could be asked."""
    from cockpit.commands._support import run_command
    from cockpit.face import launch_findings

    if profile.hosts[0].label in unreachable:
        return []
    if what_if:
        return []
    return list(run_command(launch_findings(profile)))


def run(args: argparse.Namespace) -> int:
    from cockpit.face import resolve_profile

    # host RAM in decimal GB (the unit of --hicache-size), GPU memory in GiB (nvidia-smi's, SGLang's)
    for name, val, unit in (("--host-mem-gb", args.host_mem_gb, "GB"), ("--gpu-mem-gb", args.gpu_mem_gb, "GiB")):
        if val is not None and val <= 0:
            raise BadInput(f"{name} {val:g}: expected a positive number of {unit}")
    if args.gpus is not None and args.gpus <= 0:
        raise BadInput(f"--gpus {args.gpus}: expected a positive number of GPUs")
    from cockpit.commands._support import load_profile_arg, one_server
    from cockpit.face import PD_ROLES

    path = resolve_profile(args.profile)
    group = not path.exists() and args.profile.rpartition(".")[2] in PD_ROLES  # NAME.prefill / NAME.decode
    profile = one_server(load_profile_arg(args.profile) if group else load_profile(path), "check")
    measured = None
    unreachable: dict[str, str] = {}
    if profile.target is None and any(not h.is_local for h in profile.hosts):  # a Slurm job's nodes are unknown yet
        # SSH hosts are measured by the telemetry agent over the connection (unreachable: unknown)
        from cockpit.commands._support import run_command
        from cockpit.face import measure_hosts

        measured = run_command(measure_hosts(profile, unreachable))
    findings, facts = check_profile(
        profile, measured, host_mem_gb=args.host_mem_gb, gpu_mem_gb=args.gpu_mem_gb, gpus=args.gpus
    )
    # a host that cannot be reached is a failed check, with the reason (exit 1), not "unknown"
    lost = [Finding(id="host_unreachable", severity="critical", message=f"{label}: {why}")
            for label, why in unreachable.items()]
    what_if = any(v is not None for v in (args.host_mem_gb, args.gpu_mem_gb, args.gpus))
    findings = sort_findings([*findings, *lost, *_launch_findings(profile, unreachable, what_if),
                              _plan_finding(profile, facts, measured)])
    # a multi-node run starts one command per node; show each (node rank filled in)
    backend = get_backend(profile.backend)
    # a Slurm job's head node comes from the allocation (the batch script fills it in)
    head = "HEAD_NODE:PORT" if profile.target is not None and len(profile.hosts) > 1 else None
    node_argvs = backend.build_node_argvs(profile, None, head)
    argv = node_argvs[0]
    if args.json:
        # the same shape as `diagnose` and `status` (nothing has run yet: phase unknown, no ranks)
        version = backend.resolve_version(profile.version)
        state = backend.new_state()
        state.format = f"{profile.backend}-{version}"
        state.server_args = backend.effective_flags(profile, version=version)
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
        from cockpit.commands.render import render_check

        sys.stdout.write(render_check(profile.name, facts, findings, node_argvs))
    return exit_code_for(findings)
