"""`cockpit diagnose LOG… [--json] [--target-headroom-gb F] [--host-mem-gb G --gpu-mem-gb G --gpus N]`.

Each LOG is a file path or `-` (standard input, read as bytes). Several logs are read in order into
one state (e.g. a rotated log and its continuation). Which server wrote them (SGLang or vLLM) is
told from the opening of the first log: every backend scores how much it reads as its own
(`detect_backend`). Exit 0 when nothing is critical, 1 when a finding is critical, 2 on bad input,
always as one clear line: a missing or unreadable file, and a file in which no line is that
server's log line (a README, an empty or binary file) — "(no findings)" is printed only for a log
that was read and is healthy.

The what-if options are `check`'s: with the host's memory (and GPUs per node) a HiCache failure
seen in a log alone gets the per-rank `--hicache-size` that fits, with the arithmetic.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
from typing import Any

from cockpit.commands._reading import CLASSIFY_CAP, PARTIAL_SHARE, FileRead, diagnose_logs
from cockpit.face_light import (
    DEFAULT_BACKEND,
    BadInput,
    Finding,
    HostFacts,
    RunState,
    engine_name,
    exit_code_for,
    plural,
)


def what_if_hosts(host_mem_gb: float | None, gpu_mem_gb: float | None, gpus: int | None) -> list[HostFacts]:
    """`check`'s what-if options as the one host this log ran on (none given: no host facts)."""
    if host_mem_gb is None and gpu_mem_gb is None and gpus is None:
        return []
    # host RAM in decimal GB (the unit of --hicache-size), GPU memory in GiB (nvidia-smi's, SGLang's)
    for name, val, hi, unit in (("--host-mem-gb", host_mem_gb, 1e6, "GB"), ("--gpu-mem-gb", gpu_mem_gb, 4096.0, "GiB")):
        if val is not None and not (math.isfinite(val) and 0 < val <= hi):
            raise BadInput(f"{name} {val:g}: expected a value between 0 and {hi:g} {unit}")
    if gpus is not None and not 1 <= gpus <= 1024:
        raise BadInput(f"--gpus {gpus}: expected a number of GPUs per node between 1 and 1024")
    return [HostFacts(host="what-if", mem_total_gb=host_mem_gb, mem_available_gb=host_mem_gb, gpu_count=gpus,
                      gpu_mem_total_gib=gpu_mem_gb, source="override")]


def to_json(state: RunState, findings: list[Finding], reads: list[FileRead]) -> dict[str, Any]:
    out = state.to_json()
    out["lines"] = {
        "read": sum(r.lines for r in reads),
        "recognised": sum(r.recognised for r in reads),
        "unparsed": state.lines_unparsed,
        "cut": sum(r.cut for r in reads),
    }
    out["findings"] = [f.to_json() for f in findings]
    return _finite(out)


def _finite(obj: Any) -> Any:
    """Strict JSON: a float that is not finite has no JSON spelling; it is unknown (null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def read_note(reads: list[FileRead], unparsed: int, backend: str = DEFAULT_BACKEND) -> str | None:
    """One line when the parser could read only part of the input."""
    lines = sum(r.lines for r in reads)
    recognised = sum(r.recognised for r in reads)
    parts = []
    if lines and recognised < PARTIAL_SHARE * lines:
        parts.append(f"recognised {recognised:,} of {lines:,} lines as {engine_name(backend)}'s ({100 * recognised / lines:.0f} %); "
                     "the rest was skipped")
    if unparsed:
        parts.append(f"{plural(unparsed, 'recognised line')} held figures that do not parse or cannot be; skipped")
    cut = sum(r.cut for r in reads)
    if cut:
        parts.append(f"{plural(cut, 'line')} longer than {CLASSIFY_CAP // 1024} KiB: only their first {CLASSIFY_CAP // 1024} KiB "
                     "were read")
    return "note: " + "; ".join(parts) if parts else None


def run(args: argparse.Namespace) -> int:
    target = args.target_headroom_gb
    if target is not None and not 0 < target <= 200:
        raise BadInput(f"--target-headroom-gb {target:g}: expected a value between 0 and 200 GiB")
    hosts = what_if_hosts(getattr(args, "host_mem_gb", None), getattr(args, "gpu_mem_gb", None),
                          getattr(args, "gpus", None))
    # Everything imported so far lives as long as this one-shot command: set it aside so the
    # collections that parsing triggers do not walk it again (~3 ms of a 1M-line diagnose).
    gc.freeze()
    state, findings, reads = diagnose_logs(list(args.logs), target_headroom_gb=target, hosts=hosts)
    if args.json:
        print(json.dumps(to_json(state, findings, reads), indent=2, allow_nan=False))
    else:
        # `diagnose --json` start-up (shlex, no report): tests/test_startup_imports.py
        from cockpit.commands._render import render_state

        title = ", ".join(args.logs)
        text = render_state(state, findings, title=f"diagnose {title}")
        note = read_note(reads, state.lines_unparsed, state.backend)
        if note:
            first, _, rest = text.partition("\n")
            text = f"{first}\n{note}\n{rest}"
        sys.stdout.write(text)
    return exit_code_for(findings)
