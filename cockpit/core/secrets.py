"""Values that must not be shown: API keys, tokens, passwords in a profile's env or flags.

A name looks secret when it contains `token`, `key`, `secret` or `password` (any case, `-`/`_`
alike): `HF_TOKEN`, `--api-key`, `OPENAI_API_KEY`, `db-password`. Its value is replaced by
`MASK` in every display (`status`, `runs`, the TUI) and in the journal. The run directory on the
host keeps the real values (0600 files in a 0700 directory): a restart needs them.

Masking is by name, so it also hides harmless values whose name matches (`--ssl-keyfile` shows
as hidden); an operator can read them in the profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
_SECRET_WORDS = re.compile(r"token|key|secret|password|passwd", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """`HF_TOKEN`, `--api-key`, `api_key`, `db-password` → True."""
    return bool(_SECRET_WORDS.search(str(name).lstrip("-")))


def mask_value(name: str, value: Any) -> Any:
    return MASK if is_secret_name(name) and value not in (None, "", False) else value


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of flags or env with secret-looking values masked."""
    return {k: mask_value(k, v) for k, v in values.items()}


def without_masked(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags read back from the journal, less the masked ones: relaunching a past run's flags
    must not launch the literal `***`; the profile's own value applies instead."""
    return {k: v for k, v in flags.items() if v != MASK}
