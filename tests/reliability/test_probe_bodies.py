"""Issue 27: every body the probes read is bounded in bytes and in time.

A hostile HTTP server (`_hostile_http.py`, a real process on a free loopback port) answers the
readiness endpoint with a body that never ends, /server_info with an endless JSON string, the
metrics endpoint with endless Prometheus lines, errors with endless bodies, and, under /slow and
/loris, with one body byte every 0.5 s or a status line one byte a second. Each probe runs in a
fresh Python process of its own (the real probe functions, real httpx, real sockets), under a
1 GiB address-space limit so that an unbounded read fails fast instead of taking the machine; it
reports its wall time and its peak RSS (VmHWM).

Must hold: readiness says the status ("200", "404") as soon as the headers are in and reads no
body; /server_info and metrics give up (None) past their byte limits; a slow-loris answer ends at
the probe's deadline ("timeout" / None). Peak RSS stays under 120 MiB (a bare interpreter with
httpx is ~45 MiB); before the fix the /health probe alone read 1.8 GB in 8 s.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import REPO, port_server

PY = sys.executable
HOSTILE = str(Path(__file__).with_name("_hostile_http.py"))
RSS_LIMIT_KB = 120 * 1024

PROBE = r"""
import asyncio, json, sys, time
from cockpit.serving import probes
base, what, arg, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
async def main():
    if what == "status":
        return await probes.probe_status(base, arg, timeout=timeout)
    if what == "info":
        return await probes.server_info(base, timeout=timeout)
    if what == "metrics":
        return await probes.metrics(base, arg, "sglang:", timeout=timeout)
t0 = time.monotonic()
try:
    out = asyncio.run(main())
except MemoryError:
    out = "MemoryError"
took = time.monotonic() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"result": out, "took": took, "hwm_kb": hwm}))
"""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with port_server(HOSTILE, tmp_path_factory.mktemp("hostile")) as url:
        yield url


def _probe(base: str, what: str, arg: str, timeout: float) -> dict:  # type: ignore[type-arg]
    done = subprocess.run([PY, "-c", PROBE, base, what, arg, str(timeout)], capture_output=True, text=True,
                          timeout=timeout + 30, cwd=REPO, preexec_fn=_limit_memory,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout, done.stderr[-2000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


# (base suffix, probe, its argument, timeout given, expected result, most seconds it may take)
CASES = [
    ("", "status", "/health", 25.0, "200", 3.0),        # a body that never ends
    ("", "status", "/ready", 10.0, "200", 3.0),
    ("", "status", "/nothing", 25.0, "404", 3.0),       # an endless error body
    ("/slow", "status", "/health", 25.0, "200", 3.0),   # one byte every 0.5 s after the headers
    ("/loris", "status", "/health", 2.0, "timeout", 2.0 + 3.0 + 2.0),  # headers never finished
    ("", "info", "", 10.0, None, 5.0),                  # endless JSON: past 1 MiB, given up
    ("/slow", "info", "", 2.0, None, 2.0 + 2.0),        # a slow body: the deadline
    ("", "metrics", "/metrics", 10.0, None, 5.0),       # endless metrics: past 8 MiB, given up
    ("/loris", "metrics", "/metrics", 2.0, None, 2.0 + 2.0),
]


@pytest.mark.parametrize(("suffix", "what", "arg", "timeout", "expected", "most_s"), CASES,
                         ids=[f"{w}{s or ''}{a}" for s, w, a, *_ in CASES])
def test_probe_reads_are_bounded(hostile: str, suffix: str, what: str, arg: str, timeout: float,
                                 expected: str | None, most_s: float, ledger) -> None:
    ledger.fault("telemetry")
    r = _probe(hostile + suffix, what, arg, timeout)
    assert r["result"] == expected, r
    assert r["took"] <= most_s, r
    assert r["hwm_kb"] <= RSS_LIMIT_KB, r
    ledger.note(f"probe {what} {suffix}{arg}: {r['result']} in {r['took']:.2f} s, peak RSS {r['hwm_kb'] // 1024} MiB")
    ledger.survive("telemetry")
