"""The run journal: one SQLite row per run, written as the run progresses.

The supervisor calls `record_start` when it launches, `record_progress` about once a second
(cheap: a write only happens when something the journal keeps has changed), and `record_end`
when the run stops or crashes. A cockpit killed mid-run therefore loses at most the last second;
a run that crashed while nobody watched is completed from its log on the next attach
(`complete_from_state`).

SQLite in WAL mode with a busy timeout: several cockpits (a TUI, `cockpit up`, `cockpit runs`) may
open the same journal at once. Each write is one short IMMEDIATE transaction. On a network
filesystem (NFS, CIFS/SMB, Lustre, GPFS…: cockpit/journal/fs.py) WAL is unsafe: there the journal
uses a rollback journal (`journal_mode=DELETE`) and `Journal.note` says so.

Light on the jump host: what an operator looks up (phase, crash, findings, headroom, the pool, the
outcome, a bench) is written when it changes; the running figures (throughput peak and median,
token usage, the throughput series) at most every FIGURES_INTERVAL_S, the series in at most
PROGRESS_SERIES_POINTS points (the full SERIES_POINTS at the run's end). A steady run's dashboard
then writes a bounded amount an hour (bench/journal_writes.py, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.core.sanitize import clean_text
from cockpit.core.secrets import mask_deep, mask_mapping, mask_text
from cockpit.errors import BadInput, CockpitError
from cockpit.journal.fs import MOUNTINFO, network_fs
from cockpit.journal.schema import (
    MIGRATIONS,
    JournalError,
    JournalTooNew,
    Migration,
    is_read_only,
    migrate,
    read_version,
    ro_uri,
)
from cockpit.locations import data_dir

if TYPE_CHECKING:
    from cockpit.core.findings import Finding
    from cockpit.core.state import RunState
    from cockpit.supervisor.api import RunInfo

log = logging.getLogger(__name__)

OUTCOMES: tuple[str, ...] = ("running", "ready", "stopped", "crashed")
# Outcomes of a run that is over; `running` and `ready` describe a live server.
FINAL_OUTCOMES: tuple[str, ...] = ("stopped", "crashed")
SERIES_POINTS = 200  # gen-throughput points kept per run: enough for a plot, small enough for a row
PROGRESS_SERIES_POINTS = 60  # while the run goes on (rewritten every FIGURES_INTERVAL_S): ~1 KB
FIGURES_INTERVAL_S = 30.0  # the running figures are written at most this often
# the columns that only move with the running figures (the rest are what an operator looks up)
FIGURE_COLUMNS = ("peak_gen_throughput", "median_gen_throughput", "peak_token_usage", "gen_throughput_series")
BUSY_TIMEOUT_MS = 10_000
JOURNAL_FILE = "journal.sqlite3"


class AmbiguousRunId(BadInput):
    pass


def default_path() -> Path:
    return data_dir() / JOURNAL_FILE


def _make_private(path: Path) -> None:
    """The journal holds every run's flags and crash lines: readable by its owner only (0600).
    SQLite gives its -wal and -shm files the database file's mode. An older 0644 journal is
    tightened the first time a writer opens it."""
    import os

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for extra in ("-wal", "-shm"):
        side = path.with_name(path.name + extra)
        try:
            if side.stat().st_mode & 0o077 and side.stat().st_uid == os.getuid():
                side.chmod(0o600)
        except OSError:
            pass


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _parse_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _parse_log_ts(text: str | None) -> datetime | None:
    """SGLang's `[2026-02-24 11:55:02 TP0]` timestamp text (host local time, no zone)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.strip()[:19])  # fast, and naive: 19 characters hold no zone
    except ValueError:
        dt = _parse_iso(text)
        return dt.replace(tzinfo=None) if dt is not None else None


