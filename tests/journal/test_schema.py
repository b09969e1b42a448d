"""Schema versions: older journals move forward, a newer one is refused and left byte-for-byte alone."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.journal import SCHEMA_VERSION, Journal, JournalError, JournalTooNew
from cockpit.journal.schema import MIGRATIONS

from .helpers import run_info


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_an_empty_v0_file_is_migrated_to_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    sqlite3.connect(path).close()  # a zero-length file: SQLite's "version 0"
    assert _version(path) == 0
    with Journal.open(path) as j:
        j.record_start(run_info("r1"), "p", {"tp": 8})
    assert _version(path) == SCHEMA_VERSION == 3


def test_a_v1_journal_with_runs_moves_forward_and_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with Journal.open(path) as j:
        j.record_start(run_info("r1"), "kimi", {"mem-fraction-static": 0.88})

    def next_migration(conn: sqlite3.Connection) -> None:  # what a future Cockpit's migration looks like
        conn.execute("ALTER TABLE runs ADD COLUMN operator_note TEXT")

    with Journal.open(path, migrations=(*MIGRATIONS, next_migration)) as j:
        rec = j.get("r1")
        assert rec is not None and rec.flags == {"mem-fraction-static": 0.88}
    assert _version(path) == SCHEMA_VERSION + 1
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT operator_note FROM runs WHERE id='r1'").fetchone() == (None,)
    conn.close()


def test_a_failing_migration_leaves_the_old_version_intact(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with Journal.open(path) as j:
        j.record_start(run_info("r1"), "kimi", {})

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN half_done TEXT")
        raise RuntimeError("power cut halfway")

    with pytest.raises(RuntimeError):
        Journal.open(path, migrations=(*MIGRATIONS, broken))
    assert _version(path) == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    conn.close()
    assert "half_done" not in cols
    with Journal.open(path) as j:
        assert j.get("r1") is not None


def test_a_journal_from_a_newer_cockpit_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with Journal.open(path) as j:
        j.record_start(run_info("r1"), "kimi", {})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")  # fold the WAL in, so the file alone is the journal
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.close()
    before = _digest(path)
    with pytest.raises(JournalTooNew) as exc:
        Journal.open(path)
    assert f"v{SCHEMA_VERSION + 3}" in str(exc.value) and "newer Cockpit" in str(exc.value)
    assert _digest(path) == before
    assert _version(path) == SCHEMA_VERSION + 3


def test_the_cli_reports_a_newer_journal_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "xdg"
    path = data / "cockpit" / "journal.sqlite3"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, future_column BLOB)")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = _digest(path)
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    out = subprocess.run([sys.executable, "-m", "cockpit", "runs"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 1, out
    assert out.stderr.startswith("cockpit: error: journal ") and "newer Cockpit" in out.stderr
    assert "Traceback" not in out.stderr
    assert _digest(path) == before


def test_a_file_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    path.write_bytes(b"this is a shopping list, not a database\n" * 200)
    before = _digest(path)
    with pytest.raises(JournalError) as exc:
        Journal.open(path)
    assert "not a Cockpit journal" in str(exc.value)
    assert _digest(path) == before


def test_a_v1_journal_gains_the_bench_and_tune_columns(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with Journal.open(path, migrations=MIGRATIONS[:1]) as j:
        j.record_start(run_info("r1"), "kimi", {"mem-fraction-static": 0.88})
    assert _version(path) == 1
    with Journal.open(path) as j:
        rec = j.get("r1")
        assert rec is not None and rec.bench is None and rec.tune_session is None
        j.record_bench("r1", {"output_tok_s": 1234.5, "ttft_ms": {"p50": 80.0, "p90": 90.0, "p99": 99.0}})
        j.tag_tune_session("r1", "tune-1")
        rec = j.get("r1")
        assert rec is not None and rec.bench is not None and rec.bench["output_tok_s"] == 1234.5
        assert rec.tune_session == "tune-1"
        assert [r.id for r in j.tune_runs("tune-1")] == ["r1"]
    assert _version(path) == SCHEMA_VERSION  # and on to the newest (v3: the debug column)
