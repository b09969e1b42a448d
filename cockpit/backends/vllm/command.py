"""The vLLM command builder: profile (+ one-run overrides) -> `vllm serve MODEL …` argv, never a
shell string.

The profile's `server.model` is the `serve MODEL` positional; every other key goes through the
version's flag table, so a profile vLLM would refuse (an unknown, ambiguous, renamed or mistyped
flag) is refused here first with the profile file and key named. Flags come out in their
canonical spelling (`tp: 2` -> `--tensor-parallel-size 2`).
"""

from __future__ import annotations

from typing import Any

from cockpit.backends.base import FlagError
from cockpit.backends.vllm.flags import (
    FlagSpec,
    canonical,
    flag_table,
    parse_serve_args,
    resolve_version,
    value_to_argv,
)
from cockpit.core.findings import FlagChange
from cockpit.core.profile import Profile, normalise_flag_name

_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a text value", "int_list": "a list of integers",
               "json": "a JSON value", "bytes": "a byte count (e.g. 20G)", "len": "a token count (e.g. 32k)"}


def _where(profile: Profile | None, key: str, origin: str) -> str:
    if origin == "override":
        return f"--set {key}"
    src = (profile.source if profile is not None else None) or (profile.name if profile is not None else "profile")
    return f"{src}: server.{key}"


def _check_value(spec: FlagSpec, value: Any, where: str, version: str) -> Any:
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise FlagError(spec.name, f"{where}: {spec.name} is an on/off flag; use true or false, not {value!r}")
        return value
    if isinstance(value, bool):
        raise FlagError(spec.name, f"{where}: {spec.name} takes {_TYPE_WORDS.get(spec.type, spec.type)}, not {value!r}")
    if isinstance(value, list) and spec.type != "int_list":
        raise FlagError(spec.name, f"{where}: {spec.name} takes one value, not a list")
    try:
        parsed = parse_serve_args(value_to_argv(spec, value), version)
    except FlagError as exc:
        raise FlagError(spec.name, f"{where}: {exc}") from None
    return parsed.get(spec.dest)


def effective_flags(
    profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None
) -> dict[str, tuple[FlagSpec, Any]]:
    """dest -> (spec, typed value) for the profile's flags with the overrides applied (model included)."""
    v = resolve_version(version or profile.version)
    out: dict[str, tuple[FlagSpec, Any]] = {}
    sources = [("profile", k, val) for k, val in profile.server.items()]
    sources += [("override", k, val) for k, val in (overrides or {}).items()]
    for origin, key, value in sources:
        where = _where(profile, key, origin)
        try:
            spec = canonical(key, v)
        except FlagError as exc:
            raise FlagError(exc.flag or key, f"{where}: {exc}") from None
        out[spec.dest] = (spec, _check_value(spec, value, where, v))
    return out


def launcher(profile: Profile) -> list[str]:
    """What starts the server: `profile.program`, or `vllm serve`."""
    if profile.program:
        return list(profile.program)
    return ["vllm", "serve"]


def build_argv(profile: Profile, overrides: dict[str, Any] | None = None, *, version: str | None = None) -> list[str]:
    """`vllm serve MODEL --flag value …` (a list; quote each item if it must cross a shell)."""
    flags = effective_flags(profile, overrides, version=version)
    model = flags.pop("model", None)
    if model is None or not model[1]:
        src = profile.source or profile.name
        raise FlagError("--model", f"{src}: server.model is required (vllm serve MODEL)")
    argv = [*launcher(profile), str(model[1])]
    for spec, value in flags.values():
        argv += value_to_argv(spec, value)
    return argv


def build_node_argv(
    profile: Profile, node_rank: int, dist_init_addr: str | None = None,
    overrides: dict[str, Any] | None = None, version: str | None = None,
) -> list[str]:
    """One node of a multi-node run (0.11.1+ `--nnodes/--node-rank/--master-addr/--master-port`)."""
    v = resolve_version(version or profile.version)
    nnodes = len(profile.hosts)
    extra: dict[str, Any] = dict(overrides or {})
    extra.update({"nnodes": nnodes, "node-rank": node_rank})
    if node_rank > 0:
        extra["headless"] = True  # only node 0 serves the API
    if dist_init_addr is not None:
        host, _, port = dist_init_addr.rpartition(":")
        extra["master-addr"] = host or dist_init_addr
        if port.isdigit():
            extra["master-port"] = int(port)
    return build_argv(profile, extra, version=v)


def flag_diff(profile: Profile, flags_as_launched: dict[str, Any], *, version: str | None = None) -> list[FlagChange]:
    """What differs between the profile's flags and the flags a run was launched with."""
    v = resolve_version(version or profile.version)
    table = flag_table(v)

    def by_dest(flags: dict[str, Any]) -> dict[str, tuple[str, Any]]:
        out: dict[str, tuple[str, Any]] = {}
        for k, val in flags.items():
            try:
                spec = canonical(k, v)
                out[spec.dest] = (spec.name, val)
            except FlagError:
                name = "--" + normalise_flag_name(k)
                out[name.lstrip("-").replace("-", "_")] = (name, val)
        return out

    before = by_dest(dict(profile.server))
    after = by_dest(flags_as_launched)
    changes: list[FlagChange] = []
    for dest in list(before) + [d for d in after if d not in before]:
        name = (after.get(dest) or before[dest])[0]
        old = before.get(dest, (name, None))[1]
        new = after.get(dest, (name, None))[1]
        spec = table.get(dest)
        if spec is not None and spec.type == "bool":
            old, new = (bool(old) if old is not None else None), (bool(new) if new is not None else None)
        if old != new and not (_num(old) is not None and _num(old) == _num(new)):
            changes.append(FlagChange(flag=name, from_value=old, to_value=new))
    return changes


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`["gpu-memory-utilization=0.9", "enforce-eager"]` -> {"gpu-memory-utilization": 0.9, "enforce-eager": True}.

    Values are typed as a YAML profile would type them; the flag table checks them later.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = normalise_flag_name(key.strip())
        if not key or not key[0].isalpha() or any(not (ch.isalnum() or ch == "-") for ch in key):
            raise FlagError(item, f"--set {item!r}: expected FLAG=VALUE, e.g. gpu-memory-utilization=0.9")
        if not sep:
            out[key] = True
            continue
        if value.startswith("-") and _num(value) is None:
            raise FlagError(key, f"--set {item!r}: a value must not start with '-' (it would read as another flag)")
        parts = value.split(",")
        out[key] = [_scalar(p) for p in parts] if len(parts) > 1 and all(_num(p) is not None for p in parts) else _scalar(value)
    return out