@dataclass(frozen=True)
class RunRecord:
    """One run as the journal knows it. None means unknown (never 0)."""

    id: str
    profile: str
    started_at: str
    outcome: str  # one of OUTCOMES
    hosts: tuple[str, ...] = ()
    backend: str | None = None
    backend_version: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    run_dir: str | None = None
    log_path: str | None = None
    pid: int | None = None
    ended_at: str | None = None
    updated_at: str | None = None
    phase: str | None = None
    crash_kind: str | None = None
    crash_phase: str | None = None
    crash_rank: str | None = None
    crash_message: str | None = None
    decisive_lines: tuple[str, ...] = ()
    time_to_ready_s: float | None = None
    headroom: dict[str, float | None] = field(default_factory=dict)  # rank -> GiB free after capture
    min_headroom_gb: float | None = None
    max_total_num_tokens: int | None = None
    peak_gen_throughput: float | None = None
    median_gen_throughput: float | None = None
    peak_token_usage: float | None = None
    gen_throughput_series: tuple[tuple[float, float], ...] = ()  # (seconds since first point, tok/s)
    findings: tuple[dict[str, Any], ...] = ()  # Finding.to_json() as recorded
    bench: dict[str, Any] | None = None  # the latest `cockpit bench` result on this run
    tune_session: str | None = None  # the `cockpit tune` session that launched it
    debug: dict[str, Any] | None = None  # a debug relaunch: {"env", "flags"} it added

    @property
    def finished(self) -> bool:
        return self.ended_at is not None

    @property
    def duration_s(self) -> float | None:
        start = _parse_iso(self.started_at)
        end = _parse_iso(self.ended_at) if self.ended_at else None
        if start is None or end is None:
            return None
        return max(0.0, (end - start).total_seconds())

    def to_json(self, include_series: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "profile": self.profile,
            "hosts": list(self.hosts),
            "backend": self.backend,
            "backend_version": self.backend_version,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "phase": self.phase,
            "crash_kind": self.crash_kind,
            "crash_phase": self.crash_phase,
            "crash_rank": self.crash_rank,
            "crash_message": self.crash_message,
            "decisive_lines": list(self.decisive_lines),
            "flags": dict(self.flags),
            "time_to_ready_s": self.time_to_ready_s,
            "headroom": dict(self.headroom),
            "min_headroom_gb": self.min_headroom_gb,
            "max_total_num_tokens": self.max_total_num_tokens,
            "peak_gen_throughput": self.peak_gen_throughput,
            "median_gen_throughput": self.median_gen_throughput,
            "peak_token_usage": self.peak_token_usage,
            "findings": [dict(f) for f in self.findings],
            "run_dir": self.run_dir,
            "log_path": self.log_path,
            "pid": self.pid,
            "updated_at": self.updated_at,
            "bench": self.bench,
            "tune_session": self.tune_session,
            "debug": self.debug,
        }
        if include_series:
            out["gen_throughput_series"] = [list(p) for p in self.gen_throughput_series]
        return out


