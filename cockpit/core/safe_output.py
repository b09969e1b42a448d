"""The CLI's stdout and stderr pass `clean_text` on the way to the terminal.

Every command but the TUI prints text that can hold log lines (a crash message, a decisive line,
`logs` itself, an error naming what the host said). Cleaning at each print is a rule one new
print can forget; wrapping the two streams once makes it hold for all of them. Cockpit's own
CLI output carries no escape sequences, so nothing of ours is lost.

Carriage returns survive (a tqdm line keeps its redraws); every escape sequence and other
control character between them is dropped. `cockpit logs` into a pipe or a file stays the log
byte for byte (its own contract); to a terminal it is cleaned like everything else.
"""

from __future__ import annotations

import io
import sys
from typing import Any, TextIO

from cockpit.core.sanitize import clean_text, has_control


def clean_keep_cr(text: str) -> str:
    if not has_control(text):
        return text
    if "\r" not in text:
        return clean_text(text)
    return "\r".join(clean_text(part) for part in text.split("\r"))


class CleanWriter(io.TextIOBase):
    """A text stream that cleans what is written, then hands it to the real one."""

    def __init__(self, inner: TextIO):
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(clean_keep_cr(s))
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._inner.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._inner.errors

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def guard_terminal(*, pipe_stays_raw: bool = False) -> None:
    """Wrap sys.stdout and sys.stderr (once) for a non-TUI command. `pipe_stays_raw`: stdout
    that is not a terminal is left alone (`cockpit logs > copy.log` is the log byte for byte;
    `logs` cleans what it prints to a terminal itself)."""
    if not isinstance(sys.stdout, CleanWriter) and not (pipe_stays_raw and not sys.stdout.isatty()):
        sys.stdout = CleanWriter(sys.stdout)
    if not isinstance(sys.stderr, CleanWriter):
        sys.stderr = CleanWriter(sys.stderr)
