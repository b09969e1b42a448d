"""One node's log of one run: where it was read up to, the line it is in the middle of, the rank
of the current record, and the parser. A chunk of the log is split into lines once, here.

`NodeLog.feed(chunk)` returns the core events the backend's parser found and the lines to show.
The supervisor (TUI, `status`) and `cockpit logs` both read a node's log through it, so line
numbers, the rank shown next to a line and the rank filter agree everywhere.

Cockpit's own requests (readiness, /metrics, the hang probe) leave access lines in the server's
log; they are not shown (`cockpit.core.ownlines`), counted in `own_lines`.

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
from cockpit.core.ownlines import is_own_line
from cockpit.core.sanitize import clean_text
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
        self.parser: LogParser | None = backend.logs.new_parser() if parse else None
        self.raw = raw  # keep the file's text (no cleaning, no cap, giant lines in pieces)
        self.catch_up = catch_up
        self.lines = 0  # lines of this run's log seen so far (the file's numbering)
        self.rank: str | None = None  # rank of the current record (continuation lines inherit it)
        self.mid_line = False  # the last chunk ended inside a line (a giant line arrives in pieces)
        self.cursor: tuple[int, int | None] | None = None  # (offset, inode) read up to
        # the access lines of Cockpit's own requests (cockpit/core/ownlines.py) left out of the
        # lines to show: counted here, numbered as the file numbers them (the parser still sees them)
        self.own_lines = 0
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
        """Events of the chunk's complete lines, and its lines to show as pieces: a chunk that
        ends inside a line gives that line's start, and the next chunk a piece that continues it."""
        events = list(self.parser.feed(data)) if self.parser is not None else []
        ends_nl = data.endswith(b"\n")
        cont, lines = self._split(data)
        pieces = [Piece(cont, continued=True, ends=bool(lines) or ends_nl)] if cont is not None else []
        pieces += [Piece(ln) for ln in lines]
        if pieces and not ends_nl:
            pieces[-1] = Piece(pieces[-1].line, pieces[-1].continued, ends=False)
        return events, pieces

    def feed_lines(self, data: bytes) -> tuple[list[Any], list[LogLine]]:
        """`feed` for display: the new lines only (a giant line's start stands for all of it)."""
        events = list(self.parser.feed(data)) if self.parser is not None else []
        return events, self._split(data)[1]

    def _split(self, data: bytes) -> tuple[LogLine | None, list[LogLine]]:
        """(the piece that continues the line the last chunk ended in, the chunk's new lines)."""
        if not data:
            return None, []
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
        cont: LogLine | None = None
        if self.mid_line and parts:
            cont = LogLine(self.lines, self.rank, parts.pop(0), self.host)
        out: list[LogLine] = []
        raw = self.raw
        record_rank = self.backend.logs.record_rank
        host = self.host
        n = self.lines
        rank = self.rank
        for line in parts:
            n += 1
            if not raw:
                if not line.isprintable():  # C-fast; false for any control character (and tab)
                    if "\r" in line:  # tqdm redraws: the last segment is what a terminal shows
                        line = line.rsplit("\r", 1)[-1] or line.strip("\r")
                    line = clean_text(line)
                if len(line) > DISPLAY_LINE_CAP:
                    line = line[:DISPLAY_LINE_CAP]
                r = record_rank(line)
            else:
                r = record_rank(clean_text(line[:DISPLAY_LINE_CAP]))
            if r is not None:  # a record start: its rank ("" = none); else the record's
                rank = r or None
            if is_own_line(line):  # two substring checks: every line passes here
                self.own_lines += 1
                continue
            out.append(LogLine(n, rank, line, host))
        self.lines, self.rank = n, rank
        self.mid_line = not ends_nl
        return cont, out
