"""Run by SGLang's own python (its venv): `ServerArgs.add_cli_args`'s argparse parser as JSON.

One object per option: dest, its spellings, the type function's name (`json.loads` for the json
module's), choices, default, nargs and the action (`store_true`, `store_false`, or the class name
of any other; None for a plain store). Only SGLang and the stdlib are imported; nothing is served.
"""

import argparse
import json
import sys

PLAIN = {"_StoreAction": None, "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false"}


def type_name(t):
    if t is None:
        return None
    name = getattr(t, "__name__", None) or type(t).__name__
    return f"json.{name}" if getattr(t, "__module__", "") == "json" else name


def plain(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return list(value)
    return repr(value)


def main():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    out = []
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        kind = type(a).__name__
        out.append({
            "dest": a.dest,
            "options": list(a.option_strings),
            "type": type_name(a.type),
            "choices": sorted(str(c) for c in a.choices) if a.choices is not None else None,
            "default": plain(a.default),
            "nargs": a.nargs if a.nargs is None or isinstance(a.nargs, (int, str)) else str(a.nargs),
            "action": PLAIN.get(kind, kind),
        })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
