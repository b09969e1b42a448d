"""One node's log of one run: where it was read up to, the line it is in the middle of, the rank
of the current record, and the parser. A chunk of the log is split into lines once, here.

`NodeLog.feed(chunk)` returns the core events the backend's parser found and the lines to show.
The supervisor (TUI, `status`) and `cockpit logs` both read a node's log through it, so line
numbers, the rank shown next to a line and the rank filter agree everywhere.

Display text: a tqdm `\\r` redraw shows its last segment (as a terminal would), escape sequences
and control characters are dropped (`cockpit.core.sanitize.clean_text`), and a line is cut at
DISPLAY_LINE_CAP characters. `cockpit logs` into a pipe or a file keeps the file's bytes instead
(raw=True): what it prints is then the log, line for line.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from cockpit.backends.base import Backend, LogParser
from cockpit.core.sanitize import clean_text, has_control
from cockpit.supervisor.api import LogLine

# Characters of one log line shown (a tqdm bar or a giant repr stays one line). The parser has
# its own, larger cap on the bytes it classifies (64 KiB): that one bounds memory, this one the screen.
DISPLAY_LINE_CAP = 4000
# Catching up on a long log, only this many of a chunk's newest lines become display lines (the
# TUI's ring holds no more); the older ones are counted so line numbers stay exact.
CATCH_UP_LINES = 5000


@dataclass(frozen=True)
class Piece:
    """A display line, or a piece of one too long to arrive in one chunk (raw mode only)."""

    line: LogLine
    continued: bool = False  # continues the previous piece's line (no new line number)
    ends: bool = True  # the line ends with this piece (a newline followed it)


class NodeLog:
    """The reading of one node's log. Not thread-safe; one per node per run."""

    def __init__(
        self,
        backend: Backend,
        host: str = "",
        *,
        parse: bool = True,
        raw: bool = False,
        catch_up: int | None = CATCH_UP_LINES,
    ) -> None:
        self.backend = backend
        self.host = host
        self.parser: LogParser | None = backend.new_parser() if parse else None
        self.raw = raw  # keep the file's text (no cleaning, no cap, giant lines in pieces)
        self.catch_up = catch_up
        self.lines = 0  # lines of this run's log seen so far (the file's numbering)
        self.rank: str | None = None  # rank of the current record (continuation lines inherit it)
        self.mid_line = False  # the last chunk ended inside a line (a giant line arrives in pieces)
        self.cursor: tuple[int, int | None] | None = None  # (offset, inode) read up to
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    # ---------------------------------------------------------------- position
    def skip_lines(self, n: int) -> None:
        """n lines went by unread (a huge log's middle, counted on the host)."""
        self.lines += n
        if self.parser is not None:
            self.parser.skip_lines(n)

    def reset(self) -> None:
        """The file was truncated or rotated: what follows starts a new line."""
        self.mid_line = False
        self._decoder.reset()

    def finish(self) -> list[Any]:
        """The events of a trailing partial line, at the end of the input."""
        return list(self.parser.finish()) if self.parser is not None else []

    # ---------------------------------------------------------------- reading
    def feed(self, data: bytes) -> tuple[list[Any], list[Piece]]:
        """Events of the chunk's complete lines, and its lines to show (a chunk that ends inside
        a line shows that line's start now; the rest of it is counted with it, not shown again)."""
        events = list(self.parser.feed(data)) if self.parser is not None else []
        return events, self._pieces(data)

    def feed_lines(self, data: bytes) -> tuple[list[Any], list[LogLine]]:
        """`feed` for display: the lines only (continuation pieces are not shown again)."""
        events, pieces = self.feed(data)
        return events, [p.line for p in pieces if not p.continued]

    def _pieces(self, data: bytes) -> list[Piece]:
        if not data:
            return []
        ends_nl = data.endswith(b"\n")
        if self.catch_up is not None:
            total = data.count(b"\n") + (0 if ends_nl else 1)
            if total > self.catch_up:
                cut = len(data)
                for _ in range(self.catch_up + (1 if ends_nl else 0)):
                    cut = data.rfind(b"\n", 0, cut)
                self.lines += data.count(b"\n", 0, cut + 1) - (1 if self.mid_line else 0)
                self.mid_line = False
                self.rank = None
                self._decoder.reset()
                data = data[cut + 1 :]
        text = self._decoder.decode(data)
        # newlines only: a tqdm \r, a form feed or a \x1c in binary garbage is not a line break
        # in the file, and line numbers must stay the file's (the parser counts the same way)
        parts = text.split("\n")
        if parts[-1] == "":
            parts.pop()
        out: list[Piece] = []
        raw = self.raw
        dirty = not raw and has_control(text)  # once per chunk, not per line (newlines do not count)
        record_rank = self.backend.record_rank
        host = self.host
        first_continues = self.mid_line
        for i, piece in enumerate(parts):
            ends = i < len(parts) - 1 or ends_nl
            if i == 0 and first_continues:
                out.append(Piece(LogLine(self.lines, self.rank, piece, host), continued=True, ends=ends))
                continue
            self.lines += 1
            line = piece
            if not raw:
                if dirty:
                    if "\r" in line:  # tqdm redraws: the last segment is what a terminal shows
                        line = line.rsplit("\r", 1)[-1] or line.strip("\r")
                    line = clean_text(line)
                line = line[:DISPLAY_LINE_CAP]
            rank = record_rank(line if not raw else clean_text(line[:DISPLAY_LINE_CAP]))
            if rank is not None:  # a record start: its rank ("" = none); else the record's
                self.rank = rank or None
            out.append(Piece(LogLine(self.lines, self.rank, line, host), ends=ends))
        self.mid_line = not ends_nl
        return out
