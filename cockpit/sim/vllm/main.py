"""`cockpit sim --sim-backend vllm serve MODEL [vLLM flags] [--sim-* flags]`: a faithful vLLM stand-in.

vLLM's own command line (`vllm serve …`); a flag that vLLM would refuse (unknown, ambiguous,
renamed or removed) is refused with argparse's message and exit 2. See docs/SIMULATOR.md.
"""

from __future__ import annotations

from cockpit.sim.options import run_main
from cockpit.sim.vllm.config import VllmSimConfig, load_vllm_config
from cockpit.sim.vllm.server import run_vllm

PROG = "vllm serve"
USAGE = (f"usage: {PROG} [model_tag] [--tensor-parallel-size N] [--gpu-memory-utilization F] [--max-model-len N] "
         "[--port PORT] [...] [--sim-gpu NAME] [--sim-model NAME] [--sim-speed X] [--sim-startup-speed X] [--sim-traffic none|steady|burst] "
         "[--sim-version 0.16.0|0.33.0]")
ABOUT = "A simulated vLLM server (cockpit). See docs/SIMULATOR.md."


def main(argv: list[str]) -> int:
    return run_main(argv, PROG, USAGE, ABOUT, load_vllm_config, _serve)


def _serve(cfg: VllmSimConfig) -> int:

    return run_vllm(cfg)
