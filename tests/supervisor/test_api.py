"""The snapshot's typed values (issue 37, item 6): serving, ending and host cache, derived where the
snapshot is built from its raw fields, so no view computes them; `status --json` unchanged."""

from __future__ import annotations

import dataclasses

from cockpit.commands._support import status_json
from cockpit.core.state import Crash
from cockpit.supervisor.api import RunEnd, RunSnapshot, ServingPoint
from tests.ui.story import T0, story_snapshot, two_node_snapshot

READ = {"gen_tok_s": 812, "prompt_tok_s": 40.0, "running": 3, "waiting": 0, "kv_usage_pct": 41.0, "source": "/metrics"}


def test_the_serving_point_is_typed_and_none_before_metrics_are_read() -> None:
    snap = story_snapshot(0.88, "ready")
    assert snap.serving is None and snap.serving_point is None
    read = dataclasses.replace(snap, taken_at=T0 + 2, serving=READ)
    assert read.serving_point == ServingPoint(f"{T0 + 2:.1f}", 812.0, 0.41, READ)
    assert isinstance(read.serving_point.gen_tok_s, float) and read.serving_point.figures is READ
    unreported = dataclasses.replace(snap, serving={"source": "/metrics", "note": "no answer in 5 s"})
    assert unreported.serving_point is not None
    assert unreported.serving_point.gen_tok_s is None and unreported.serving_point.kv_usage is None


def test_the_end_says_how_the_run_ended_and_none_while_it_lives() -> None:
    live = story_snapshot(0.93, "ready")
    assert live.end is None and not live.ended
    crashed = story_snapshot(0.93, "ready", crashed=True)
    assert crashed.state.crash is not None and crashed.ended
    assert crashed.end == RunEnd("crashed", crashed.state.crash.kind)
    stopped_state = live.state.copy()
    stopped_state.phase = "stopped"
    stopped = dataclasses.replace(live, state=stopped_state, lifecycle="stopped",
                                  ending={"exit_code": 0, "signal": None, "by": "operator"})
    assert stopped.end == RunEnd("stopped", None, "operator", 0)
    failed = dataclasses.replace(live, lifecycle="failed", ending={"exit_code": -9, "signal": "SIGKILL", "by": "external"})
    assert failed.end == RunEnd("failed", None, "external", -9)


def test_a_crash_the_log_told_is_the_ending_whatever_the_lifecycle() -> None:
    live = story_snapshot(0.93, "ready")
    state = live.state.copy()
    state.phase = "crashed"
    state.crash = Crash(kind="nccl_timeout", phase="decode", rank="TP3", line=9, message="Watchdog caught collective "
                        "operation timeout", decisive_lines=[])
    snap = dataclasses.replace(live, state=state, lifecycle="running")
    assert snap.end is not None and (snap.end.outcome, snap.end.crash_kind) == ("crashed", "nccl_timeout")


def test_the_host_cache_per_rank_comes_from_the_runs_flags() -> None:
    snap = two_node_snapshot()  # --enable-hierarchical-cache --hicache-size 48
    assert snap.host_cache_gb_per_rank == 48.0 and snap.host_cache_label
    assert story_snapshot(0.88, "ready").host_cache_gb_per_rank is None  # no host cache in its flags
    assert dataclasses.replace(snap, run=None).host_cache_gb_per_rank is None


def test_status_json_carries_the_raw_fields_only() -> None:
    snap = dataclasses.replace(story_snapshot(0.93, "ready", crashed=True), serving=READ)
    out = status_json(snap)
    assert out["serving"] is READ and out["ending"] is None
    assert not {"serving_point", "end", "ended", "host_cache_label"} & set(out)
    # the host cache `status --json` writes is the log's figure, never the one derived from the flags
    cached = two_node_snapshot()
    state = cached.state.copy()
    state.host_cache_gb_per_rank = None
    quiet_log = dataclasses.replace(cached, state=state)
    assert quiet_log.host_cache_gb_per_rank == 48.0 and status_json(quiet_log)["host_cache_gb_per_rank"] is None


def test_derived_values_are_never_given() -> None:
    import pytest

    with pytest.raises(TypeError):
        RunSnapshot(taken_at=T0, profile="demo", lifecycle="idle", state=story_snapshot().state, findings=(),
                    end=None)  # type: ignore[call-arg]
