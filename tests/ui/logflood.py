"""A full ring's worth of SGLang-shaped lines (eight ranks; one in 50 a memory line, odd ones decode
batches, the rest access lines) for the log model's and the log pane's selection tests."""

from __future__ import annotations

from cockpit.supervisor.api import LogLine


def flood(n: int, start: int = 0) -> list[LogLine]:
    out = []
    for i in range(start, start + n):
        rank = f"TP{i % 8}"
        if i % 50 == 0:
            text = f"[2026-11-29 11:57:00 {rank}] Load weight end. avail mem=20.{i % 100:02d} GB"
        elif i % 2:
            text = f"[2026-11-29 11:57:00 {rank}] Decode batch. #running-req: {i % 97}, #token: {i}"
        else:
            text = f'[2026-11-29 11:57:00] INFO:     127.0.0.1:4{i % 1000:03d} - "POST /generate HTTP/1.1" 200 OK'
        out.append(LogLine(i + 1, rank, text))
    return out
