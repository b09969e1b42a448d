"""`cockpit bench`'s load generator against hostile servers (issue 27): a stdlib HTTP server in its
own process on a free loopback port (`_bench_stub.py`), the load generator in another
(`_bench_client.py`, which reports its peak RSS and wall time).

Each server mode is one of the findings: server token counts believed (`[0.0] * n`: 1.2 GB and a
recorded 34 M tok/s; 10^12 → MemoryError), a slow-loris `/metrics` or `/v1/models` (the bench hung
past --duration), `+Inf` in `/metrics` (it died after the whole run; NaN/Infinity in its JSON), a
2 MB `/metrics` parsed in the event loop (TTFT p99 28 → 937 ms), one endless SSE line (930 MB in
4 s), an endless error body.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cockpit.backends import get_backend

HERE = Path(__file__).parent
PY = sys.executable
RSS_LIMIT_MB = 200  # the client alone is ~40 MB


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in the bench's JSON")

    return json.loads(text, parse_constant=refuse)


class Stub:
    def __init__(self, *args: str):
        self.proc = subprocess.Popen([PY, str(HERE / "_bench_stub.py"), *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(5)


@pytest.fixture
def stub() -> Iterator[Any]:
    started: list[Stub] = []

    def start(*args: str) -> Stub:
        started.append(Stub(*args))
        return started[-1]

    yield start
    for s in started:
        s.close()


def bench(url: str, timeout: float = 90, **spec: Any) -> tuple[dict[str, Any], dict[str, float]]:
    """The result (parsed strictly: no NaN, no Infinity) and {peak_rss_mb, wall_s}."""
    # the stub's metric names are SGLang's (BenchSpec has no engine's names of its own: the backend's)
    metrics = get_backend("sglang").metrics
    assert metrics is not None
    spec = {"requests": 12, "input_len": 8, "output_len": 16, "duration_s": 5.0, "model": "stub",
            "metrics_path": metrics.path(), "metrics_prefix": metrics.prefix(),
            "metric_names": {k: list(v) for k, v in metrics.serving().items()}, **spec}
    proc = subprocess.run([PY, str(HERE / "_bench_client.py"), url, json.dumps(spec)], capture_output=True,
                          text=True, timeout=timeout, cwd=HERE.parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return _strict(lines[0]), json.loads(lines[1])


def test_server_token_counts_are_not_believed_beyond_max_tokens(stub, ledger) -> None:  # type: ignore[no-untyped-def]
    s = stub("--sse", "huge-count")
    ledger.fault("bench")
    r, cost = bench(s.url)
    assert cost["peak_rss_mb"] < RSS_LIMIT_MB, cost
    assert r["output_tokens"] == 0 and not r["output_tok_s"], r
    assert r["requests"] == 0 and r["errors"] >= 1
    kinds = list(r["error_kinds"])
    assert kinds == ["the server reported N output tokens for max_tokens N"], kinds
    assert r["bench_stopped"].startswith("the check request before the load failed"), r["bench_stopped"]
    ledger.survive("bench")
    ledger.note(f"bench vs completion_tokens 10^12: peak RSS {cost['peak_rss_mb']} MB, {cost['wall_s']} s")


@pytest.mark.parametrize("endpoint", ["--metrics", "--models"])
def test_a_slow_loris_endpoint_does_not_hold_the_bench_past_its_time(stub, ledger, endpoint: str) -> None:  # type: ignore[no-untyped-def]
    s = stub(endpoint, "slowloris")
    ledger.fault("bench")
    # each read succeeds within any per-read timeout (a byte a second); only a bound on the whole answer ends it
    spec: dict[str, Any] = {"duration_s": 3.0}
    if endpoint == "--models":
        spec["model"] = None  # the bench asks /v1/models which model is served
    r, cost = bench(s.url, timeout=60, **spec)
    # /v1/models: 10 s at most; /metrics: 5 s before and after the level; the level: 3 s
    assert cost["wall_s"] < 30, cost
    assert r["requests"] > 0 and r["errors"] == 0
    if endpoint == "--metrics":
        assert r["server"]["available"] is False
    ledger.survive("bench")
    ledger.note(f"bench vs slow-loris {endpoint[2:]}: {cost['wall_s']} s for a 3 s level, peak RSS {cost['peak_rss_mb']} MB")


def test_infinity_in_metrics_is_unknown_not_a_crash(stub, ledger) -> None:  # type: ignore[no-untyped-def]
    s = stub("--metrics", "inf")
    ledger.fault("bench")
    r, _cost = bench(s.url, duration_s=3.0)
    srv = r["server"]
    assert srv["available"] is True and r["requests"] > 0
    # the finite samples are kept, the infinite ones are unknown (absent), never a number
    assert srv["peak_running"] == 1.0 and srv["max_total_num_tokens"] == 100000
    assert "mean_ttft_ms" not in srv and "mean_e2e_ms" not in srv and srv["peak_waiting"] is None
    ledger.survive("bench")


def test_a_large_metrics_body_does_not_stall_the_request_clock(stub, ledger) -> None:  # type: ignore[no-untyped-def]
    # the stub answers every request after 20 ms; a 2 MB /metrics parsed in the event loop every
    # half second held every request's first token behind it (TTFT p99 937 ms)
    s = stub("--metrics", "huge")
    ledger.fault("bench")
    r, cost = bench(s.url, requests=400, concurrency=2, duration_s=6.0)
    assert r["server"]["available"] is True and r["server"]["samples"] >= 3
    assert r["ttft_ms"]["p50"] < 150, r["ttft_ms"]
    assert cost["peak_rss_mb"] < RSS_LIMIT_MB, cost
    ledger.survive("bench")
    ledger.note(f"bench vs a 2 MB /metrics: TTFT p50 {r['ttft_ms']['p50']} ms p99 {r['ttft_ms']['p99']} ms "
                f"(the server's: 20 ms), peak RSS {cost['peak_rss_mb']} MB")


@pytest.mark.parametrize("mode", [("--sse", "endless-line"), ("--error-body", "huge")], ids=["sse-line", "error-body"])
def test_an_endless_body_is_cut_at_its_cap(stub, ledger, mode: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    s = stub(*mode)
    ledger.fault("bench")
    r, cost = bench(s.url, duration_s=5.0)
    assert cost["peak_rss_mb"] < RSS_LIMIT_MB, cost
    assert cost["wall_s"] < 20, cost
    assert r["requests"] == 0 and r["errors"] >= 1
    (kind,) = r["error_kinds"]
    assert "over N,N,N bytes" in kind or "over N,N bytes" in kind, kind
    ledger.survive("bench")
    ledger.note(f"bench vs {mode[1]} ({mode[0][2:]}): peak RSS {cost['peak_rss_mb']} MB, {cost['wall_s']} s")


def test_an_engine_without_metrics_is_benched_without_asking_for_them(stub, ledger) -> None:  # type: ignore[no-untyped-def]
    # an engine whose backend has no metrics capability (the tests' echo engine): bench never asks the
    # endpoint (here one that would hold each scrape for its whole 5 s) and says why the server side is missing
    s = stub("--metrics", "slowloris")
    ledger.fault("bench")
    said = "serving metrics unavailable for this engine (Echo)"
    r, cost = bench(s.url, timeout=60, duration_s=3.0, metrics_path=None, metrics_absent=said)
    assert r["requests"] > 0 and r["server"] == {"available": False, "reason": said}, r
    assert cost["wall_s"] < 10, cost  # no scrape before or after the level (5 s each on this endpoint)
    ledger.survive("bench")
