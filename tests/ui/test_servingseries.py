"""The plots' series (`ui/servingseries.py`) without Textual: each /metrics read once, however many
snapshots carry it, from the snapshot's typed serving point; the log's series until the first read."""

from __future__ import annotations

import dataclasses

from cockpit.ui.servingseries import ServingSeries
from tests.ui.story import T0, story_snapshot

READ = {"gen_tok_s": 812.5, "prompt_tok_s": 40.0, "running": 3, "waiting": 0, "kv_usage_pct": 41.0,
        "source": "/metrics"}


def test_the_log_series_until_metrics_are_read_then_each_read_once() -> None:
    series = ServingSeries()
    snap = story_snapshot(0.88, "ready")
    gen, usage = series.add(snap)
    assert gen is snap.state.gen_throughput and usage is snap.state.token_usage
    first = dataclasses.replace(snap, taken_at=T0 + 1, serving=READ)
    series.add(first)
    gen, usage = series.add(dataclasses.replace(first, taken_at=T0 + 2))  # the same read, a later snapshot
    assert [(p.ts, p.value) for p in gen] == [(f"{T0 + 1:.1f}", 812.5)]
    assert [(p.ts, p.value) for p in usage] == [(f"{T0 + 1:.1f}", 0.41)]
    gen, _ = series.add(dataclasses.replace(snap, taken_at=T0 + 3, serving={**READ, "gen_tok_s": 800.0}))
    assert [p.value for p in gen] == [812.5, 800.0]


def test_a_figure_the_engine_does_not_report_adds_no_point() -> None:
    series = ServingSeries()
    gen, usage = series.add(dataclasses.replace(story_snapshot(0.88, "ready"), serving={**READ, "kv_usage_pct": None}))
    assert len(gen) == 1 and len(usage) == 0
