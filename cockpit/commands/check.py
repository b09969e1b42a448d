"""`cockpit check PROFILE [--json] [--host-mem-gb X] [--gpu-mem-gb Y] [--gpus N]`: preflight.

Validates every flag (a bad profile exits 2 with one line naming the file and key), measures the
local host (RAM, GPUs) and runs the preflight rules. The options are what-ifs: they replace the
measured facts on every host (`--host-mem-gb` = RAM available in decimal GB, `--gpu-mem-gb` = memory
per GPU in GiB as nvidia-smi/SGLang report it, `--gpus` = GPUs per node). SSH hosts are measured by
the telemetry agent over SSH (cockpit.supervisor.telemetry_feed.measure_hosts); a host that cannot
be reached stays unknown.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import Any

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang.preflight import preflight
from cockpit.core.findings import Finding, exit_code_for
from cockpit.core.profile import Profile, load_profile
from cockpit.errors import BadInput


def host_facts_for(profile: Profile, measured: Mapping[str, HostFacts] | None = None) -> list[HostFacts]:
    """One HostFacts per profile host: given ones first, `local` measured here, others unknown."""
    out: list[HostFacts] = []
    for h in profile.hosts:
        label = h.label
        if measured and label in measured:
            out.append(dataclasses.replace(measured[label], host=label))
        elif h.is_local:
            from cockpit.hostfacts import local_host_facts

            out.append(local_host_facts())
        else:
            out.append(HostFacts(host=label, source="unknown"))
    return out


def apply_what_if(facts: list[HostFacts], host_mem_gb: float | None, gpu_mem_gb: float | None, gpus: int | None) -> list[HostFacts]:
    out = []
    for f in facts:
        changes: dict[str, object] = {}
        if host_mem_gb is not None:
            changes.update(mem_available_gb=host_mem_gb, mem_total_gb=max(host_mem_gb, f.mem_total_gb or 0))
        if gpu_mem_gb is not None:
            changes.update(gpu_mem_total_gib=gpu_mem_gb, gpu_free_gib=())
        if gpus is not None:
            changes.update(gpu_count=gpus)
        if changes:
            changes["source"] = "override" if f.source == "unknown" else f"{f.source}+override"
        out.append(dataclasses.replace(f, **changes))  # type: ignore[arg-type]
    return out


def check_profile(
    profile: Profile,
    facts_overrides: Mapping[str, HostFacts] | None = None,
    *,
    host_mem_gb: float | None = None,
    gpu_mem_gb: float | None = None,
    gpus: int | None = None,
    version: str | None = None,
) -> tuple[list[Finding], list[HostFacts]]:
    """Preflight `profile`: (findings most severe first, the host facts they were computed from).

    `facts_overrides` maps a host label (`local`, `gpu-box-1`) to facts measured elsewhere, e.g.
    by the SSH agent. Raises FlagError / ProfileError for a profile SGLang would refuse.
    """
    facts = apply_what_if(host_facts_for(profile, facts_overrides), host_mem_gb, gpu_mem_gb, gpus)
    if profile.backend != "sglang":  # until every caller asks get_backend (issue 12)
        from cockpit.backends import get_backend

        return get_backend(profile.backend).preflight(profile, facts, version=version), facts  # type: ignore[call-arg]
    return preflight(profile, facts, version=version), facts


def run(args: argparse.Namespace) -> int:
    from cockpit.backends.sglang.command import build_argv, build_node_argv
    from cockpit.locations import resolve_profile

    for name, val in (("--host-mem-gb", args.host_mem_gb), ("--gpu-mem-gb", args.gpu_mem_gb)):
        if val is not None and val <= 0:
            raise BadInput(f"{name} {val:g}: expected a positive number of GB")
    if args.gpus is not None and args.gpus <= 0:
        raise BadInput(f"--gpus {args.gpus}: expected a positive number of GPUs")
    profile = load_profile(resolve_profile(args.profile))
    measured = None
    if any(not h.is_local for h in profile.hosts):
        # SSH hosts are measured by the telemetry agent over the connection (unreachable: unknown)
        from cockpit.supervisor.cli_support import run_command
        from cockpit.supervisor.telemetry_feed import measure_hosts

        measured = run_command(measure_hosts(profile))
    findings, facts = check_profile(
        profile, measured, host_mem_gb=args.host_mem_gb, gpu_mem_gb=args.gpu_mem_gb, gpus=args.gpus
    )
    # a multi-node run starts one command per node; show each (node rank filled in)
    backend: Any = None
    if profile.backend != "sglang":
        from cockpit.backends import get_backend

        backend = get_backend(profile.backend)
        node_argvs = backend.build_node_argvs(profile)
    elif len(profile.hosts) > 1:
        node_argvs = [build_node_argv(profile, i) for i in range(len(profile.hosts))]
    else:
        node_argvs = [build_argv(profile)]
    argv = node_argvs[0]
    if args.json:
        # the same shape as `diagnose` and `status` (nothing has run yet: phase unknown, no ranks)
        from cockpit.backends.sglang.command import effective_flags
        from cockpit.backends.sglang.flags import resolve_version
        from cockpit.core.state import RunState

        if backend is not None:
            version = backend.resolve_version(profile.version)
            state = RunState(backend=profile.backend, format=f"{profile.backend}-{version}")
            state.server_args = backend.effective_flags(profile, version=version)
        else:
            version = resolve_version(profile.version)
            state = RunState(backend=profile.backend, format=f"{profile.backend}-{version}")
            state.server_args = {dest: val for dest, (_spec, val) in effective_flags(profile, version=version).items()}
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
        from cockpit.report import render_check

        sys.stdout.write(render_check(profile.name, facts, findings, node_argvs))
    return exit_code_for(findings)
