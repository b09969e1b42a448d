"""A "server" whose log is everything a log can hold: CRLF, tqdm carriage returns, ANSI colour,
binary garbage, invalid UTF-8, a 10 MB line, and a partial last line completed a second later.

usage: python _hostile_server.py GO_FILE
Writes the first part, waits until GO_FILE exists (the test saw the partial line held back),
then completes the line and exits 0.
"""

from __future__ import annotations

import os
import random
import sys
import time

out = sys.stdout.buffer


def w(data: bytes) -> None:
    out.write(data)
    out.flush()


def part_one() -> None:
    w(b"[2026-02-24 11:55:12 TP0] Load weight begin. avail mem=78.21 GB\n")
    w(b"[2026-02-24 11:55:12 TP1] Load weight begin. avail mem=77.50 GB\r\n")
    w(b"Loading safetensors checkpoint shards:   0% Completed | 0/4\rLoading safetensors checkpoint shards:  50% "
      b"Completed | 2/4\rLoading safetensors checkpoint shards: 100% Completed | 4/4\n")
    w(b"\x1b[32m[2026-02-24 11:55:13 TP0] coloured line\x1b[0m\n")
    rnd = random.Random(11)
    # binary garbage, every byte value (form feeds, vertical tabs, \x1c-\x1e, \x85, lone \r)
    w(bytes(rnd.randrange(256) for _ in range(200_000)) + b"\n")
    w(b"bad utf-8 \xff\xfe\xc3( \xe2\x82 here\n")
    time.sleep(0.2)
    # a 10 MB line, written in pieces as a process would
    w(b"[2026-02-24 11:55:14 TP0] ")
    for _ in range(10):
        w(b"y" * (1 << 20))
    w(b"\n")
    w(b"[2026-02-24 11:55:15 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=")


def part_two() -> None:
    w(b"8.87 GB, mem usage=68.63 GB.\n")
    w(b"done\n")


if __name__ == "__main__":
    part_one()
    go = sys.argv[1]
    deadline = time.time() + 60
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.02)
    part_two()
