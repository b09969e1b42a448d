"""Benchmark: hostile short lines (issue 40 item 8), against a plain log of the same size.

1 MiB of one one-byte line shape — every byte value but the newline, `X\\n` repeated — and 1 MiB
of empty lines, each read by both engines' parsers the way `cockpit diagnose FILE` reads a file
(`backend.logs.read(path)`, in this process: the figures are the parser's, not the interpreter's
start-up). Beside them, the plain log of the same size (a real start-up and its serving traffic)
and, for vLLM, a ready server's access lines with one spoilt byte (`\\xff`) on every line against
the same lines unspoilt. Goal: each shape under 0.3 s.

    python bench/hostile_lines.py               # every shape, both engines, median of 3
    python bench/hostile_lines.py --quick       # 16 shapes (the usual suspects), median of 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import print_machine
from cockpit.backends import get_backend

MIB = 1 << 20
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
QUICK = [b"", b"\r", b"\x00", b"\x1b", b"\t", b" ", b"a", b"0", b"[", b"]", b"}", b"#", b"\x7f", b"\x85", b"\xc3", b"\xff"]
ACCESS = b'(APIServer pid=29374) INFO:     127.0.0.1:%d - "POST /v1/completions HTTP/1.1" 200 OK\n'


def _time(engine: str, path: Path, runs: int) -> float:
    logs = get_backend(engine).logs
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        logs.read(str(path))
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _plain(engine: str) -> bytes:
    """A real start-up, then its serving traffic, to 1 MiB."""
    if engine == "sglang":
        head = (DATA / "sglang-0.5.9-llama70b-tp8-healthy.log").read_bytes()
        line = (b"[2026-02-24 12:00:01 TP0] Decode batch, #running-req: 37, #token: 51234, token usage: 0.41, "
                b"cuda graph: True, gen throughput (token/s): 2411.07, #queue-req: 0\n")
    else:
        head = (DATA / "real-engine" / "vllm-0.32.0-cpu-spec-ngram.log").read_bytes()
        line = ACCESS % 41234
    body = head + line * ((MIB - len(head)) // len(line))
    return body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs = 1 if args.quick else 3
    shapes = QUICK if args.quick else [b"", *(bytes([b]) for b in range(256) if b != 0x0A)]
    print_machine()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for engine in ("sglang", "vllm"):
            get_backend(engine).logs.read(str(DATA / "sglang-0.5.9-llama70b-tp8-healthy.log"))  # imports paid
            plain = root / f"plain-{engine}.log"
            plain.write_bytes(_plain(engine))
            base = _time(engine, plain, runs)
            worst, worst_shape, total = 0.0, b"", 0.0
            rows = []
            for shape in shapes:
                path = root / "shape.log"
                path.write_bytes((shape + b"\n") * (MIB // (len(shape) + 1)))
                took = _time(engine, path, runs)
                total += took
                rows.append((shape, took))
                if took > worst:
                    worst, worst_shape = took, shape
            over = [repr(s) for s, t in rows if t >= 0.3]
            print(f"{engine}: plain 1 MiB log {base:.3f} s; {len(shapes)} one-byte shapes of 1 MiB: "
                  f"median {statistics.median(t for _, t in rows):.3f} s, worst {worst:.3f} s ({worst_shape!r}), "
                  f"mean {total / len(shapes):.3f} s; worst/plain {worst / base:.1f}x; over 0.3 s: {over or 'none'}")
            for shape in (b"", b"a", b"\xff", b"\x00"):
                t = dict(rows).get(shape)
                if t is not None:
                    print(f"  {shape!r:8} {t:.3f} s")
        lines = 100_000
        plain_v = root / "access.log"
        spoilt_v = root / "access-spoilt.log"
        head = (DATA / "real-engine" / "vllm-0.32.0-cpu-spec-ngram.log").read_bytes()
        plain_v.write_bytes(head + b"".join(ACCESS % (40000 + i % 20000) for i in range(lines)))
        spoilt_v.write_bytes(head + b"".join((ACCESS % (40000 + i % 20000)).replace(b"POST", b"PO\xffST")
                                             for i in range(lines)))
        a, b = _time("vllm", plain_v, runs), _time("vllm", spoilt_v, runs)
        print(f"vllm: {lines:,} access lines {a:.3f} s; the same with one spoilt byte on every line {b:.3f} s "
              f"({b / a:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
