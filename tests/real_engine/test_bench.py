"""`cockpit bench` on the REAL vLLM (its CPU build) serving tiny-llama: a 484-token tokenizer, a
512-token vocabulary, `--max-model-len 512`. One engine for the module (a launch costs ~60–90 s of
CPU); every assertion here failed on the bench before issue 22:

- synthetic prompts were random ids from 1000–20000: 80/80 requests "Token id … is out of
  vocabulary"; now they are the tokenizer's own ids, read on the host;
- the default --input-len 1024 on a run launched with --max-model-len 512: every request HTTP 400;
  now a default is cut to fit (and said), a chosen length refused with exit 2;
- failures went on to the next level, one error kind per token id, a traceback each in the
  server's log; now a level stops at --max-error-share, kinds are grouped by message shape, and the
  levels after it are not run;
- ITL p50 0.03–0.06 ms measured gaps inside SSE bursts; now it is decode time per token,
  (E2E − TTFT) / (tokens − 1), with vLLM's own histograms (`vllm:inter_token_latency_seconds`,
  `vllm:request_time_per_output_token_seconds`) beside it, in the text too;
- nothing said that the load generator shares the engine's CPUs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.real_engine.conftest import RealVllm

pytestmark = pytest.mark.timeout(1500)

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 420  # a 2-core machine shared with other engineers' engines and tests


@dataclass
class Run:
    root: Path
    env: dict[str, str]
    profile: Path

    def cockpit(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cockpit", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    def bench(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cockpit("bench", str(self.profile), *args)

    def tracebacks(self) -> int:
        """Tracebacks in the server's log so far."""
        log = self.root / "work" / "logs" / "vllm.log"
        return log.read_text(errors="replace").count("Traceback (most recent call last)") if log.exists() else 0


@pytest.fixture(scope="module")
def run(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("bench-real")
    (root / "home").mkdir()
    env = dict(os.environ)
    env.update({"HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "xc"), "XDG_DATA_HOME": str(root / "xd"),
                "XDG_STATE_HOME": str(root / "xs"), "XDG_CACHE_HOME": str(root / "xk"),
                "COCKPIT_RUNS_ROOT": str(root / "runs"), "PYTHONPATH": str(REPO)})
    env.pop("SSH_AUTH_SOCK", None)
    profile = real_vllm.profile(root, "bench-real", server={"optimization-level": 0, "max-model-len": 512})
    r = Run(root, env, profile)
    with open(real_vllm.venv.parent / ".engine.lock", "a+") as lock:  # conftest's engine_lock, for a module
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            up = r.cockpit("up", str(profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S),
                           timeout=READY_TIMEOUT_S + 60)
            assert up.returncode == 0, up.stdout + up.stderr
            yield r
        finally:
            with contextlib.suppress(Exception):
                r.cockpit("down", str(profile), "--timeout", "20", timeout=120)
            fcntl.flock(lock, fcntl.LOCK_UN)


def test_bench_on_a_small_vocabulary_and_a_short_context(run: Run) -> None:
    out = run.bench("--requests", "12", "--concurrency", "4", "--output-len", "32", "--duration", "180", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["requests"] == 12 and r["errors"] == 0, r["error_kinds"]
    assert r["prompts"].startswith("token ids from tokenizer.json in "), r["prompts"]
    # the default 1024 does not fit 512: cut, and said so (on stderr and in the result)
    assert r["max_model_len"] == 512 and r["input_len"] == 512 - 32
    assert any("context length 512" in n and "--input-len 1024 → 480" in n for n in r["notes"]), r["notes"]
    assert "context length 512" in out.stderr
    # the load generator shares this machine's CPUs with the engine: said, and its CPU time measured
    assert any("engine's own machine" in n for n in r["notes"]) and r["client_cpu_s"] > 0
    # ITL is the per-request figure, (E2E − TTFT) / (tokens − 1), near the means' figure — not the
    # gaps between the events of one burst. No lower bound in milliseconds: when the engine holds
    # both cores the client can be starved and read a request's tokens in one burst after the
    # first (p50 0.13 ms seen in CI's rehearsal); the engine's own step is its histogram, below.
    itl = r["itl_ms"]
    assert 0 < itl["p50"] <= itl["p99"] < 5000, itl
    e2e, ttft = r["mean_e2e_ms"], r["mean_ttft_ms"]
    assert itl["p50"] < (e2e - ttft) / 31 * 3
    # vLLM's own histograms over the run, beside the client's figures
    srv = r["server"]
    assert srv["available"] and srv["delta_generation_tokens"] == 12 * 32
    assert srv["itl_ms"]["count"] >= 12 * 31 and srv["itl_ms"]["p50"] > 0, srv["itl_ms"]
    assert srv["tpot_ms"]["count"] == 12 and srv["ttft_ms"]["count"] == 12
    # the text shows them too
    text = run.bench("--requests", "4", "--concurrency", "2", "--input-len", "64", "--output-len", "16")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "server ITL (per decode step): p50" in text.stdout and "server TTFT: p50" in text.stdout
    assert "ITL: decode time per output token" in text.stdout


def test_a_length_the_run_cannot_hold_is_refused(run: Run) -> None:
    out = run.bench("--input-len", "1024", "--output-len", "32", "--requests", "2")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "context length 512" in out.stderr and "--input-len 1024" in out.stderr and "Traceback" not in out.stderr


def test_failing_requests_stop_the_level_and_the_bench(run: Run) -> None:
    # the first prompt is fine (the check request passes), the others name ids the model does not have
    ds = run.root / "oov.jsonl"
    lines = [json.dumps({"input_ids": [5, 6, 7], "output_len": 4})]
    lines += [json.dumps({"input_ids": [5, 100000 + i], "output_len": 4}) for i in range(40)]
    ds.write_text("\n".join(lines) + "\n")
    before = run.tracebacks()
    out = run.bench("--dataset", str(ds), "--requests", "41", "--concurrency", "2", "4", "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    r = json.loads(out.stdout)
    (level,) = r["levels"]
    assert level["concurrency"] == 2 and level["stopped"] and "--max-error-share" in level["stopped"]
    assert level["errors"] + level["requests"] < 41  # it stopped early
    assert r["not_run"] == [4] and r["bench_stopped"].startswith("concurrency 2 stopped")
    # one kind for every out-of-vocabulary id
    assert list(level["error_kinds"]) == ["stream error: Token id N is out of vocabulary"], level["error_kinds"]
    assert run.tracebacks() - before <= 12
    text = run.bench("--dataset", str(ds), "--requests", "41", "--concurrency", "2", "4")
    assert text.returncode == 1 and "STOPPED:" in text.stdout and "not run: concurrency 4" in text.stdout
