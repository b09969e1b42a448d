"""Both simulators' `/metrics` text, byte for byte, from fixed engine states: the histograms (one
shared Histogram and exposition in cockpit/sim/histogram.py) print what each engine's own code
printed before they were shared. Goldens in tests/data/sim-metrics/, captured from main at 1b9154b."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.sim.sglang.config import load_config
from cockpit.sim.sglang.metrics import render_metrics as sglang_metrics
from cockpit.sim.sglang.scheduler import Stats
from cockpit.sim.vllm.config import load_vllm_config
from cockpit.sim.vllm.engine import Engine
from cockpit.sim.vllm.http import render_metrics as vllm_metrics
from cockpit.sim.vllm.server import VllmSim

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sim-metrics"


def _sglang_stats() -> dict[str, object]:
    st = Stats()
    for v in (0.05, 0.3, 0.3, 500.0, 1e-4, 7.77):
        st.ttft.observe(v)
        st.e2e.observe(v * 3)
    for v, n in ((0.013, 7), (0.0021, 100), (9.0, 1), (0.5, 3)):  # a chunk of n tokens: n gaps
        st.itl.observe(v, n)
    return {"ttft": st.ttft.to_json(), "e2e": st.e2e.to_json(), "itl": st.itl.to_json(), "token_usage": 0.4,
            "num_running_reqs": 3, "prompt_tokens_total": 1234, "cached_tokens_total": 200}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_sglang_metrics_text_is_byte_identical(version: str) -> None:
    cfg = load_config(["--model-path", "/models/Kimi-K2.5", "--tp", "8", "--trust-remote-code", "--enable-metrics",
                       "--sim-version", version])
    served = sglang_metrics(cfg, _sglang_stats(), {"token_capacity": 58833, "weight": 71.8}, 1700000000.0)
    assert served == (GOLDEN / f"sglang-{version}.txt").read_text()
    assert sglang_metrics(cfg, {}, {}, 1700000000.0) == (GOLDEN / f"sglang-{version}-empty.txt").read_text()


@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_vllm_metrics_text_is_byte_identical(version: str) -> None:
    cfg = load_vllm_config(["serve", "Qwen/Qwen3-32B", "--tensor-parallel-size", "2", "--sim-version", version])
    eng = Engine(cfg, 50000, 20.0, 1024.0)
    for i in range(12):
        eng.add(300 + 97 * i, 20 + 13 * i, cached=i * 10)
    for _ in range(400):  # 20 simulated seconds: every request prefilled, decoded and finished
        eng.step(0.05)
    assert eng.success == 12 and eng.itl.n > 1000
    sim = VllmSim(cfg)
    assert vllm_metrics(sim, eng) == (GOLDEN / f"vllm-{version}.txt").read_text()
    assert vllm_metrics(sim, None) == (GOLDEN / f"vllm-{version}-none.txt").read_text()
