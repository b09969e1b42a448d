"""Redacting text meant to leave the machine (`cockpit report`, pasted into a public issue).

cockpit/core/secrets.py decides which *names* are secret and masks mappings; this module applies
that to what a report holds besides mappings: an argv, log lines, JSON-valued flags. Three layers,
each catching what the others may miss:

1. the **known values**: every secret value of the run's profile and flags (a secret-named flag or
   environment variable, a secret-named key inside a JSON-valued flag at any depth, the password of
   any URL) is collected and replaced wherever it appears, verbatim — in the command, in a log
   line that echoes the server's arguments, in an excerpt;
2. **argv**: the value after a secret-named option (`--api-key X`, `--api-key=X`), and JSON-valued
   arguments parsed and masked deep (`mask_deep`);
3. **text patterns**: URL userinfo (`redis://user:pw@host`), `name=value` / `'name': 'value'` /
   `"name": "value"` pairs whose name reads as secret, and `Bearer` tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cockpit.core.secrets import MASK, is_secret_name, mask_deep

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s:/@'\"]*):(?P<pw>[^\s@/'\"]+)@")
_PAIR = re.compile(
    r"""(?P<q>['"]?)(?P<name>[A-Za-z0-9_.-]+)(?P=q)(?P<sep>\s*[:=]\s*)(?P<vq>['"]?)(?P<value>[^\s'",}]+)(?P=vq)""")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
MIN_SECRET_LEN = 4  # a shorter "secret" (a flag set to `1`) replaced everywhere would mangle the text


def _json_of(value: Any) -> Any:
    if isinstance(value, (Mapping, list)):
        return value
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return None


def secret_values(*sources: Mapping[str, Any] | None) -> set[str]:
    """Every secret value in these mappings (flags, env): secret-named entries, secret-named keys
    at any depth of a JSON-valued entry, and URL passwords anywhere."""
    found: set[str] = set()

    def walk(name: str | None, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(str(k), v)
            return
        if isinstance(value, list):
            for v in value:
                walk(name, v)
            return
        if value is None or isinstance(value, bool):
            return
        text = str(value)
        if name is not None and is_secret_name(name) and text != MASK:
            found.add(text)
        for m in _URL_USERINFO.finditer(text):
            found.add(m["pw"])
        inner = _json_of(value)
        if inner is not None and not isinstance(value, (Mapping, list)):
            walk(name, inner)

    for src in sources:
        for k, v in (src or {}).items():
            walk(str(k), v)
    return {s for s in found if len(s) >= MIN_SECRET_LEN}


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the known secret values and secret-looking pairs, URL passwords and bearer
    tokens masked."""
    for s in sorted(secrets, key=len, reverse=True):  # the longer first: one may contain another
        if s in text:
            text = text.replace(s, MASK)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)

    def pair(m: re.Match[str]) -> str:
        if not is_secret_name(m["name"]) or m["value"] == MASK:
            return m.group(0)
        return f"{m['q']}{m['name']}{m['q']}{m['sep']}{m['vq']}{MASK}{m['vq']}"

    return _PAIR.sub(pair, text)


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """An argv with the value of every secret-named option masked, JSON-valued arguments masked
    deep, and every argument's text redacted (`redact_text`)."""
    known = set(secrets)
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            if is_secret_name(name):
                out.append(f"{name}={MASK}")
                continue
            out.append(f"{name}={_redact_value(value, known)}")
            continue
        if arg.startswith("--") and is_secret_name(arg):
            out.append(arg)
            mask_next = True
            continue
        out.append(_redact_value(arg, known))
    return out


def _redact_value(value: str, secrets: set[str]) -> str:
    inner = _json_of(value)
    if inner is not None:
        value = json.dumps(_mask_urls(mask_deep(inner)), separators=(",", ":"))
    return redact_text(value, secrets)


def _mask_urls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _mask_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_urls(v) for v in value]
    if isinstance(value, str):
        return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", value)
    return value
