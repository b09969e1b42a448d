"""The journal's SQLite layout and how an older file is brought forward.

The schema version lives in `PRAGMA user_version` (in the file header, so it can be read without
touching anything else). `MIGRATIONS[i]` takes a journal from version i to i + 1; version 0 is an
empty file, or one written before the journal had versions. Every migration runs in the same
transaction as the `user_version` bump, so a cockpit killed halfway leaves the old version intact
and the next start simply tries again.

A journal written by a newer Cockpit (user_version > SCHEMA_VERSION) is refused before the first
write: it is opened read-only to look at the version, and only then opened for writing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from cockpit.errors import CockpitError

Migration = Callable[[sqlite3.Connection], None]


class JournalError(CockpitError):
    """The journal file cannot be used (newer schema, not a database, unreadable)."""


class JournalTooNew(JournalError):
    def __init__(self, path: Path, found: int, known: int):
        super().__init__(
            f"journal {path} was written by a newer Cockpit (schema v{found}; this Cockpit knows up to "
            f"v{known}); left untouched",
            hint="upgrade cockpit, or point XDG_DATA_HOME at another directory to keep a separate journal",
        )
        self.found = found
        self.known = known


def _v0_to_v1(conn: sqlite3.Connection) -> None:
    # Columns are the operator's words; JSON columns hold lists/dicts exactly as `RunRecord.to_json`
    # gives them back. Unknown values stay NULL (never 0).
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS runs (
            id                     TEXT PRIMARY KEY,
            profile                TEXT NOT NULL,
            hosts                  TEXT NOT NULL DEFAULT '[]',   -- JSON list of host labels
            backend                TEXT,
            backend_version        TEXT,                          -- e.g. "sglang-0.5.9" once the log tells
            flags                  TEXT NOT NULL DEFAULT '{}',   -- JSON: server flags as launched
            run_dir                TEXT,
            log_path               TEXT,
            pid                    INTEGER,
            started_at             TEXT NOT NULL,                 -- ISO-8601 UTC
            ended_at               TEXT,
            updated_at             TEXT,
            outcome                TEXT NOT NULL DEFAULT 'running',
            phase                  TEXT,                          -- the server's last known phase
            crash_kind             TEXT,
            crash_phase            TEXT,
            crash_rank             TEXT,
            crash_message          TEXT,
            decisive_lines         TEXT NOT NULL DEFAULT '[]',   -- JSON list of log lines
            time_to_ready_s        REAL,
            headroom               TEXT NOT NULL DEFAULT '{}',   -- JSON: rank -> GiB free after capture
            min_headroom_gb        REAL,
            max_total_num_tokens   INTEGER,
            peak_gen_throughput    REAL,
            median_gen_throughput  REAL,
            peak_token_usage       REAL,
            gen_throughput_series  TEXT NOT NULL DEFAULT '[]',   -- JSON [[seconds, tok/s], ...] <= 200
            findings               TEXT NOT NULL DEFAULT '[]'    -- JSON list of Finding.to_json()
        )
        """
    )
    conn.execute("CREATE INDEX IF NOT EXISTS runs_by_profile ON runs (profile, started_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_at)")


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    # `cockpit bench` results (the latest on the run, the `bench --json` shape) and the `cockpit tune`
    # session a run was launched by. NULL: never benched / not a tuning step.
    conn.execute("ALTER TABLE runs ADD COLUMN bench TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN tune_session TEXT")
    conn.execute("CREATE INDEX IF NOT EXISTS runs_by_tune_session ON runs (tune_session)")


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    # a debug relaunch (the dashboard's D): JSON {"env": {...}, "flags": {...}} it added; NULL: not one
    conn.execute("ALTER TABLE runs ADD COLUMN debug TEXT")


# Append only; never edit a migration that has shipped.
MIGRATIONS: tuple[Migration, ...] = (_v0_to_v1, _v1_to_v2, _v2_to_v3)
SCHEMA_VERSION = len(MIGRATIONS)


def read_version(path: Path) -> int | None:
    """The file's schema version read through a read-only connection; None when there is no file.

    Read-only so that a journal from a newer Cockpit is never touched, not even by a WAL recovery.
    """
    if not path.exists():
        return None
    try:
        return _read_version(path, immutable=False)
    except sqlite3.DatabaseError as exc:
        if not is_read_only(path):
            raise JournalError(
                f"{path} is not a Cockpit journal ({exc})",
                hint="move it aside; Cockpit starts a new journal in its place",
            ) from exc
        # A WAL journal on a read-only filesystem cannot get its shared-memory file: read it as
        # immutable (nobody can write it there either). A failure now is a real one.
        try:
            return _read_version(path, immutable=True)
        except sqlite3.DatabaseError as exc2:
            raise JournalError(f"journal {path} is on a read-only filesystem and cannot be read ({exc2})") from exc2


def ro_uri(path: Path, immutable: bool) -> str:
    return f"{path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")


def is_read_only(path: Path) -> bool:
    """The journal's filesystem is mounted read-only, or its directory cannot be written."""
    import os

    try:
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(path.parent, os.W_OK)


def _read_version(path: Path, immutable: bool) -> int:
    try:
        conn = sqlite3.connect(ro_uri(path, immutable), uri=True, timeout=10.0)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open journal {path}: {exc}") from exc
    try:
        row = conn.execute("PRAGMA user_version").fetchone()
        # user_version alone does not prove it is a database: touch the schema too.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        conn.close()
    return int(row[0])


def migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the open journal up to `len(migrations)`; returns the version it ended at.

    Each step is its own IMMEDIATE transaction (the write lock is taken before the version is read
    again), so two cockpits starting at once do not both run the same step.
    """
    known = len(migrations)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > known:
                raise JournalTooNew(path, version, known)
            if version == known:
                conn.execute("COMMIT")
                return version
            migrations[version](conn)
            # PRAGMA takes no parameters; the value is our own integer.
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
