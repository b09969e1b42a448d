"""Engine-neutral pieces of the command builders in cockpit/backends/<engine>/command.py.

What is here knows no engine: where a profile value came from, how a `--set FLAG=VALUE` item is
typed, the shape checks every flag value passes before the engine's own parser sees it, and the
comparison of profile flags with launched flags. Each engine passes in what it knows (its flag
resolver and parser, its type words, its example flag). Nothing here may import an engine package
(import-linter enforces it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cockpit.backends.base import FlagError
from cockpit.backends.flagtable import Bound, FlagLike, check_bounds
from cockpit.core.findings import FlagChange
from cockpit.core.numbers import is_number
from cockpit.core.overrides import normalise_flag_name

if TYPE_CHECKING:  # pydantic (~0.2 s): diagnose's start-up loads this module for flags_by_dest
    from cockpit.core.profile import Profile

SpecT = TypeVar("SpecT", bound=FlagLike)


def where(profile: Profile | None, key: str, origin: str) -> str:
    """Where a flag value came from, as an error names it: `--set KEY` or `FILE: server.KEY`."""
    if origin == "override":
        return f"--set {key}"
    src = (profile.source if profile is not None else None) or (profile.name if profile is not None else "profile")
    return f"{src}: server.{key}"


def flag_value(flags: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    """The first of `names` set in `flags` (any spelling: dashes, underscores, leading dashes)."""
    norm = {normalise_flag_name(k): v for k, v in flags.items()}
    for n in names:
        key = normalise_flag_name(n)
        if key in norm:
            return norm[key]
    return default


def flags_by_dest(profile: Profile | None, canonical: Callable[[str, str | None], FlagLike],
                  version: str | None) -> dict[str, Any]:
    """The profile's server flags by the engine's dest, whatever spelling the profile used (`tp: 8`
    → tp_size); a key the engine's table (`canonical`, for `version`) does not know is left out."""
    out: dict[str, Any] = {}
    for k, v in (profile.server if profile is not None else {}).items():
        try:
            out[canonical(k, version).dest] = v
        except FlagError:
            continue
    return out


def check_value(
    spec: SpecT,
    value: Any,
    where: str,
    *,
    type_words: Mapping[str, str],
    to_argv: Callable[[SpecT, Any], list[str]],
    parse: Callable[[list[str]], dict[str, Any]],
    bounds: Mapping[str, Bound] | None = None,
) -> Any:
    """The value as the engine would parse it; FlagError naming the profile key otherwise.

    `parse` is the engine's own argv parser for the version in use, so the wording of a refusal
    is the engine's. `bounds`: the engine's numeric bounds by dest (a number outside them, NaN or
    infinite is refused here, before the engine would die of it).
    """
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise FlagError(spec.name, f"{where}: {spec.name} is an on/off flag; use true or false, not {value!r}")
        return value
    if isinstance(value, bool):
        raise FlagError(spec.name, f"{where}: {spec.name} takes {type_words.get(spec.type, spec.type)}, not {value!r}")
    if isinstance(value, list) and spec.type != "int_list":
        raise FlagError(spec.name, f"{where}: {spec.name} takes one value, not a list")
    try:
        parsed = parse(to_argv(spec, value))
        typed = parsed.get(spec.dest)
        check_bounds(spec.name, typed, (bounds or {}).get(spec.dest))
    except FlagError as exc:
        raise FlagError(spec.name, f"{where}: {exc}") from None
    return typed


def scalar(text: str) -> Any:
    """A `--set` value typed the way YAML would type it in a profile: bool, int, float or text."""
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


def parse_overrides(items: list[str] | tuple[str, ...], *, example: str) -> dict[str, Any]:
    """`--set` items -> {flag name: typed value}; `example` is the engine's FLAG=VALUE shown in
    the error. A value with a newline or NUL is refused for every engine, as a profile's values are
    (docs/DECISIONS.md, "Profiles and the CLI"): `--set` must not let in what the profile keeps out."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = normalise_flag_name(key.strip())
        if not key or not key[0].isalpha() or any(not (ch.isalnum() or ch == "-") for ch in key):
            raise FlagError(item, f"--set {item!r}: expected FLAG=VALUE, e.g. {example}")
        if not sep:
            out[key] = True
            continue
        if any(c in value for c in "\n\r\x00"):  # the rule a profile's values follow (issue 18)
            raise FlagError(key, f"--set {item!r}: a value must be a single line (no newline or NUL), as in a profile")
        if value.startswith("-") and not is_number(value):
            raise FlagError(key, f"--set {item!r}: a value must not start with '-' (it would read as another flag)")
        if "," in value and all(is_number(p) for p in value.split(",")):
            out[key] = [scalar(p) for p in value.split(",")]
        else:
            out[key] = scalar(value)
    return out


def flag_changes(
    profile_flags: Mapping[str, Any],
    launched: Mapping[str, Any],
    *,
    resolve: Callable[[str], FlagLike],
    table: Mapping[str, FlagLike],
    differs: Callable[[Any, Any], bool],
) -> list[FlagChange]:
    """What differs between the profile's flags and the launched ones, in canonical spelling.

    `resolve` is the engine's `canonical` for the version in use (FlagError for a name it does not
    know: such a flag is kept as spelled); `differs` is the engine's notion of a changed value.
    """

    def by_dest(flags: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        out: dict[str, tuple[str, Any]] = {}
        for k, val in flags.items():
            try:
                spec = resolve(k)
                out[spec.dest] = (spec.name, val)
            except FlagError:
                name = "--" + normalise_flag_name(k)
                out[name.lstrip("-").replace("-", "_")] = (name, val)
        return out

    before = by_dest(dict(profile_flags))
    after = by_dest(launched)
    changes: list[FlagChange] = []
    for dest in list(before) + [d for d in after if d not in before]:
        name = (after.get(dest) or before[dest])[0]
        old = before.get(dest, (name, None))[1]
        new = after.get(dest, (name, None))[1]
        spec = table.get(dest)
        if spec is not None and spec.type == "bool":
            old, new = (bool(old) if old is not None else None), (bool(new) if new is not None else None)
        if differs(old, new):
            changes.append(FlagChange(flag=name, from_value=old, to_value=new))
    return changes
