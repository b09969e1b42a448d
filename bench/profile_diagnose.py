#!/usr/bin/env python3
"""Where `cockpit diagnose` spends its CPU on the busy log: the command's phases in process, then
the parse taken apart (each stage replaced by a no-op in turn) and the bulk passes alone.

    .venv/bin/python bench/profile_diagnose.py [--log PATH] [--runs N]

Not a comparison (bench/log_pipeline.py and bench/check.py are): a breakdown to read beside them
(docs/PERFORMANCE.md, section 9). CPU seconds (`time.process_time`), best of N runs; the stages are
stubbed cumulatively, so each line's drop is that stage's cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cockpit.core.linesplit import ByteReader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from log_pipeline import generate


def best(fn: Callable[[], object], runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return min(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", type=Path, default=None, help="the 1M-line busy log (made if absent)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ["COCKPIT_LOG_WORKERS"] = "1"
    tmp = None
    path = args.log
    if path is None or not path.exists():
        if path is None:
            tmp = tempfile.TemporaryDirectory(prefix="cockpit-profile-")
            path = Path(tmp.name) / "busy.log"
        generate(path, 1_000_000)

    import gc

    gc.disable()  # as `cockpit diagnose` runs (cli.main pauses the collector; diagnose freezes its imports)
    t0 = time.process_time()
    import cockpit.commands.diagnose as d
    from cockpit.backends import get_backend
    from cockpit.backends.sglang import scanner
    from cockpit.backends.sglang.logparse import iter_chunks
    from cockpit.cli import build_parser

    t1 = time.process_time()
    build_parser("diagnose").parse_args(["diagnose", "--json", str(path)])
    gc.freeze()
    t2 = time.process_time()
    d.refuse_foreign([str(path)])
    t3 = time.process_time()
    name = d.detected_backend([str(path)]) or "sglang"
    t4 = time.process_time()
    reads: list[d.FileRead] = []
    st = d.read_logs([str(path)], reads, name)
    t5 = time.process_time()
    doctor = get_backend(name).doctor
    findings = doctor.diagnose(st, hosts=(), target_headroom_gb=None) if doctor else []
    t6 = time.process_time()
    import json

    json.dumps(d.to_json(st, findings, reads), indent=2, allow_nan=False)
    t7 = time.process_time()
    print(f"phases (one run, CPU s): interpreter + this script's imports {t0:.4f}  imports {t1 - t0:.4f}  argument parser {t2 - t1:.4f}  "
          f"foreign check {t3 - t2:.4f}  engine detection {t4 - t3:.4f}  read_log {t5 - t4:.4f}  "
          f"diagnosis {t6 - t5:.4f}  JSON {t7 - t6:.4f}")

    with open(path, "rb") as f:
        data = list(iter_chunks(f))

    def read() -> None:
        with open(path, "rb") as f:
            for _ in iter_chunks(f):
                pass

    print(f"reading in 1 MiB chunks:             {best(read, args.runs):.4f}")

    def feed() -> None:
        p = ByteReader(scanner.SGLangLogParser())
        for c in data:
            p.feed(c)
        p.finish()

    cls = scanner.SGLangLogParser
    saved = {k: getattr(cls, k) for k in ("_emit", "_dirty", "_find_news", "_sample")}
    try:
        print(f"parse (feed + finish):               {best(feed, args.runs):.4f}")
        for stage, label in (("_emit", "classifying the lines looked at"), ("_dirty", "the dirty-line loop"),
                             ("_find_news", "re-checking halves with news"), ("_sample", "sampling batch lines")):
            setattr(cls, stage, lambda *a, **k: None)
            print(f"  without {label + ':':34s} {best(feed, args.runs):.4f}")
    finally:
        for k, v in saved.items():
            setattr(cls, k, v)

    def each(fn: Callable[[bytes], object]) -> Callable[[], None]:
        return lambda: [fn(c) for c in data] and None

    print("the bulk passes alone, over whole chunks:")
    newlines = best(each(lambda c: len(c) - len(c.replace(b"\n", b""))), args.runs)
    print(f"  newlines (replace):                {newlines:.4f}")
    for needle in (scanner._BATCH_MARK, scanner._ACCESS_OK, scanner._ACCESS_MARK):
        print(f"  count {needle!r:30s} {best(each(lambda c, n=needle: c.count(n)), args.runs):.4f}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
