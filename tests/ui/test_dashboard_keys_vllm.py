"""The dashboard's filter keys (f/m/e/b) on a vLLM profile: the presets are the vLLM backend's words,
so `m` keeps vLLM's memory lines (SGLang's "avail mem" would keep none). Lines are the golden vLLM
logs', ranked by the vLLM backend's record reader as the supervisor's NodeLog ranks them."""

from __future__ import annotations

from pathlib import Path

from cockpit.backends import get_backend
from cockpit.core.profile import parse_profile
from cockpit.supervisor.api import LogLine
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.logpane import LogPane

DATA = Path(__file__).resolve().parent.parent / "data"
PROFILE = parse_profile(
    {"name": "qwen-vllm", "backend": "vllm", "hosts": [{"ssh": "local"}],
     "server": {"model": "Qwen/Qwen3-32B", "tensor-parallel-size": 2, "gpu-memory-utilization": 0.97}},
    "qwen-vllm.yaml",
)


def vllm_lines(name: str) -> list[LogLine]:
    record_rank = get_backend("vllm").logs.record_rank
    out, rank = [], None
    for i, text in enumerate((DATA / name).read_text().splitlines(), 1):
        r = record_rank(text)
        if r is not None:
            rank = r or None
        out.append(LogLine(i, rank, text))
    return out


async def test_filter_keys_use_vllms_words() -> None:
    app = CockpitApp(profile=PROFILE, supervisor_factory=None)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        pane = screen.query_one(LogPane)
        pane.add_lines(vllm_lines("vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log"))
        await pilot.pause()
        await pilot.press("m")
        memory = [ln.text for ln in pane.shown_lines]
        assert any("Available KV cache memory: 42.32 GiB" in t for t in memory)
        assert any("Free memory on device (78.31/79.19 GiB)" in t for t in memory)
        assert not any("Avg prompt throughput" in t for t in memory)
        await pilot.press("e")
        errors = [ln.text for ln in pane.shown_lines]
        assert errors and any("CUDA out of memory" in t for t in errors)
        assert not any("Model loading took" in t for t in errors)
        await pilot.press("b")
        batches = [ln.text for ln in pane.shown_lines]
        assert batches and all("Avg prompt throughput" in t for t in batches)
        await pilot.press("f")  # cycles on from batches to all
        assert screen.filter_spec == "all" and len(pane.shown_lines) == len(pane.model.lines)
        # the pane paints vLLM's failure lines as errors
        assert "EngineDeadError" in pane.error_words or "EngineCore encountered" in pane.error_words
