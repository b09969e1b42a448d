"""`cockpit sim --sim-backend vllm serve MODEL [vLLM flags] [--sim-* flags]`: a faithful vLLM stand-in.

vLLM's own command line (`vllm serve …`); a flag that vLLM would refuse (unknown, ambiguous,
renamed or removed) is refused with argparse's message and exit 2. See docs/SIMULATOR.md.
"""

from __future__ import annotations

import sys

from cockpit.backends.base import FlagError
from cockpit.sim.options import SimUsageError

PROG = "vllm serve"
USAGE = (f"usage: {PROG} [model_tag] [--tensor-parallel-size N] [--gpu-memory-utilization F] [--max-model-len N] "
         "[--port PORT] [...] [--sim-gpu NAME] [--sim-model NAME] [--sim-speed X] [--sim-traffic none|steady|burst] "
         "[--sim-version 0.16.0|0.33.0]")


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        print("\nA simulated vLLM server (cockpit). See docs/SIMULATOR.md.")
        return 0
    from cockpit.sim.vllm.config import load_vllm_config

    try:
        cfg = load_vllm_config(list(argv))
    except (FlagError, SimUsageError) as exc:
        print(USAGE, file=sys.stderr)
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    from cockpit.sim.vllm.server import run_vllm

    return run_vllm(cfg)
