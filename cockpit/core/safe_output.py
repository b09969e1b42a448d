"""The CLI's stdout and stderr pass `clean_text` on the way to the terminal.

Every command but the TUI prints text that can hold log lines (a crash message, a decisive line,
`logs` itself, an error naming what the host said). Cleaning at each print is a rule one new
print can forget; wrapping the two streams once makes it hold for all of them. Cockpit's own
CLI output carries no escape sequences, so nothing of ours is lost.

Carriage returns survive (`logs` keeps a tqdm line as the file has it); every escape sequence
and other control character between them is dropped.
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


def guard_terminal() -> None:
    """Wrap sys.stdout and sys.stderr (once) for a non-TUI command."""
    if not isinstance(sys.stdout, CleanWriter):
        sys.stdout = CleanWriter(sys.stdout)
    if not isinstance(sys.stderr, CleanWriter):
        sys.stderr = CleanWriter(sys.stderr)
