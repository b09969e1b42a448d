"""Operator-facing errors: one clear line and a hint, a non-zero exit, never a traceback wall.

The classes only (every layer may raise them); `cockpit.cli.explain_error` turns any exception
into the line and the exit code."""

from __future__ import annotations


class CockpitError(Exception):
    """An expected failure with a message for the operator. exit_code 1 = failed, 2 = bad input."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


def close_words(word: str, choices: list[str] | tuple[str, ...]) -> list[str]:
    """The choices an operator probably meant (`stauts` → status, `--tial` → --tail): the hint of a
    bad-input error, for subcommands, flags and profile names alike."""
    import difflib

    return difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)


class BadInput(CockpitError):
    exit_code = 2
