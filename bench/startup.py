"""Benchmark: start-up costs. `cockpit --help` (goal < 0.3 s) against the floor, `python -c pass`,
and the CPU that importing each layer costs (the first-frame budget of the TUI is mostly imports;
bench/ui.py measures the frame itself in tmux). Medians of --runs fresh interpreters; CPU time
(user + sys of the child) is printed beside wall time because the machine is shared.

    python bench/startup.py
    python bench/startup.py --importtime      # + the 12 slowest imports of the TUI (python -X importtime)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, print_machine

IMPORTS = {
    "python -c pass": "pass",
    "cockpit.cli (what --help needs)": "import cockpit.cli",
    "textual.app": "import textual.app",
    "cockpit.core.profile (pydantic, yaml)": "import cockpit.core.profile",
    "cockpit.backends.sglang.logparse (diagnose's parser)": "import cockpit.backends.sglang.logparse",
    "cockpit.supervisor.supervisor": "import cockpit.supervisor.supervisor",
    "cockpit.ui.app + picker": "import cockpit.ui.app, cockpit.ui.screens.picker",
    "cockpit.ui.app + dashboard + supervisor": "import cockpit.ui.app, cockpit.ui.screens.dashboard, "
    "cockpit.supervisor.supervisor",
}


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    """(median wall s, median CPU s) of running argv to completion."""
    walls, cpus = [], []
    for _ in range(runs):
        before = os.times()
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        walls.append(time.perf_counter() - t)
        after = os.times()
        cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    return median(walls), median(cpus)


def importtime(module_code: str, top: int = 12) -> list[tuple[int, str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", module_code], capture_output=True, text=True,
                          check=False)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, _cum, name = (p.strip() for p in line.split("|", 1)[0].split(":", 1) + line.split("|")[1:])
        rows.append((int(self_us), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print_machine()
    out: dict[str, Any] = {}
    exe = Path(sys.executable).with_name("cockpit")
    cockpit = [str(exe)] if exe.exists() else [sys.executable, "-m", "cockpit"]
    w, c = timed([*cockpit, "--help"], args.runs)
    w0, c0 = timed([sys.executable, "-c", "pass"], args.runs)
    out["help"] = {"wall_s": w, "cpu_s": c, "python_wall_s": w0, "python_cpu_s": c0}
    print(f"cockpit --help: median {w * 1e3:.0f} ms wall, {c * 1e3:.0f} ms CPU (must < 300 ms); "
          f"python -c pass: {w0 * 1e3:.0f} ms wall, {c0 * 1e3:.0f} ms CPU; ratio {w / w0:.1f}x", flush=True)
    out["imports"] = {}
    for label, code in IMPORTS.items():
        w, c = timed([sys.executable, "-c", code], args.runs)
        out["imports"][label] = {"wall_s": w, "cpu_s": c}
        print(f"  import {label}: {w * 1e3:.0f} ms wall, {c * 1e3:.0f} ms CPU", flush=True)
    if args.importtime:
        rows = importtime(IMPORTS["cockpit.ui.app + dashboard + supervisor"])
        out["importtime_top"] = rows
        print("slowest single imports of the TUI (self time, python -X importtime):")
        for us, name in rows:
            print(f"  {us / 1e3:6.1f} ms  {name}")
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
