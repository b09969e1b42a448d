"""`cockpit sim`: a faithful SGLang stand-in for the demo and for tests on machines without GPUs.

Usage is SGLang's own (`cockpit sim --model-path … --tp 8 …`) plus --sim-* options; see
docs/SIMULATOR.md. Unknown or ambiguous SGLang flags are refused with SGLang's argparse message
and exit 2, like `python -m sglang.launch_server` would.
"""

from __future__ import annotations

import sys

from cockpit.sim.options import run_main
from cockpit.sim.sglang.config import SimConfig, load_config
from cockpit.sim.sglang.server import run_server
from cockpit.sim.vllm.main import main as vllm_main

PROG = "launch_server.py"
USAGE = (
    f"usage: {PROG} [-h] --model-path MODEL_PATH [--tp-size TP_SIZE] [--port PORT] "
    "[--mem-fraction-static MEM_FRACTION_STATIC] [...] [--sim-gpu NAME] [--sim-model NAME] "
    "[--sim-speed X] [--sim-startup-speed X] [--sim-traffic none|steady|burst] [--sim-version 0.5.9|0.5.23] [--sim-host-mem-gb N]"
)
ABOUT = "A simulated SGLang server (cockpit). See docs/SIMULATOR.md for the --sim-* options and presets."


def main(argv: list[str]) -> int:
    if _backend(argv) == "vllm":

        return vllm_main(argv)
    return run_main(argv, PROG, USAGE, ABOUT, load_config, _serve)


def _serve(cfg: SimConfig) -> int:

    return run_server(cfg)


def _backend(argv: list[str]) -> str:
    """`--sim-backend vllm` (or `=vllm`) picks the vLLM simulator; SGLang is the default."""
    for i, a in enumerate(argv):
        if a == "--sim-backend" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--sim-backend="):
            return a.split("=", 1)[1]
    return "sglang"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
