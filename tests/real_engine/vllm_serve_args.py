"""Run by the ENGINE's python (not Cockpit's): vLLM's own `vllm serve` argument parser as JSON.

Without arguments: one object per option: every spelling, dest, the type function's name,
choices, nargs and the argparse action's class. With `parse ARG…`: vLLM's values for those
serve arguments ({dest: value} of the options given, plus `model_tag`). tests/real_engine/test_flags_vllm.py compares Cockpit's flag table with
it. Nothing here is copied from vLLM: it asks vLLM's parser what it holds.
"""

from __future__ import annotations

import json
import sys


def serve_parser():  # type: ignore[no-untyped-def]
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # 0.32+
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def type_name(kind):  # type: ignore[no-untyped-def]
    """The type function's name; vLLM's `optional_type(int)` wrapper (accepts "None") names what
    it wraps, as `optional int`."""
    if kind is None:
        return None
    name = getattr(kind, "__name__", type(kind).__name__)
    if name == "_optional_type":
        inner = [c.cell_contents for c in (kind.__closure__ or ()) if callable(c.cell_contents)]
        return "optional " + (type_name(inner[0]) if inner else "?")
    return name


def parse(argv: list[str]) -> None:
    ns = serve_parser().parse_args(argv)
    given = {a.dest for a in serve_parser()._actions if set(a.option_strings) & {x.split("=")[0] for x in argv}}
    json.dump({k: v for k, v in vars(ns).items() if k in given or k == "model_tag"}, sys.stdout, default=str)


def main() -> None:
    if sys.argv[1:2] == ["parse"]:
        parse(sys.argv[2:])
        return
    out = []
    for action in serve_parser()._actions:
        if not action.option_strings:
            continue
        kind = action.type
        out.append({
            "options": list(action.option_strings),
            "dest": action.dest,
            "type": type_name(kind),
            "choices": [str(c) for c in action.choices] if action.choices is not None else None,
            "nargs": action.nargs,
            "action": type(action).__name__,
        })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
