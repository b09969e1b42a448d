"""SQLite history of runs: what was launched with which flags, and how it went."""

from cockpit.journal.journal import (
    OUTCOMES,
    AmbiguousRunId,
    Journal,
    RunRecord,
    calibration_runs,
    default_path,
    downsample,
)
from cockpit.journal.schema import SCHEMA_VERSION, JournalError, JournalTooNew

__all__ = [
    "OUTCOMES",
    "SCHEMA_VERSION",
    "AmbiguousRunId",
    "Journal",
    "JournalError",
    "JournalTooNew",
    "RunRecord",
    "calibration_runs",
    "default_path",
    "downsample",
]
