"""Benchmark: start-up costs. `cockpit --help` (goal < 0.3 s) against the floor, `python -c pass`,
and the CPU that importing each layer costs (the first-frame budget of the TUI is mostly imports;
bench/ui.py measures the frame itself in tmux). Medians of --runs fresh interpreters; CPU time
(user + sys of the child) is printed beside wall time because the machine is shared.

    python bench/startup.py
    python bench/startup.py --importtime      # + the 12 slowest imports of the TUI (python -X importtime)
    git worktree add --detach /tmp/main main
    python bench/startup.py --against /tmp/main --runs 31   # this checkout beside another, paired

With --against DIR, `cockpit --help` and `cockpit diagnose --json` on a 50-line SGLang log (the
gate's start-up figures, bench/check.py) run from DIR's code and from this checkout's, each through
this environment's `cockpit` script with PYTHONPATH naming the code, alternately with `python -c
pass` (A B C …, one round after another, so that both see the same load); each round's ratio to
`python -c pass` and to the other code, medians. Both trees' bytecode is compiled first.
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
    "re (the console script's first import; argparse's too)": "import re",
    "argparse (the floor of --help)": "import argparse",
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
    """(median wall s, median CPU s) of running argv to completion (CPU from the child's rusage:
    os.times counts in 10 ms ticks)."""
    rows = [_run(argv) for _ in range(runs)]
    return median(w for w, _ in rows), median(c for _, c in rows)


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


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child, from its rusage) of one run."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({os.waitstatus_to_exitcode(status)}) with PYTHONPATH="
                         f"{(env or {}).get('PYTHONPATH')}")
    return wall, usage.ru_utime + usage.ru_stime


def against(other: Path, runs: int) -> dict[str, Any]:
    """This checkout's start-up beside `other`'s (a checkout of the same package), paired: see the
    module's docstring."""
    import compileall
    import tempfile

    here = Path(__file__).resolve().parent.parent
    for tree in (other, here):
        if not (tree / "cockpit" / "cli.py").exists():
            raise SystemExit(f"{tree}: no cockpit/cli.py (expected a checkout of this repository)")
        # force: a .pyc written in the same second as its source's last edit passes compileall's
        # check but not the importer's (the size differs), and would be compiled again in every run
        compileall.compile_dir(tree / "cockpit", quiet=1, force=True)
    exe = Path(sys.executable).with_name("cockpit")
    cockpit = [str(exe)] if exe.exists() else [sys.executable, "-m", "cockpit"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    envs = {"other": {**env, "PYTHONPATH": str(other)}, "this": {**env, "PYTHONPATH": str(here)}}
    small = here / "tests" / "data" / "sglang-0.5.9-kimi-0.88-healthy.log"
    with tempfile.TemporaryDirectory(prefix="cockpit-startup-") as d:
        log = Path(d) / "small.log"
        log.write_bytes(b"".join(small.read_bytes().splitlines(keepends=True)[:50]))
        cases: dict[str, tuple[list[str], dict[str, str] | None]] = {"python": ([sys.executable, "-c", "pass"], None)}
        for side in ("other", "this"):
            cases[f"help_{side}"] = ([*cockpit, "--help"], envs[side])
            cases[f"diagnose_{side}"] = ([*cockpit, "diagnose", "--json", str(log)], envs[side])
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for _ in range(runs):
            for name, (cmd, e) in cases.items():
                got[name].append(_run(cmd, e))
    out: dict[str, Any] = {"runs": runs, "other": str(other), "this": str(here)}
    for name, rows in got.items():
        out[name] = {"wall_ms": median(w for w, _ in rows) * 1e3, "cpu_ms": median(c for _, c in rows) * 1e3}
    for what in ("help", "diagnose"):
        for side in ("other", "this"):
            rows = got[f"{what}_{side}"]
            out[f"{what}_{side}"]["vs_python_wall"] = median(w / p[0] for (w, _), p in zip(rows, got["python"], strict=True))
            out[f"{what}_{side}"]["vs_python_cpu"] = median(c / p[1] for (_, c), p in zip(rows, got["python"], strict=True))
        out[f"{what}_this_vs_other_cpu"] = median(
            t[1] / o[1] for t, o in zip(got[f"{what}_this"], got[f"{what}_other"], strict=True))
    return out


def print_against(out: dict[str, Any]) -> None:
    py = out["python"]
    print(f"{out['runs']} rounds, medians; python -c pass: {py['wall_ms']:.1f} ms wall, {py['cpu_ms']:.1f} ms CPU")
    print(f"{'':34} {'wall ms':>8} {'CPU ms':>8} {'÷ python wall':>14} {'÷ python CPU':>13}")
    for what, label in (("help", "cockpit --help"), ("diagnose", "diagnose --json (50 lines)")):
        for side in ("other", "this"):
            r = out[f"{what}_{side}"]
            print(f"{label + ' ' + side:34} {r['wall_ms']:8.1f} {r['cpu_ms']:8.1f} {r['vs_python_wall']:14.2f} "
                  f"{r['vs_python_cpu']:13.2f}")
        print(f"  {label}: this / other, CPU, median of rounds: {out[f'{what}_this_vs_other_cpu']:.3f}")
    print(f"other: {out['other']}\nthis: {out['this']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against", type=Path, default=None, metavar="DIR",
                    help="another checkout of this repository: its start-up beside this one's, paired")
    args = ap.parse_args(argv)
    print_machine()
    if args.against is not None:
        res = against(args.against.resolve(), args.runs)
        print_against(res)
        if args.json:
            print(json.dumps(res, indent=2))
        return 0
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
