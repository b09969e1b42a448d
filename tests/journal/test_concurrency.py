"""Several processes on one journal: no lost rows, and a SIGKILL mid-write damages nothing."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from cockpit.journal import Journal

WRITER = Path(__file__).with_name("_writer.py")


def _writer(path: Path, prefix: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WRITER), str(path), prefix, str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal.open(path).close()  # created once, so both writers race on rows, not on creation
    procs = [_writer(path, "alpha", 150), _writer(path, "beta", 150)]
    # a reader in this process at the same time
    with Journal.open(path) as reader:
        while any(p.poll() is None for p in procs):
            reader.list_runs(limit=50)
            time.sleep(0.01)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    with Journal.open(path) as j:
        runs = j.list_runs(limit=1000)
        assert len(runs) == 300
        assert {r.profile for r in runs} == {"alpha", "beta"}
        assert all(r.outcome == "stopped" and r.ended_at for r in runs)
        assert j.get("beta-000149").max_total_num_tokens == 1149  # type: ignore[union-attr]
    assert _integrity(path) == "ok"


def test_a_writer_killed_mid_loop_leaves_a_sound_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    proc = _writer(path, "victim", 0)  # writes until killed
    assert proc.stdout is not None
    committed = -1
    deadline = time.monotonic() + 60
    while committed < 40 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert committed >= 40, proc.stderr.read() if proc.stderr else ""
    assert _integrity(path) == "ok"
    with Journal.open(path) as j:
        for i in range(committed + 1):  # every run reported committed is there, complete
            rec = j.get(f"victim-{i:06d}")
            assert rec is not None and rec.outcome == "stopped" and rec.max_total_num_tokens == 1000 + i
        # and the journal still takes writes
        from .helpers import run_info

        j.record_start(run_info("after-kill"), "victim", {})
        assert j.get("after-kill") is not None
    assert _integrity(path) == "ok"


def test_a_journal_locked_too_long_is_one_clear_error(tmp_path: Path) -> None:
    from cockpit.journal import JournalError

    from .helpers import run_info

    path = tmp_path / "journal.sqlite3"
    journal = Journal.open(path, busy_timeout_ms=200)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another cockpit in the middle of a long write
    try:
        start = time.monotonic()
        try:
            journal.record_start(run_info("r1"), "p", {})
            raise AssertionError("the write should have waited, then failed")
        except JournalError as exc:
            assert "locked" in str(exc)
        assert time.monotonic() - start < 5
        assert journal.list_runs() == []  # reads still work while another process writes (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()
    journal.record_start(run_info("r1"), "p", {})  # and the journal recovers once the lock is gone
    assert journal.get("r1") is not None
    journal.close()
