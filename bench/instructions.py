#!/usr/bin/env python3
"""Instructions, not seconds: `cockpit diagnose --json` and the live path counted by valgrind's
callgrind, this checkout beside another (`--against DIR`, a tree holding a `cockpit` package).

    .venv/bin/python bench/instructions.py --against /tmp/old --log LOG     # ~2 min

On a machine shared with other work the CPU time of the same command moves by ±10 % from run to
run, so a change worth a few per cent drowns in it; the number of instructions the interpreter
executes does not move (PYTHONHASHSEED fixed, bytecode compiled first). It is not time: the bulk
counting passes (`bytes.count`, memchr) do more per instruction than the interpreter's loop does,
so a saving in classification shows larger here than on the clock. Read it beside
bench/check.py's paired figures (docs/PERFORMANCE.md, section 9), never instead of them.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from log_pipeline import generate

REPO = Path(__file__).resolve().parent.parent
LIVE = """
import sys
from cockpit.core.linesplit import ByteReader
from cockpit.backends.sglang.logparse import SGLangLogParser
with open(sys.argv[1], "rb") as f:
    lines = f.read(4_000_000).split(b"\\n")[100:20_100]
feeds = [b"\\n".join(lines[i:i + 200]) + b"\\n" for i in range(0, len(lines), 200)]
if sys.argv[2] == "1":
    p = ByteReader(SGLangLogParser())
    for c in feeds:
        p.feed(c)
"""


def instructions(tree: Path, argv: list[str]) -> int:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", COCKPIT_LOG_WORKERS="1")
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *argv],
                       capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), check=False)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if m is None:
        raise SystemExit(f"valgrind gave no count for {argv}: {r.stderr[-300:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", type=Path, required=True, help="the other tree (its `cockpit` package is imported)")
    ap.add_argument("--log", type=Path, default=None, help="the 1M-line busy log (made if absent)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="cockpit-instr-") as d:
        log = args.log if args.log is not None else Path(d) / "busy.log"
        if not log.exists():
            generate(log, 1_000_000)
        small = Path(d) / "small.log"
        healthy = REPO / "tests" / "data" / "sglang-0.5.9-kimi-0.88-healthy.log"
        small.write_bytes(b"".join(healthy.read_bytes().splitlines(keepends=True)[:50]))
        live = Path(d) / "live.py"
        live.write_text(LIVE, encoding="utf-8")
        trees = {"this": REPO, "against": args.against.resolve()}
        for tree in trees.values():
            compileall.compile_dir(tree / "cockpit", quiet=1, force=True)
        rows = []
        for label, run in (("diagnose --json, 1M-line busy log", ["-m", "cockpit", "diagnose", "--json", str(log)]),
                           ("diagnose --json, 50-line log (start-up)", ["-m", "cockpit", "diagnose", "--json", str(small)])):
            got = {k: instructions(t, run) for k, t in trees.items()}
            rows.append((label, got["against"], got["this"]))
        got = {k: (instructions(t, [str(live), str(log), "1"]) - instructions(t, [str(live), str(log), "0"])) / 20_000
               for k, t in trees.items()}
        rows.append(("live path, per line (20,000 lines in 200-line feeds)", got["against"], got["this"]))
    print(f"{'instructions':58s} {'against':>16s} {'this':>16s}  change")
    for label, a, b in rows:
        print(f"{label:58s} {a:16,.0f} {b:16,.0f}  {(b / a - 1) * 100:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
