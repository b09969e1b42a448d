"""The journal against real SQLite files: what the supervisor writes is what `runs` reads."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cockpit.core.state import SeriesPoint
from cockpit.journal import AmbiguousRunId, Journal, JournalError, downsample

from .helpers import crashed_state, low_headroom_finding, ready_state, run_info

FLAGS_093 = {"model-path": "/models/Kimi-K2.5", "tp": 8, "mem-fraction-static": 0.93, "hicache-size": 48}


@pytest.fixture
def journal(tmp_path: Path):
    j = Journal.open(tmp_path / "journal.sqlite3")
    yield j
    j.close()


def test_a_ready_run_then_stopped_keeps_everything(journal: Journal) -> None:
    journal.record_start(run_info("20261129-080000-aaaa"), "kimi-k2.5-tp8", FLAGS_093)
    rec = journal.get("20261129-080000-aaaa")
    assert rec is not None and rec.outcome == "running" and rec.ended_at is None
    assert rec.flags == FLAGS_093 and rec.hosts == ("gpu-box-1",)

    journal.record_progress("20261129-080000-aaaa", ready_state(), [low_headroom_finding()])
    rec = journal.get("20261129-080000-aaaa")
    assert rec is not None and rec.outcome == "ready"
    assert rec.min_headroom_gb == 5.5 and rec.headroom["TP7"] == 5.57
    assert rec.max_total_num_tokens == 174617
    assert rec.peak_gen_throughput == 3010.0 and rec.median_gen_throughput == 2874.0
    assert rec.peak_token_usage == pytest.approx(0.3)
    assert rec.backend_version == "sglang-0.5.9"
    assert rec.time_to_ready_s is not None and rec.time_to_ready_s >= 0
    assert rec.findings[0]["changes"] == [{"flag": "--mem-fraction-static", "from": 0.93, "to": 0.88}]
    assert [p[1] for p in rec.gen_throughput_series] == [2800.0, 3010.0, 2874.0]
    assert [p[0] for p in rec.gen_throughput_series] == [0.0, 1.0, 2.0]

    journal.record_end("20261129-080000-aaaa", "stopped", ready_state(), [])
    rec = journal.get("20261129-080000-aaaa")
    assert rec is not None and rec.outcome == "stopped" and rec.ended_at is not None
    out = rec.to_json()
    for key in ("id", "profile", "started_at", "ended_at", "outcome", "crash_kind", "crash_phase", "flags",
                "min_headroom_gb", "max_total_num_tokens", "peak_gen_throughput"):
        assert key in out
    assert json.loads(json.dumps(out)) == out
    assert "gen_throughput_series" in rec.to_json(include_series=True)


def test_a_crash_records_kind_phase_and_decisive_lines(journal: Journal) -> None:
    journal.record_start(run_info("r-crash"), "kimi-k2.5-tp8", FLAGS_093)
    journal.record_progress("r-crash", crashed_state(), [low_headroom_finding()])
    rec = journal.get("r-crash")
    # a cockpit killed before record_end still leaves the crash behind
    assert rec is not None and rec.outcome == "crashed" and rec.ended_at is None
    journal.record_end("r-crash", "crashed", crashed_state(), [low_headroom_finding()])
    rec = journal.get("r-crash")
    assert rec is not None
    assert (rec.outcome, rec.crash_kind, rec.crash_phase, rec.crash_rank) == ("crashed", "cuda_oom", "prefill", "TP3")
    assert rec.decisive_lines[-1].startswith("torch.OutOfMemoryError")
    assert rec.min_headroom_gb == 0.82 and rec.max_total_num_tokens == 246890
    assert rec.findings[0]["id"] == "low_headroom_after_graph_capture"


def test_progress_that_changes_nothing_writes_nothing(journal: Journal, tmp_path: Path) -> None:
    journal.record_start(run_info("r1"), "p", {})
    st = ready_state()
    journal.record_progress("r1", st, [])
    wal = tmp_path / "journal.sqlite3-wal"
    size = wal.stat().st_size
    journal.figures_interval_s = 0.0  # the running figures are due at every call
    for _ in range(20):
        journal.record_progress("r1", st, [])
    assert wal.stat().st_size == size
    st.gen_throughput.append(SeriesPoint(ts="2026-11-29 08:14:00", value=2900.0))
    journal.record_progress("r1", st, [])
    assert wal.stat().st_size > size


def test_running_figures_are_written_every_interval_what_operators_look_up_at_once(journal: Journal) -> None:
    """Issue 39 item 2: a steady run's throughput moves every second; the journal is written when
    the phase, crash or findings change, and the figures at most every `figures_interval_s`."""
    journal.record_start(run_info("r1"), "p", {})
    st = ready_state()
    journal.record_progress("r1", st, [])
    conn = journal._conn
    writes = conn.total_changes
    for i in range(50):  # a busy minute of statistics lines, the figures not due
        st.gen_throughput.append(SeriesPoint(ts=f"2026-11-29 08:15:{i:02d}", value=3000.0 + i))
        journal.record_progress("r1", st, [])
    assert conn.total_changes == writes
    assert journal.get("r1").peak_gen_throughput == 3010.0  # type: ignore[union-attr]
    journal.record_progress("r1", st, [low_headroom_finding()])  # a finding: at once
    assert conn.total_changes == writes + 1
    rec = journal.get("r1")
    assert rec is not None and rec.findings and rec.peak_gen_throughput == 3010.0  # figures still not due
    journal.figures_interval_s = 0.0
    journal.record_progress("r1", st, [low_headroom_finding()])
    assert conn.total_changes == writes + 2 and journal.get("r1").peak_gen_throughput == 3049.0  # type: ignore[union-attr]


def test_peak_survives_the_state_window_dropping_it(journal: Journal) -> None:
    journal.record_start(run_info("r1"), "p", {})
    journal.figures_interval_s = 0.0
    journal.record_progress("r1", ready_state(throughput=(100.0, 5000.0)), [])
    journal.record_progress("r1", ready_state(throughput=(200.0, 300.0)), [])
    rec = journal.get("r1")
    assert rec is not None and rec.peak_gen_throughput == 5000.0 and rec.median_gen_throughput == 250.0


def test_the_outcome_never_goes_back(journal: Journal) -> None:
    journal.record_start(run_info("r1"), "p", {})
    journal.record_progress("r1", ready_state(), [])
    st = ready_state()
    st.phase = "warmup"  # a stale snapshot arriving late
    journal.record_progress("r1", st, [])
    assert journal.get("r1").outcome == "ready"  # type: ignore[union-attr]
    journal.record_end("r1", "stopped", None, [])
    journal.record_progress("r1", crashed_state(), [])
    assert journal.get("r1").outcome == "stopped"  # type: ignore[union-attr]


def test_record_start_twice_keeps_what_was_learnt(journal: Journal) -> None:
    journal.record_start(run_info("r1"), "p", {"tp": 8})
    journal.record_progress("r1", ready_state(), [])
    journal.record_start(run_info("r1"), "p", {"tp": 8})
    rec = journal.get("r1")
    assert rec is not None and rec.outcome == "ready" and rec.max_total_num_tokens == 174617


def test_ids_match_by_prefix_and_ambiguity_is_an_error(journal: Journal) -> None:
    for rid in ("20261129-0800-aa", "20261129-0800-ab", "20261129-0900-cc", "a_b%c"):
        journal.record_start(run_info(rid), "p", {})
    assert journal.get("20261129-09").id == "20261129-0900-cc"  # type: ignore[union-attr]
    assert journal.get("20261129-0800-ab").id == "20261129-0800-ab"  # type: ignore[union-attr]
    with pytest.raises(AmbiguousRunId) as exc:
        journal.get("20261129-0800")
    assert "20261129-0800-aa" in str(exc.value) and exc.value.exit_code == 2
    assert journal.get("nope") is None
    assert journal.get("a_") is not None and journal.get("a%") is None  # LIKE wildcards are literal


def test_list_and_running_runs(journal: Journal) -> None:
    journal.record_start(run_info("old", started_at="2026-11-28T10:00:00+00:00"), "kimi", {})
    journal.record_start(run_info("new", started_at="2026-11-29T10:00:00+00:00"), "kimi", {})
    journal.record_start(run_info("other", started_at="2026-11-29T11:00:00+00:00", profile="demo"), "demo", {})
    journal.record_end("old", "stopped", None, [])
    assert [r.id for r in journal.list_runs()] == ["other", "new", "old"]
    assert [r.id for r in journal.list_runs("kimi")] == ["new", "old"]
    assert [r.id for r in journal.list_runs(limit=1)] == ["other"]
    assert [r.id for r in journal.running_runs("kimi")] == ["new"]
    assert {r.id for r in journal.running_runs(None)} == {"new", "other"}


def test_complete_from_state_closes_an_unwatched_crash_with_log_times(journal: Journal) -> None:
    journal.record_start(run_info("r1"), "kimi", FLAGS_093)
    st = crashed_state()
    st.last_ts = "2026-11-29 08:20:00"
    journal.complete_from_state("r1", st, [low_headroom_finding()], "crashed")
    rec = journal.get("r1")
    assert rec is not None and rec.outcome == "crashed" and rec.crash_kind == "cuda_oom"
    assert rec.ended_at is not None and rec.ended_at.endswith("+00:00")
    assert rec.time_to_ready_s == pytest.approx(12 * 60 + 36)  # 08:00:05 -> 08:12:41 in the log
    assert journal.running_runs("kimi") == []


def test_unknown_runs_and_outcomes_are_refused(journal: Journal) -> None:
    with pytest.raises(JournalError):
        journal.record_end("ghost", "stopped", None, [])
    journal.record_start(run_info("r1"), "p", {})
    with pytest.raises(ValueError):
        journal.record_end("r1", "exploded", None, [])


def test_unknown_values_stay_null(journal: Journal) -> None:
    journal.record_start(run_info("r1"), "p", {})
    rec = journal.get("r1")
    assert rec is not None
    assert rec.min_headroom_gb is None and rec.max_total_num_tokens is None and rec.peak_gen_throughput is None
    assert rec.time_to_ready_s is None and rec.crash_kind is None


def test_a_long_series_is_downsampled_to_200_points(journal: Journal) -> None:
    st = ready_state(throughput=())
    for i in range(4000):
        st.gen_throughput.append(SeriesPoint(ts=f"2026-11-29 {8 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}",
                                             value=float(i % 100)))
    journal.record_start(run_info("r1"), "p", {})
    journal.record_progress("r1", st, [])
    rec = journal.get("r1")
    assert rec is not None and len(rec.gen_throughput_series) == 60  # while it runs: a bounded row
    journal.record_end("r1", "stopped", st, [])
    rec = journal.get("r1")
    assert rec is not None and len(rec.gen_throughput_series) == 200
    xs = [p[0] for p in rec.gen_throughput_series]
    assert xs == sorted(xs) and xs[-1] > 3900
    assert rec.peak_gen_throughput == 99.0


def test_downsample_keeps_short_series_and_means() -> None:
    assert downsample([(0.0, 1.0), (1.0, 2.0)]) == [(0.0, 1.0), (1.0, 2.0)]
    out = downsample([(float(i), float(i)) for i in range(10)], limit=5)
    assert out == [(0.5, 0.5), (2.5, 2.5), (4.5, 4.5), (6.5, 6.5), (8.5, 8.5)]


def test_the_default_path_is_in_the_user_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Journal.open() as j:
        assert j.path == tmp_path / "xdg" / "cockpit" / "journal.sqlite3"
    assert (tmp_path / "xdg" / "cockpit" / "journal.sqlite3").is_file()
    conn = sqlite3.connect(tmp_path / "xdg" / "cockpit" / "journal.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_journal_can_be_read_from_another_thread(journal: Journal) -> None:
    import threading

    journal.record_start(run_info("r1"), "p", {})
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(journal.list_runs()))
    t.start()
    t.join()
    assert len(got[0]) == 1  # type: ignore[arg-type]


def test_time_to_ready_is_wall_clock_less_the_logs_lag(journal: Journal) -> None:
    from datetime import UTC, datetime, timedelta

    started = datetime.now(UTC) - timedelta(seconds=100)
    st = ready_state()
    t0 = datetime(2026, 1, 1, 12, 0, 0)
    for rm in st.ranks.values():
        rm.timeline = {"init": t0.isoformat(sep=" "), "ready": (t0 + timedelta(seconds=80)).isoformat(sep=" ")}
    st.last_ts = (t0 + timedelta(seconds=85)).isoformat(sep=" ")  # ready was written 5 s before the newest line
    journal.record_start(run_info("r1", started_at=started.isoformat()), "p", {})
    journal.record_progress("r1", st, [])
    rec = journal.get("r1")
    # 100 s since launch, ready 5 s ago: ~95 s (the log alone says 80: it misses the interpreter's start)
    assert rec is not None and rec.time_to_ready_s == pytest.approx(95, abs=3)
    st.last_ts = (t0 + timedelta(seconds=3000)).isoformat(sep=" ")
    journal.record_progress("r1", st, [])
    assert journal.get("r1").time_to_ready_s == pytest.approx(95, abs=3)  # type: ignore[union-attr]  # measured once

    # a cockpit attaching long after an idle server became ready: the stale lag is not trusted
    journal.record_start(run_info("r2", started_at=(started - timedelta(hours=2)).isoformat()), "p", {})
    st.last_ts = (t0 + timedelta(seconds=85)).isoformat(sep=" ")
    journal.record_progress("r2", st, [])
    assert journal.get("r2").time_to_ready_s == pytest.approx(80)  # type: ignore[union-attr]


def test_a_readonly_journal_creates_nothing_and_refuses_writes(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "journal.sqlite3"
    with Journal.open(missing, readonly=True) as j:
        assert j.list_runs() == [] and j.get("x") is None and j.running_runs("p") == []
    assert not missing.parent.exists()

    path = tmp_path / "journal.sqlite3"
    writer = Journal.open(path)
    writer.record_start(run_info("r1"), "p", {"tp": 8})
    with Journal.open(path, readonly=True) as reader:
        assert [r.id for r in reader.list_runs()] == ["r1"]
        writer.record_progress("r1", ready_state(), [])  # the writer carries on while a reader reads
        assert reader.get("r1").outcome == "ready"  # type: ignore[union-attr]
        with pytest.raises(JournalError):
            reader.record_start(run_info("r2"), "p", {})
    writer.close()
