"""Benchmark: what the UI face (cockpit/face.py) costs against importing from the defining module.

The faces import lazily inside functions (`from cockpit.face import mask_value` in a formatter), so
that statement runs on every call: through the face it is a module `__getattr__`, a dict look-up and
`importlib.import_module` of an already-imported module. Medians of --runs timeit rounds of
--number statements each, in one interpreter, the direct import as the baseline.

    python bench/face.py
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, print_machine

CASES = {
    "a core function (mask_value)": ("from cockpit.core.secrets import mask_value", "from cockpit.face import mask_value"),
    "three supervisor names": ("from cockpit.supervisor.api import LogBatch, LogLine, RunSnapshot",
                               "from cockpit.face import LogBatch, LogLine, RunSnapshot"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--number", type=int, default=100_000)
    args = ap.parse_args()
    print_machine()
    import cockpit.face  # noqa: F401  (both sides timed warm: the modules are imported once first)

    print(f"{'statement':32} {'direct µs':>10} {'face µs':>10} {'ratio':>7}")
    for name, (direct, face) in CASES.items():
        exec(direct)
        exec(face)
        d = median(timeit.timeit(direct, number=args.number) for _ in range(args.runs)) / args.number * 1e6
        f = median(timeit.timeit(face, number=args.number) for _ in range(args.runs)) / args.number * 1e6
        print(f"{name:32} {d:10.3f} {f:10.3f} {f / d:7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
