"""The face's journal: the past runs and their tables, for `cockpit runs`, whose start-up is measured
(tests/test_startup_imports.py: ~0.1 s, against ~0.7 s through the whole `cockpit.face`).

The journal and its views import no third-party package; `cockpit.face` offers these same names
beside the rest (tests/test_layering.py holds them in step).
"""

from __future__ import annotations

from cockpit.journal import Journal, RunRecord
from cockpit.journal.views import (
    RUN_ROW_HEADER,
    UNKNOWN,
    backend_words,
    compare_rows,
    differing_flags,
    fmt_gb,
    fmt_int,
    fmt_outcome,
    fmt_secs,
    fmt_time,
    fmt_tps,
    run_rows,
    table,
)
