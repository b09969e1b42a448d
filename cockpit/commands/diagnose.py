"""`cockpit diagnose LOG… [--json] [--target-headroom-gb F]`: explain SGLang and vLLM logs.

Each LOG is a file path or `-` (standard input, read as bytes). Several logs are read in order into
one state (e.g. a rotated log and its continuation). Which server wrote them is told by the opening
of the first log (`detect_backend`: each backend scores how much it looks like its own). Exit 0 when nothing is critical, 1 when a
finding is critical, 2 on bad input (a missing or unreadable file), always as one clear line.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from typing import Any

from cockpit.core.findings import exit_code_for
from cockpit.core.state import RunState
from cockpit.errors import BadInput

SNIFF_BYTES = 64 * 1024


def _sniff(path: str) -> bytes:
    """The opening bytes of a log, without consuming them (standard input is peeked)."""
    try:
        if path == "-":
            return bytes(sys.stdin.buffer.peek(SNIFF_BYTES)[:SNIFF_BYTES])  # type: ignore[union-attr]
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except (OSError, AttributeError, ValueError):
        return b""  # the read below reports an unreadable file


def backend_for(paths: list[str]) -> Any:
    from cockpit.backends import detect_backend, get_backend

    return get_backend(detect_backend(_sniff(paths[0]) if paths else b""))


def read_logs(paths: list[str], backend: Any = None) -> RunState:
    backend = backend if backend is not None else backend_for(paths)
    state: RunState | None = None
    if paths.count("-") > 1:
        raise BadInput("standard input (-) can be read only once")
    for path in paths:
        try:
            state = backend.read_log(sys.stdin.buffer if path == "-" else path, state)
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file") from None
        except IsADirectoryError:
            raise BadInput(f"{path}: is a directory, expected a log file") from None
        except PermissionError:
            raise BadInput(f"{path}: permission denied") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot be read ({exc.strerror or exc})") from None
    assert state is not None  # argparse requires at least one LOG
    return state


def run(args: argparse.Namespace) -> int:
    target = args.target_headroom_gb
    if target is not None and not 0 < target <= 200:
        raise BadInput(f"--target-headroom-gb {target:g}: expected a value between 0 and 200 GiB")
    # Everything imported so far lives as long as this one-shot command: set it aside so the
    # collections that parsing triggers do not walk it again (~3 ms of a 1M-line diagnose).
    gc.freeze()
    backend = backend_for(list(args.logs))
    state = read_logs(list(args.logs), backend)
    findings = backend.diagnose(state, target_headroom_gb=target)
    if args.json:
        out = state.to_json()
        out["findings"] = [f.to_json() for f in findings]
        print(json.dumps(out, indent=2))
    else:
        from cockpit.report import render_state

        title = ", ".join(args.logs)
        sys.stdout.write(render_state(state, findings, title=f"diagnose {title}"))
    return exit_code_for(findings)
