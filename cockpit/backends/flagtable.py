"""Engine-neutral machinery for the per-version flag tables of cockpit/backends/<engine>/flags.py.

Each engine keeps its own table, defaults and wording; what lives here is the part that does not
know any engine: version ordering, the argparse that raises instead of exiting, the shaping of
argparse's error text and the spelling of a typed value as argv items. Nothing here may import an
engine package (import-linter enforces it).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from cockpit.backends.base import FlagError


def version_key(version: str, example: str) -> tuple[int, ...]:
    """"0.5.23" -> (0, 5, 23); tolerant of suffixes ("0.5.9.post1", "0.11.0rc2").

    `example` is the engine's own version, named in the error so the operator sees its shape.
    """
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    if not parts:
        raise FlagError("", f"not a version: {version!r} (expected something like {example})")
    return tuple(parts)


def resolve_version(version: str | None, default: str) -> str:
    """None -> the engine's default version; otherwise the version string, checked for shape."""
    if version is None:
        return default
    version_key(version, default)
    return version


def in_range(vk: tuple[int, ...], extra: Mapping[str, Any], example: str) -> bool:
    """Whether a table row exists in the version `vk`: its `since` (inclusive) and `until`
    (exclusive) versions, either may be absent."""
    since = extra.get("since")
    until = extra.get("until")
    if since is not None and vk < version_key(since, example):
        return False
    return not (until is not None and vk >= version_key(until, example))


def by_option(table: Mapping[str, TableRow]) -> dict[str, Any]:
    """Every spelling of every flag (canonical and aliases) -> its row."""
    out: dict[str, Any] = {}
    for spec in table.values():
        for o in spec.option_strings:
            out[o] = spec
    return out


def dest_of(name: str) -> str:
    """"--mem-fraction-static" -> "mem_fraction_static" (argparse's own dest rule)."""
    return name.lstrip("-").replace("-", "_")


# flag type ("int", "json", …) -> the argparse `type` that reads it
ArgTypes = Mapping[str, Callable[[str], Any]]


class FlagLike(Protocol):
    """What the shared helpers (here and in common.py) read of an engine's FlagSpec."""

    @property
    def name(self) -> str: ...
    @property
    def dest(self) -> str: ...
    @property
    def type(self) -> str: ...


class TableRow(FlagLike, Protocol):
    """What the parser builder reads besides."""

    @property
    def choices(self) -> tuple[Any, ...] | None: ...
    @property
    def help(self) -> str: ...
    @property
    def option_strings(self) -> tuple[str, ...]: ...


def _not_json_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON (give a finite number)")


def json_type(name: str) -> Callable[[str], Any]:
    """A JSON argument type; `name` is what argparse calls it in "invalid NAME value: …", the
    engine's own word for it."""

    def parse(s: str) -> Any:
        # Python's json takes NaN, Infinity and -Infinity, which are not JSON: an engine's parser
        # may refuse them or read them as it likes, so they are refused here (argparse: "invalid")
        return json.loads(s, parse_constant=_not_json_constant)

    parse.__name__ = name
    return parse


def add_flag(parser: argparse.ArgumentParser, spec: TableRow, types: ArgTypes,
             bool_action: Any = "store_true") -> None:
    """One table row as an argparse argument: absent flags stay absent (SUPPRESS), bools take the
    engine's action, `int_list` takes one or more values."""
    kw: dict[str, Any] = {"dest": spec.dest, "default": argparse.SUPPRESS, "help": spec.help or None}
    if spec.type == "bool":
        kw["action"] = bool_action
    else:
        kw["type"] = types[spec.type]
        if spec.type in ("int_list", "str_list"):
            kw["nargs"] = "+"
        if spec.choices is not None:
            kw["choices"] = spec.choices
    parser.add_argument(*spec.option_strings, **kw)


class Refusal(Exception):
    """argparse's complaint, caught and reshaped into a FlagError by the engine's parser."""


class RaisingArgParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting (we are a library)."""

    def error(self, message: str) -> NoReturn:
        raise Refusal(message)


def flag_error(message: str, dashes: str) -> FlagError:
    """argparse's message as a FlagError naming the flag; `dashes` is the regex for the engine's
    option prefix ("--", or "-{1,2}" where single-dash spellings such as `-tp` exist)."""
    # argparse names an argument by all its spellings ("--tp-size/--tensor-parallel-size"); an
    # operator reads the canonical one more easily, so keep only that.
    message = re.sub(rf"^argument ({dashes}[A-Za-z0-9][\w-]*)(?:/[^:]*)?: ", r"argument \1: ", message)
    flag = ""
    m = re.match(rf"argument ({dashes}[\w-]+)", message) or re.match(r"ambiguous option: (--?[^\s=]+)", message)
    if m:
        flag = m.group(1)
    else:
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m:
            flag = m.group(1).split("=", 1)[0]
    return FlagError(flag, message)


@dataclass(frozen=True)
class Bound:
    """The numbers a numeric flag may take (each engine's `BOUNDS`, by dest, beside its table):
    `low`/`high` inclusive unless `low_open` (above `low`); `also`: values the engine gives a
    meaning outside the range; `why`: the engine's own constraint, or what the number is. NaN and
    infinities are refused for every numeric flag, with or without a Bound."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    also: tuple[float, ...] = ()
    why: str = ""

    def allows(self, v: float) -> bool:
        if v in self.also:
            return True
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or v <= self.high

    def words(self) -> str:
        """`1 to 65535`, `at least 1`, `above 0 and at most 1`, `-1 or at least 1`."""
        lo, hi = self.low, self.high
        if lo is not None and hi is not None and not self.low_open:
            text = f"{lo:g} to {hi:g}"
        else:
            parts = []
            if lo is not None:
                parts.append(f"above {lo:g}" if self.low_open else f"at least {lo:g}")
            if hi is not None:
                parts.append(f"at most {hi:g}")
            text = " and ".join(parts) or "any finite number"
        if self.also:
            text = " or ".join(f"{a:g}" for a in self.also) + " or " + text
        return text


def check_bounds(name: str, value: Any, bound: Bound | None) -> None:
    """FlagError naming the flag, the value and the allowed range when a number (or any item of a
    list of numbers) is NaN, infinite or outside `bound`."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v):
            allowed = bound.words() if bound is not None else "a finite number"
            raise FlagError(name, f"{name} {v!r} is not a number the server can use: allowed {allowed}")
        if bound is not None and not bound.allows(v):
            why = f" ({bound.why})" if bound.why else ""
            raise FlagError(name, f"{name} {v:g} is out of range: allowed {bound.words()}{why}")


def valued_argv(name: str, ftype: str, value: Any) -> list[str]:
    """A non-bool flag and its value as argv items: None is nothing, lists repeat values, JSON
    values are dumped, floats keep their full precision."""
    if value is None:
        return []
    if ftype == "int_list":
        items = value if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split()
        return [name, *(str(i) for i in items)]
    if ftype == "str_list":  # several names (or keys) after one flag; a text is one of them
        return [name, *(str(i) for i in (value if isinstance(value, (list, tuple)) else [value]))]
    if ftype == "json" and not isinstance(value, str):
        return [name, json.dumps(value)]
    if isinstance(value, float):
        return [name, repr(value)]
    return [name, str(value)]
