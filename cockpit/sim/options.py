"""What every simulated engine's command line shares: help and usage errors in argparse's shape, the
--sim-* options, the traffic modes and where an instance's simulated GPUs live."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from cockpit.backends.base import FlagError
from cockpit.sim.gpus import instance_dir

Config = TypeVar("Config")

TRAFFIC_MODES = ("none", "steady", "burst")


class SimUsageError(Exception):
    """A bad --sim-* option (exit 2, argparse style)."""


def run_main(
    argv: list[str], prog: str, usage: str, about: str, load: Callable[[list[str]], Config], run: Callable[[Config], int]
) -> int:
    """A simulated engine's command line, as the engine's own argparse answers it: -h/--help prints
    the usage and `about` (exit 0); a flag the engine or the simulator refuses prints the usage and
    `PROG: error: …` on stderr (exit 2, no traceback); otherwise `run` serves the loaded config."""
    if any(a in ("-h", "--help") for a in argv):
        print(usage)
        print(f"\n{about}")
        return 0
    try:
        cfg = load(list(argv))
    except (FlagError, SimUsageError) as exc:
        print(usage, file=sys.stderr)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return run(cfg)


def split_sim_options(argv: list[str], known: Iterable[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Take the --sim-* options out of argv (both `--sim-x v` and `--sim-x=v`): the (option, value)
    pairs in the order given, and the engine's own arguments. An option not in `known` is refused."""
    known = tuple(known)
    pairs: list[tuple[str, str]] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--sim-"):
            rest.append(tok)
            i += 1
            continue
        name, eq, value = tok.partition("=")
        if name not in known:
            raise SimUsageError(f"unrecognized arguments: {name} (simulator options: {', '.join(known)})")
        if not eq:
            if i + 1 >= len(argv):
                raise SimUsageError(f"argument {name}: expected one argument")
            value = argv[i + 1]
            i += 1
        i += 1
        pairs.append((name, value))
    return pairs, rest


def default_sim_dir(port: int) -> Path:
    """COCKPIT_SIM_GPU_DIR when set (simulators told to share), else this instance's own GPUs."""
    env = os.environ.get("COCKPIT_SIM_GPU_DIR")
    if env:
        return Path(env).expanduser()
    return Path(instance_dir(port)).expanduser()
