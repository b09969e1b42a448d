"""The hang verdict (cockpit/core/hang.py) and the `hung` phase in the reducer."""

from __future__ import annotations

from cockpit.core.events import HangCleared, HangSeen, ProcessExited, ServingStats
from cockpit.core.hang import DEFAULT_HANG_AFTER_S, HangWatch, hang_after_s
from cockpit.core.reducer import apply
from cockpit.core.state import PHASES, RunState


def test_two_probes_unanswered_for_the_window_with_nothing_moving_is_a_hang() -> None:
    w = HangWatch(10.0)
    w.tokens(0.0, 100.0)
    w.outstanding(0.0, 0, 0)  # frozen gauges say nothing runs
    w.probe_sent(3.0)
    assert w.verdict(13.5) is None  # one probe, however long it waits, is a slow request
    w.probe_sent(5.5)
    assert w.verdict(12.0) is None  # the first has waited 9 s only
    v = w.verdict(13.5)
    assert v is not None
    assert v["probe_waiting_s"] == 10.5 and v["still_for_s"] == 13.5 and v["probes_unanswered"] == 2
    assert "2 probe requests unanswered" in v["reason"] and "no token generated" in v["reason"]


def test_a_slow_first_token_is_not_a_hang_and_its_answer_clears_both_probes() -> None:
    """Issue 40 finding 15: one request held by a slow first token (gauges say 1 running, no token
    for longer than the window) read as hung, then ready again — a flap."""
    w = HangWatch(10.0)
    w.tokens(0.0, 0.0)
    w.outstanding(0.0, 1, 0)
    assert w.verdict(12.0) is None  # gauges alone never make a hang
    assert w.wants_probe(3.0, 2.5)
    first = w.probe_sent(3.0)
    assert not w.wants_probe(4.0, 2.5) and w.wants_probe(5.5, 2.5)  # the second once the first waited
    w.probe_sent(5.5)
    assert not w.wants_probe(9.0, 2.5)  # never a third
    w.probe_failed(first)
    assert w.probes == [5.5]
    w.probe_answered(12.0)
    assert w.probes == [] and w.verdict(13.0) is None


def test_tokens_moving_is_never_a_hang_and_brings_the_run_back() -> None:
    w = HangWatch(10.0)
    w.tokens(0.0, 100.0)
    w.probe_sent(0.0)
    w.probe_sent(1.0)
    assert w.verdict(11.0) is not None
    w.tokens(11.0, 140.0)
    assert w.verdict(12.0) is None
    assert w.still_for(12.0) == 1.0


def test_an_idle_server_is_not_hung_and_never_probed() -> None:
    w = HangWatch(10.0)
    w.tokens(0.0, 5.0)
    w.outstanding(0.0, 0, 0)
    assert w.verdict(100.0) is None  # nothing outstanding: idle, not hung
    assert not w.wants_probe(1.0, 2.5) and not w.wants_probe(300.0, 2.5)  # idle: no probe, ever
    unknown = HangWatch(10.0)
    unknown.tokens(0.0, None)  # no /metrics: no gauges, no probe from the watch
    assert not unknown.wants_probe(300.0, 2.5)
    w.outstanding(50.0, 1, 0)  # the gauges say a request waits, nothing moved: probe
    assert w.wants_probe(50.0, 2.5)
    w.probe_sent(50.0)
    w.probe_answered(50.2)
    assert w.verdict(60.0) is None and round(w.still_for(60.0), 3) == 9.8


def test_requests_the_engine_reports_outstanding_are_in_the_evidence() -> None:
    w = HangWatch(5.0)
    w.tokens(0.0, 1.0)
    w.outstanding(0.0, 2, 1)
    assert w.verdict(6.0) is None  # the gauges alone: not a hang
    w.probe_sent(1.5)
    w.probe_sent(3.0)
    v = w.verdict(7.0)
    assert v is not None and v["requests_outstanding"] == 3 and v["probe_waiting_s"] == 5.5
    assert v["stuck_since_ready_s"] == 0.0  # stuck from the first moment watched


def test_a_rank_silent_while_others_log_is_named() -> None:
    w = HangWatch(10.0)
    w.outstanding(0.0, 1, 0)
    w.log_line(0.0, "TP0")
    w.log_line(0.0, "TP1")
    w.log_line(11.0, "TP0")
    w.probe_sent(0.5)
    w.probe_sent(1.0)
    v = w.verdict(12.0)
    assert v is not None and v["silent_ranks"] == ["TP1"] and "silent log: TP1" in v["reason"]


def test_the_window_comes_from_the_profile_else_the_engine_default() -> None:
    assert hang_after_s("vllm", None) == DEFAULT_HANG_AFTER_S == 60.0
    assert hang_after_s("sglang", 12) == 12.0


def test_hung_is_a_phase_a_ready_run_enters_and_leaves() -> None:
    assert "hung" in PHASES
    st = RunState(backend="vllm", phase="ready")
    apply(st, HangSeen(line=0, ts="2026-12-01T15:00:00Z", rank=None, evidence={"reason": "x"}))
    assert st.phase == "hung" and st.phase_since == "2026-12-01T15:00:00Z"
    assert st.to_json()["hung"] == {"since": "2026-12-01T15:00:00Z", "evidence": {"reason": "x"}}
    apply(st, HangCleared(line=0, ts="2026-12-01T15:01:00Z", rank=None))
    assert st.phase == "ready" and st.hang is None and st.phase_since == "2026-12-01T15:01:00Z"


def test_only_a_ready_run_hangs_and_a_crash_wins() -> None:
    st = RunState(backend="vllm", phase="warmup")
    apply(st, HangSeen(line=0, ts=None, rank=None, evidence={}))
    assert st.phase == "warmup"
    st.phase = "ready"
    apply(st, HangSeen(line=0, ts=None, rank=None, evidence={}))
    apply(st, ProcessExited(line=0, ts=None, rank=None, exit_code=-9))
    assert st.phase == "crashed"


def test_stats_lines_with_tokens_moving_count_as_progress_a_frozen_one_does_not() -> None:
    st = RunState(backend="vllm", phase="ready")
    apply(st, ServingStats(line=1, ts="t", rank=None, prompt_throughput=0.0, gen_throughput=12.5,
                           running_req=1, queue_req=0, kv_usage=0.1))
    apply(st, ServingStats(line=2, ts="t", rank=None, prompt_throughput=0.0, gen_throughput=0.0,
                           running_req=1, queue_req=0, kv_usage=0.1))
    assert st.progress_lines == 1
