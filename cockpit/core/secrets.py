"""Values that must not be shown: API keys, tokens, passwords in a profile's env or flags.

A name looks secret when one of its words (split at `-`, `_`, `.`) ends in `token`, `key`,
`secret`, `password` or `passwd` (any case): `HF_TOKEN`, `--api-key`, `OPENAI_API_KEY`, `apikey`,
`db-password`; not `--max-total-tokens` or `--tokenizer-path` (numbers and paths an operator must
see). Its value is replaced by
`MASK` in every display (`status`, `runs`, the TUI) and in the journal. The run directory on the
host keeps the real values (0600 files in a 0700 directory): a restart needs them.

Masking is by name, so it also hides harmless values whose name matches (`--monkey`); an
operator can read them in the profile.

Inside values (issue 40): a value whose name is not secret can still hold one: a JSON-valued flag
(vLLM's `--kv-transfer-config` with a Redis URL's password and a cloud key two levels down), a URL
with `user:password@` or a token as its user, a query's `X-Amz-Security-Token=`. `mask_value` masks
those too, at any depth, and JSON text stays JSON (masked inside), so `status --json` still parses.
Every serialiser goes through it (`mask_mapping`, `mask_deep`, `FlagChange.to_json`).

Abbreviations: both engines parse with argparse, which takes any unambiguous prefix of a long
option, so a profile's `api-k:` reaches the server as `--api-key`. A name is therefore also secret
when it is a prefix of a secret flag an engine knows; the backends register their flag tables'
secret names (`register_secret_flags`, from `cockpit.backends.get_backend`), so the rule matches
what the engine would accept as that flag without this module knowing any engine.
"""

from __future__ import annotations

import json
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
    """`value` as it may be shown: MASK when `name` reads as secret; else a copy with what is
    secret inside it masked (`mask_inside`). The one rule every serialiser uses (`status`, `runs`,
    the journal, `bench`/`tune --json`, the TUI)."""
    if is_secret_name(name) and value not in (None, "", False) and not isinstance(value, Mapping):
        return MASK  # a list under a secret name too (several API keys)
    return mask_inside(value)


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of flags or env with secret-looking values masked, at any depth."""
    return {k: mask_value(k, v) for k, v in values.items()}


def mask_deep(value: Any) -> Any:
    """A copy of a JSON-shaped value (a bench result, a tuning step, findings) with every mapping's
    secret-looking entries masked, at any depth (the same rule as `mask_value`)."""
    return mask_inside(value)


# scheme://userinfo@ : the userinfo ends at the last `@` before the host (a password may hold `@`
# percent-encoded only, but operators paste raw ones too); no `/`, `?`, `#` or space inside it
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/?#\s]*)@")
# ?name=value / &name=value in a URL's query: masked when `name` reads as secret (X-Amz-Security-Token)
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#;\s]+)=(?P<val>[^&#;\s]*)")


def _mask_userinfo(m: re.Match[str]) -> str:
    user, colon, _password = m["info"].partition(":")
    # user:password → the user stays (who), the password goes; a user alone is often a token
    # (https://<token>@host), so it goes too
    return f"{m['scheme']}{user}:{MASK}@" if colon else f"{m['scheme']}{MASK}@"


def _mask_query(m: re.Match[str]) -> str:
    return f"{m['lead']}{m['name']}={MASK}" if is_secret_name(m["name"]) and m["val"] else m.group(0)


def mask_text(text: str) -> str:
    """A string with a URL's userinfo and secret-named query values masked; unchanged otherwise."""
    if "://" in text:
        text = _URL_USERINFO.sub(_mask_userinfo, text)
    if "=" in text and ("?" in text or "&" in text or ";" in text):
        text = _QUERY_PARAM.sub(_mask_query, text)
    return text


def mask_inside(value: Any) -> Any:
    """A copy of `value` with what is secret inside it masked, whatever the name it is shown
    under: in a mapping, the entries whose names read as secret (any depth, through lists); in a
    string, a URL's userinfo and secret query values; a string holding a JSON object or array (a
    JSON-valued flag: vLLM's `--kv-transfer-config`) is masked as that JSON and written back
    compact. A value with nothing to mask comes back equal (a string: the same text)."""
    if isinstance(value, Mapping):
        return {k: mask_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_inside(v) for v in value]
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            pass
        else:
            masked = mask_inside(parsed)
            return value if masked == parsed else json.dumps(masked, separators=(",", ":"))
    return mask_text(value)


def holds_mask(value: Any) -> bool:
    """True when `value` was masked, wholly or somewhere inside (a JSON flag with a masked key,
    a URL whose password is MASK)."""
    if isinstance(value, Mapping):
        return any(holds_mask(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_mask(v) for v in value)
    if not isinstance(value, str):
        return False
    if value == MASK or f":{MASK}@" in value or f"//{MASK}@" in value or f"={MASK}" in value:
        return True
    stripped = value.strip()
    if stripped[:1] in ("{", "[") and MASK in stripped:
        try:
            return holds_mask(json.loads(stripped))
        except ValueError:
            return False
    return False


def without_masked(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Flags read back from the journal, less the masked ones: relaunching a past run's flags
    must not launch the literal `***` (nor a JSON flag or URL masked inside); the profile's own
    value applies instead."""
    return {k: v for k, v in flags.items() if not holds_mask(v)}
