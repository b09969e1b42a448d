"""The face's light half: what reading a log costs and nothing more — the findings, the run's state
and its reducer, the crash story, the engines' registry — for a command whose start-up is measured.

`cockpit diagnose` (and `commands/_render.py`, which it shows its state with) import the domain from
here: every module below is one `cockpit diagnose` of an SGLang log loads anyway, no third-party
package and no `pathlib` (tests/test_startup_imports.py holds the list). `cockpit.face` offers these
same names beside the heavy ones (the Supervisor, the journal, profiles, SSH, HTTP: ~0.7 s of
imports); tests/test_layering.py holds the two in step.
"""

from __future__ import annotations

from cockpit.backends import (
    DEFAULT_BACKEND,
    backend_names,
    detect_backend,
    engine_name,
    engine_names,
    engine_words,
    flag_labels,
    get_backend,
    load_all_secret_flags,
    words_of,
)
from cockpit.backends.base import HostFacts
from cockpit.backends.foreign import foreign_lines, refusal
from cockpit.core.crashstory import SIGKILL_SENDERS, signal_words
from cockpit.core.findings import (
    Finding,
    FlagChange,
    exit_code_for,
    predicted_phrases,
    sort_findings,
    value_text,
)
from cockpit.core.numbers import plural
from cockpit.core.overrides import normalise_flag_name
from cockpit.core.ranks import rank_sort_key
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.sanitize import clean_text, has_control
from cockpit.core.secrets import is_secret_name, mask_mapping, mask_value, without_masked
from cockpit.core.state import (
    ENGINE_WATCHDOG,
    HOST_CACHE_SHORT,
    HOST_CACHE_SMALL,
    KILLED_BY_SIGNAL,
    SERIES_MAX_POINTS,
    Crash,
    RankMemory,
    RunState,
    SeriesPoint,
)
from cockpit.errors import BadInput, CockpitError, close_words
