"""Values that must not be shown: API keys, tokens, passwords in a profile's env or flags.

A name looks secret when one of its words (split at `-`, `_`, `.`) ends in `token`, `key`,
`secret`, `password` or `passwd` (any case): `HF_TOKEN`, `--api-key`, `OPENAI_API_KEY`, `apikey`,
`db-password`; not `--max-total-tokens` or `--tokenizer-path` (numbers and paths an operator must
see). Its value is replaced by
`MASK` in every display (`status`, `runs`, the TUI) and in the journal. The run directory on the
host keeps the real values (0600 files in a 0700 directory): a restart needs them.

Masking is by name, so it also hides harmless values whose name matches (`--monkey`); an
operator can read them in the profile.

Abbreviations: both engines parse with argparse, which takes any unambiguous prefix of a long
option, so a profile's `api-k:` reaches the server as `--api-key`. A name is therefore also secret
when it is a prefix of a secret flag an engine knows; the backends register their flag tables'
secret names (`register_secret_flags`, from `cockpit.backends.get_backend`), so the rule matches
what the engine would accept as that flag without this module knowing any engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
_SECRET_WORDS = re.compile(r"(?:token|key|secret|password|passwd)(?:[-_.]|\Z)", re.IGNORECASE)


# secret flags the engines know, as "api-key" (no dashes in front, `_` as `-`, lower case)
_SECRET_FLAGS: set[str] = set()


def _bare(name: str) -> str:
    return str(name).lstrip("-").replace("_", "-").lower()


def register_secret_flags(names: Iterable[str]) -> None:
    """An engine's option names: those that read as secret are remembered, so that their
    abbreviations (`api-k`, `api`) are masked too."""
    for n in names:
        if _SECRET_WORDS.search(str(n).lstrip("-")):
            _SECRET_FLAGS.add(_bare(n))


def is_secret_name(name: str) -> bool:
    """`HF_TOKEN`, `--api-key`, `api_key`, `db-password` → True; so is `api-k` once an engine
    with `--api-key` is registered (argparse would read it as that flag)."""
    if _SECRET_WORDS.search(str(name).lstrip("-")):
        return True
    bare = _bare(name)
    return bool(bare) and any(f.startswith(bare) for f in _SECRET_FLAGS)


def mask_value(name: str, value: Any) -> Any:
    return MASK if is_secret_name(name) and value not in (None, "", False) else value


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of flags or env with secret-looking values masked."""
    return {k: mask_value(k, v) for k, v in values.items()}


def mask_deep(value: Any) -> Any:
    """A copy of a JSON-shaped value (a bench result, a tuning step) with every mapping's
    secret-looking entries masked, at any depth."""
    if isinstance(value, Mapping):
        return {k: (MASK if is_secret_name(k) and v not in (None, "", False) and not isinstance(v, (Mapping, list))
                    else mask_deep(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_deep(v) for v in value]
    return value


def without_masked(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags read back from the journal, less the masked ones: relaunching a past run's flags
    must not launch the literal `***`; the profile's own value applies instead."""
    return {k: v for k, v in flags.items() if v != MASK}
