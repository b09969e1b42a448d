"""Operator-facing errors: one clear line and a hint, a non-zero exit, never a traceback wall."""

from __future__ import annotations

import os
import sys
import traceback


class CockpitError(Exception):
    """An expected failure with a message for the operator. exit_code 1 = failed, 2 = bad input."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(CockpitError):
    exit_code = 2


def report(exc: BaseException) -> int:
    """Print `exc` for the operator and return the exit code the CLI contract gives it."""
    from cockpit.backends.base import FlagError
    from cockpit.core.profile import ProfileError

    if isinstance(exc, ProfileError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(exc, FlagError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        return 2
    from cockpit.transport.base import TransportError

    if isinstance(exc, TransportError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return 1
    if isinstance(exc, CockpitError):
        print(f"cockpit: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    # Unexpected: still one line, with the trace only when asked for.
    print(f"cockpit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    if os.environ.get("COCKPIT_DEBUG"):
        traceback.print_exception(exc)
    else:
        print("  hint: set COCKPIT_DEBUG=1 to see the traceback", file=sys.stderr)
    return 1
