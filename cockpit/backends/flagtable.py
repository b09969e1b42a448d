"""Engine-neutral machinery for the per-version flag tables of cockpit/backends/<engine>/flags.py.

Each engine keeps its own table, defaults and wording; what lives here is the part that does not
know any engine: version ordering, the argparse that raises instead of exiting, the shaping of
argparse's error text and the spelling of a typed value as argv items. Nothing here may import an
engine package (import-linter enforces it).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, NoReturn

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


def dest_of(name: str) -> str:
    """"--mem-fraction-static" -> "mem_fraction_static" (argparse's own dest rule)."""
    return name.lstrip("-").replace("-", "_")


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


def valued_argv(name: str, ftype: str, value: Any) -> list[str]:
    """A non-bool flag and its value as argv items: None is nothing, lists repeat values, JSON
    values are dumped, floats keep their full precision."""
    if value is None:
        return []
    if ftype == "int_list":
        items = value if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split()
        return [name, *(str(i) for i in items)]
    if ftype == "json" and not isinstance(value, str):
        return [name, json.dumps(value)]
    if isinstance(value, float):
        return [name, repr(value)]
    return [name, str(value)]