def downsample(points: Sequence[tuple[float, float]], limit: int = SERIES_POINTS) -> list[tuple[float, float]]:
    """At most `limit` points: equal-width buckets over the point index, each the bucket's mean
    value at its mean time, so the curve's shape survives (the peak is stored separately)."""
    n = len(points)
    if n <= limit:
        return [(round(t, 3), round(v, 3)) for t, v in points]
    out: list[tuple[float, float]] = []
    for b in range(limit):
        lo = b * n // limit
        hi = max(lo + 1, (b + 1) * n // limit)
        chunk = points[lo:hi]
        out.append(
            (round(sum(p[0] for p in chunk) / len(chunk), 3), round(sum(p[1] for p in chunk) / len(chunk), 3))
        )
    return out


def _gen_series(state: RunState, limit: int = SERIES_POINTS) -> list[tuple[float, float]]:
    """The state's gen-throughput points, downsampled to `limit`, as (seconds since the first
    point, tok/s): each bucket's mean value at its middle point's time.

    Only the timestamps of kept points are parsed: this runs on every progress call. A timestamp
    that does not parse falls back to the point's index."""
    pts = list(state.gen_throughput)
    n = len(pts)
    if n == 0:
        return []
    first = _parse_log_ts(pts[0].ts)

    def x_of(i: int) -> float:
        ts = _parse_log_ts(pts[i].ts)
        return (ts - first).total_seconds() if (ts is not None and first is not None) else float(i)

    if n <= limit:
        return [(round(x_of(i), 3), round(float(p.value), 3)) for i, p in enumerate(pts)]
    out: list[tuple[float, float]] = []
    for b in range(limit):
        lo = b * n // limit
        hi = max(lo + 1, (b + 1) * n // limit)
        mean = sum(float(p.value) for p in pts[lo:hi]) / (hi - lo)
        out.append((round(x_of((lo + hi - 1) // 2), 3), round(mean, 3)))
    return out


def _ready_log_ts(state: RunState) -> datetime | None:
    """When the log said ready (the last rank's ready milestone), by the log's own clock."""
    ready = [_parse_log_ts(r.timeline.get("ready")) for r in state.ranks.values()]
    at = max((r for r in ready if r is not None), default=None)
    if at is None and state.phase == "ready":
        at = _parse_log_ts(state.phase_since)
    return at


def _log_time_to_ready(state: RunState) -> float | None:
    """From the first milestone any rank logged to the ready line, by the log's own clock: a
    lower bound (the interpreter's start before the first log line is not in it)."""
    ready_at = _ready_log_ts(state)
    if ready_at is None:
        return None
    stamps = [_parse_log_ts(ts) for r in state.ranks.values() for ts in r.timeline.values()]
    starts = [s for s in stamps if s is not None]
    if not starts:
        return None
    return max(0.0, (ready_at - min(starts)).total_seconds())


# A wall-clock time to ready that exceeds the log's own estimate by more than this is not
# trusted: the log's newest line was old (an idle server logs nothing), so the lag was unknown.
WALL_VS_LOG_SLACK_S = 300.0


def _live_time_to_ready(state: RunState, started_at: str | None) -> float | None:
    """Time to ready measured live: the wall clock since launch, less how long ago (by the log's
    clock: newest line minus the ready line) the ready line was written."""
    if state.phase != "ready" and not state.ready_in_log:
        return None
    start = _parse_iso(started_at)
    if start is None:
        return None
    ready_at = _ready_log_ts(state)
    last = _parse_log_ts(state.last_ts)
    lag = max(0.0, (last - ready_at).total_seconds()) if (ready_at is not None and last is not None) else 0.0
    wall = max(0.0, (datetime.now(UTC) - start).total_seconds() - lag)
    log_estimate = _log_time_to_ready(state)
    if log_estimate is not None and (wall < log_estimate or wall - log_estimate > WALL_VS_LOG_SLACK_S):
        return log_estimate
    return wall


def _state_columns(state: RunState, findings: Iterable[Finding], series_points: int = SERIES_POINTS) -> dict[str, Any]:
    """What the journal keeps from a RunState, column name -> value (JSON already encoded)."""
    crash = state.crash
    headroom = {r.rank: r.avail_after_capture_gb for r in state.ranks.values() if r.avail_after_capture_gb is not None}
    gen = [float(p.value) for p in state.gen_throughput]
    usage = [float(p.value) for p in state.token_usage]
    decisive: list[str] = []
    if crash is not None:
        decisive = [_clean(x) for x in (list(crash.decisive_lines) or [crash.message])]
    return {
        "backend": state.backend,
        "backend_version": state.format,
        "phase": state.phase,
        "crash_kind": _clean(crash.kind) if crash else None,
        "crash_phase": _clean(crash.phase) if crash else None,
        "crash_rank": _clean(crash.rank) if crash else None,
        "crash_message": _clean(crash.message) if crash else None,
        "decisive_lines": json.dumps(decisive),
        "headroom": json.dumps(headroom),
        "min_headroom_gb": state.min_headroom_gb,
        "max_total_num_tokens": state.max_total_num_tokens,
        "peak_gen_throughput": max(gen) if gen else None,
        "median_gen_throughput": statistics.median(gen) if gen else None,
        "peak_token_usage": max(usage) if usage else None,
        "gen_throughput_series": json.dumps(_gen_series(state, series_points)),
        "findings": json.dumps(_clean_json(mask_deep([f.to_json() for f in findings]))),
    }


def _clean(text: Any) -> Any:
    """Log text as the journal keeps and gives it back: no escape sequence survives (a crash
    message is replayed by `runs show` and the history screen for as long as the row lives), and no
    URL's password (a crash line quoting a connector's address)."""
    return clean_text(mask_text(text)) if isinstance(text, str) else text


def _clean_json(obj: Any) -> Any:
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, list | tuple):
        return [_clean_json(x) for x in obj]
    if isinstance(obj, dict):
        return {_clean_json(k): _clean_json(v) for k, v in obj.items()}
    return obj


def _row_to_record(row: sqlite3.Row) -> RunRecord:
    def js(name: str, default: Any) -> Any:
        text = row[name]
        if text is None:
            return default
        try:
            return json.loads(text)
        except ValueError:
            return default

    return RunRecord(
        id=row["id"],
        profile=row["profile"],
        started_at=row["started_at"],
        outcome=row["outcome"],
        hosts=tuple(js("hosts", [])),
        backend=row["backend"],
        backend_version=row["backend_version"],
        flags=mask_mapping(js("flags", {})),
        run_dir=row["run_dir"],
        log_path=row["log_path"],
        pid=row["pid"],
        ended_at=row["ended_at"],
        updated_at=row["updated_at"],
        phase=row["phase"],
        crash_kind=_clean(row["crash_kind"]),
        crash_phase=_clean(row["crash_phase"]),
        crash_rank=_clean(row["crash_rank"]),
        crash_message=_clean(row["crash_message"]),
        decisive_lines=tuple(_clean_json(js("decisive_lines", []))),
        time_to_ready_s=row["time_to_ready_s"],
        headroom=js("headroom", {}),
        min_headroom_gb=row["min_headroom_gb"],
        max_total_num_tokens=row["max_total_num_tokens"],
        peak_gen_throughput=row["peak_gen_throughput"],
        median_gen_throughput=row["median_gen_throughput"],
        peak_token_usage=row["peak_token_usage"],
        gen_throughput_series=tuple((float(p[0]), float(p[1])) for p in js("gen_throughput_series", [])),
        findings=tuple(_clean_json(js("findings", []))),
        # a journal opened read-only before its migration to v2 has neither column
        # masked on read too: a row written before the key was masked on write
        bench=mask_deep(js("bench", None)) if "bench" in row.keys() else None,  # noqa: SIM118 - sqlite3.Row `in` tests values
        tune_session=row["tune_session"] if "tune_session" in row.keys() else None,  # noqa: SIM118
        debug=js("debug", None) if "debug" in row.keys() else None,  # noqa: SIM118
    )


class Journal:
    """The run journal. Thread-safe: one connection guarded by a lock (the supervisor writes from
    its event loop, the TUI reads from a worker thread)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, note: str | None = None):
        self._conn = conn
        self.path = path
        self.note = note  # why the journal is not in WAL mode (a network filesystem), for the operator
        self._lock = threading.Lock()
        # Last values written per run, so a progress call that changes nothing costs no write.
        self._last_written: dict[str, dict[str, Any]] = {}
        self._figures_at: dict[str, float] = {}  # when each run's running figures were last written
        self._figures_written: dict[str, dict[str, Any]] = {}
        self.figures_interval_s = FIGURES_INTERVAL_S

    @property
    def journal_mode(self) -> str:
        rows = self._query("PRAGMA journal_mode")
        return str(rows[0][0]) if rows else "unknown"

    # ---- opening ----
    @classmethod
    def open(
        cls,
        path: Path | None = None,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        readonly: bool = False,
        mountinfo: str | Path | None = None,
    ) -> Journal:
        """Open (creating if needed) the journal at `path` (default: the user data dir).

        `readonly=True` is for readers (`cockpit runs`, the history screen): nothing is created
        or written; a missing journal reads as empty. (An older journal is still migrated first,
        as any cockpit would.) Raises JournalError (one line for the operator) when the file was
        written by a newer Cockpit or is not a journal; such a file is never written to.
        `mountinfo`: the kernel's mount table to read the filesystem type from (a test's own)."""
        path = Path(path) if path is not None else default_path()
        found = read_version(path)  # read-only look first: a newer journal stays untouched
        if found is not None and found > len(migrations):
            raise JournalTooNew(path, found, len(migrations))
        if readonly and (found is None or found == len(migrations)):
            return cls._open_readonly(path, found is not None, migrations, busy_timeout_ms)
        if found is not None and is_read_only(path):
            raise JournalError(f"journal {path} is read-only (its filesystem or directory cannot be written): "
                               "runs are not recorded", hint="`cockpit runs` can still read it; remount it "
                               "read-write or point XDG_DATA_HOME at a writable directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _make_private(path)
        except OSError as exc:
            raise JournalError(f"cannot create the journal {path}: {exc}") from exc
        try:
            conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {path}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            remote = network_fs(path, mountinfo or MOUNTINFO)
            if remote is None:
                # WAL: readers never block the supervisor's writes; NORMAL sync survives a killed
                # process (only a power cut can lose the last commits).
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            else:
                # a rollback journal: POSIX locks only, no shared memory (an older WAL journal
                # is turned back once no other process holds it open); FULL sync, as NFS wants
                conn.execute("PRAGMA journal_mode = DELETE")
                conn.execute("PRAGMA synchronous = FULL")
                log.warning("%s", remote.note)
            migrate(conn, path, migrations)
        except JournalError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise JournalError(f"cannot use journal {path}: {exc}") from exc
        return cls(conn, path, remote.note if remote is not None else None)

    @classmethod
    def _open_readonly(cls, path: Path, exists: bool, migrations: Sequence[Migration], busy_timeout_ms: int) -> Journal:
        try:
            if exists:
                conn = sqlite3.connect(ro_uri(path, immutable=is_read_only(path)), uri=True, isolation_level=None,
                                       timeout=busy_timeout_ms / 1000, check_same_thread=False)
            else:  # nothing recorded yet: an empty journal in memory, so readers need no special case
                conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                migrate(conn, path, migrations)
                conn.execute("PRAGMA query_only = ON")
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {path}: {exc}") from exc
        return cls(conn, path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing ----
    def _write(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
        """One short IMMEDIATE transaction. SQLite failures (locked past the busy timeout, disk
        full, read-only) become JournalError: one type for the supervisor to catch and report."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                cur = self._conn.execute(sql, params)
                self._conn.execute("COMMIT")
                return cur.rowcount
            except sqlite3.Error as exc:
                self._rollback()
                raise JournalError(f"cannot write the journal {self.path}: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection already gave the transaction up

    def record_start(self, run: RunInfo, profile_name: str, flags: dict[str, Any]) -> None:
        """A run was launched (or is attached to for the first time). Idempotent: recording the
        same run again refreshes where it runs but keeps what was learnt since."""
        self._write(
            """
            INSERT INTO runs (id, profile, hosts, backend_version, flags, run_dir, log_path, pid,
                              started_at, updated_at, outcome)
            VALUES (:id, :profile, :hosts, :version, :flags, :run_dir, :log_path, :pid,
                    :started_at, :now, 'running')
            ON CONFLICT (id) DO UPDATE SET
                hosts = excluded.hosts, run_dir = excluded.run_dir, log_path = excluded.log_path,
                pid = excluded.pid, updated_at = excluded.updated_at,
                backend_version = coalesce(runs.backend_version, excluded.backend_version)
            """,
            {
                "id": run.id,
                "profile": profile_name,
                "hosts": json.dumps(list(run.hosts)),
                "version": run.version,
                "flags": json.dumps(mask_mapping(flags), default=str),
                "run_dir": run.run_dir,
                "log_path": run.log_path,
                "pid": run.pid,
                "started_at": run.started_at,
                "now": now_iso(),
            },
        )

    def record_progress(self, run_id: str, state: RunState, findings: list[Finding]) -> None:
        """What the run has shown so far. Cheap enough for once a second: a write only when what an
        operator looks up changed (phase, crash, findings, headroom, the pool, the outcome), or
        the running figures moved and `figures_interval_s` has passed since they were last written. The outcome becomes `ready` once the server is ready (and
        `crashed` when the state shows a crash, so a cockpit killed before `record_end` still
        leaves the truth behind; `record_end` adds the end time)."""
        cols = _state_columns(state, findings, PROGRESS_SERIES_POINTS)
        outcome = None
        if state.phase == "ready":
            outcome = "ready"
        elif state.phase == "crashed" or state.crash is not None:
            outcome = "crashed"
        last = self._last_written.get(run_id)
        key = {k: v for k, v in cols.items() if k not in FIGURE_COLUMNS}
        key["_outcome"] = outcome
        now = time.monotonic()
        figures_due = now - self._figures_at.get(run_id, -1e9) >= self.figures_interval_s
        if last is not None and last == key and not figures_due:
            return  # what an operator looks up is unchanged, and the figures are not due
        if last is not None and last == key and all(self._figures_written.get(run_id, {}).get(k) == cols[k]
                                                     for k in FIGURE_COLUMNS):
            return  # nothing moved at all
        if not figures_due:
            cols = {k: v for k, v in cols.items() if k not in FIGURE_COLUMNS}
        else:
            self._figures_at[run_id] = now
            self._figures_written[run_id] = {k: cols[k] for k in FIGURE_COLUMNS}
        self._add_time_to_ready(run_id, cols, state)
        self._update(run_id, cols, outcome=outcome, end=False)
        self._last_written[run_id] = key

    def record_end(self, run_id: str, outcome: str, state: RunState | None, findings: list[Finding]) -> None:
        """The run is over: `stopped` (the operator or a restart ended it) or `crashed`."""
        self._check_outcome(outcome)
        cols = _state_columns(state, findings) if state is not None else {}
        if state is None and findings:
            cols["findings"] = json.dumps(_clean_json(mask_deep([f.to_json() for f in findings])))
        if state is not None:
            self._add_time_to_ready(run_id, cols, state)
        self._update(run_id, cols, outcome=outcome, end=True)
        self._forget(run_id)

    def complete_from_state(self, run_id: str, state: RunState, findings: list[Finding], outcome: str) -> None:
        """Complete a run nobody watched to the end, from its log parsed on the next attach.

        Times come from the log where it has them (its last line is when the run ended), not
        from the clock now. `running`/`ready` leave the run open; `stopped`/`crashed` close it."""
        self._check_outcome(outcome)
        cols = _state_columns(state, findings)
        ttr = _log_time_to_ready(state)
        if ttr is not None:
            cols["time_to_ready_s"] = ttr
        end = outcome in FINAL_OUTCOMES
        ended_at = None
        if end:
            last = _parse_log_ts(state.last_ts)
            # Log time is the server host's local time without a zone; this machine's zone is
            # the best guess there is (hosts and jump hosts usually share one).
            ended_at = last.astimezone(UTC).isoformat(timespec="seconds") if last is not None else None
        self._update(run_id, cols, outcome=outcome, end=end, ended_at=ended_at)
        self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        self._last_written.pop(run_id, None)
        self._figures_at.pop(run_id, None)
        self._figures_written.pop(run_id, None)

    def _add_time_to_ready(self, run_id: str, cols: dict[str, Any], state: RunState) -> None:
        """Measure time to ready once, the first time a live call sees the server ready."""
        if state.phase != "ready" and not state.ready_in_log:
            return
        rows = self._query("SELECT started_at, time_to_ready_s FROM runs WHERE id = ?", (run_id,))
        if not rows or rows[0]["time_to_ready_s"] is not None:
            return
        ttr = _live_time_to_ready(state, rows[0]["started_at"])
        if ttr is not None:
            cols["time_to_ready_s"] = round(ttr, 1)

    @staticmethod
    def _check_outcome(outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")

    def _update(
        self,
        run_id: str,
        cols: dict[str, Any],
        *,
        outcome: str | None,
        end: bool,
        ended_at: str | None = None,
    ) -> None:
        now = now_iso()
        params: dict[str, Any] = dict(cols)
        kept = ("peak_gen_throughput", "peak_token_usage", "time_to_ready_s")
        sets = [f"{name} = :{name}" for name in cols if name not in kept]
        if "backend_version" in cols:  # the log's format word refines RunInfo.version, None never erases it
            sets.remove("backend_version = :backend_version")
            sets.append("backend_version = coalesce(:backend_version, backend_version)")
        if "time_to_ready_s" in cols:  # measured once: the first measurement stands
            sets.append("time_to_ready_s = coalesce(time_to_ready_s, :time_to_ready_s)")
        # The state keeps a bounded window of samples: a peak seen earlier must not be forgotten.
        for name in ("peak_gen_throughput", "peak_token_usage"):
            if name in cols:
                sets.append(f"{name} = max(coalesce({name}, :{name}), coalesce(:{name}, {name}))")
        # Before the end the outcome only moves forward (running -> ready -> crashed), never
        # back from a final one; record_end sets it outright.
        if outcome is not None:
            params["outcome"] = outcome
            if end:
                sets.append("outcome = :outcome")
            else:
                sets.append(
                    "outcome = CASE WHEN outcome IN ('stopped', 'crashed') THEN outcome "
                    "WHEN outcome = 'ready' AND :outcome = 'running' THEN outcome ELSE :outcome END"
                )
        if end:
            params["ended_at"] = ended_at or now
            sets.append("ended_at = coalesce(ended_at, :ended_at)")
        params["updated_at"] = now
        sets.append("updated_at = :updated_at")
        params["id"] = run_id
        n = self._write(f"UPDATE runs SET {', '.join(sets)} WHERE id = :id", params)
        if n == 0:
            raise JournalError(f"run {run_id} is not in the journal (record_start was not called)")

    def record_bench(self, run_id: str, result: dict[str, Any]) -> None:
        """The latest `cockpit bench` result of a run (the `bench --json` shape), secrets masked
        (its flags carry the run's --api-key)."""
        self._write("UPDATE runs SET bench = ?, updated_at = ? WHERE id = ?",
                    (json.dumps(mask_deep(result), default=str), now_iso(), run_id))

    def tag_tune_session(self, run_id: str, session: str) -> None:
        """Mark a run as a step of a `cockpit tune` session."""
        self._write("UPDATE runs SET tune_session = ? WHERE id = ?", (session, run_id))

    def tag_debug(self, run_id: str, settings: dict[str, Any]) -> None:
        """Mark a run as a debug relaunch, with the settings it added."""
        self._write("UPDATE runs SET debug = ? WHERE id = ?", (json.dumps(settings, default=str), run_id))

    def tune_runs(self, session: str) -> list[RunRecord]:
        """The runs of one tuning session, oldest first."""
        rows = self._query("SELECT * FROM runs WHERE tune_session = ? ORDER BY started_at, rowid", (session,))
        return [_row_to_record(r) for r in rows]

    # ---- reading ----
    def _query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except sqlite3.Error as exc:
                raise JournalError(f"cannot read the journal {self.path}: {exc}") from exc

    def get(self, run_id: str) -> RunRecord | None:
        """The run with this id, or the only one whose id starts with it; None when none does.
        Raises AmbiguousRunId (bad input) when the prefix fits several runs."""
        run_id = run_id.strip()
        if not run_id:
            return None
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if rows:
            return _row_to_record(rows[0])
        escaped = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._query(
            "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY started_at DESC LIMIT 11", (escaped + "%",)
        )
        if not rows:
            return None
        if len(rows) > 1:
            shown = ", ".join(r["id"] for r in rows[:10])
            raise AmbiguousRunId(
                f"run id {run_id!r} fits {'more than 10' if len(rows) > 10 else len(rows)} runs: {shown}",
                hint="type more of the id",
            )
        return _row_to_record(rows[0])

    def list_runs(self, profile: str | None = None, limit: int = 200) -> list[RunRecord]:
        """Newest first."""
        if profile is None:
            rows = self._query("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?", (limit,))
        else:
            rows = self._query(
                "SELECT * FROM runs WHERE profile = ? ORDER BY started_at DESC, rowid DESC LIMIT ?", (profile, limit)
            )
        return [_row_to_record(r) for r in rows]

    def running_runs(self, profile: str | None = None) -> list[RunRecord]:
        """Runs the journal has not seen end (no `record_end` yet), newest first: the ones to
        attach to, or to complete from their log."""
        sql = "SELECT * FROM runs WHERE ended_at IS NULL"
        params: tuple[Any, ...] = ()
        if profile is not None:
            sql += " AND profile = ?"
            params = (profile,)
        return [_row_to_record(r) for r in self._query(sql + " ORDER BY started_at DESC, rowid DESC", params)]

    def integrity_ok(self) -> bool:
        rows = self._query("PRAGMA integrity_check")
        return len(rows) == 1 and rows[0][0] == "ok"


def calibration_runs(profile_name: str | None = None) -> list[RunRecord]:
    """The journal's runs (of one profile, or all) read-only, for the plan's calibration: the CLI's
    gate and the picker's preview read them the same way; an unusable journal calibrates nothing."""
    try:
        j = Journal.open(readonly=True)
    except CockpitError:
        return []
    try:
        return j.list_runs(profile_name)
    finally:
        j.close()
