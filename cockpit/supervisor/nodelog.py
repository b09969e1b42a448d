"""One node's log of one run: where it was read up to, the line it is in the middle of, the rank
of the current record, and the parser. A chunk of the log is split into lines once, by its
`LineSplitter` (cockpit/core/linesplit.py), for the parser and for the screen alike.

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

from dataclasses import dataclass
from typing import Any

from cockpit.backends.base import Backend, LogParser
from cockpit.core.linesplit import Lines, LineSplitter
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
        # the one cut of the stream into numbered lines: the parser's and the screen's (core/linesplit.py)
        self.split = LineSplitter(show=True, show_last=catch_up)
        self.rank: str | None = None  # rank of the current record (continuation lines inherit it)
        self.cursor: tuple[int, int | None] | None = None  # (offset, inode) read up to
        # the access lines of Cockpit's own requests (cockpit/core/ownlines.py) left out of the
        # lines to show: counted here, numbered as the file numbers them (the parser still sees them)
        self.own_lines = 0

    @property
    def lines(self) -> int:
        """Lines of this run's log seen so far (the file's numbering)."""
        return self.split.lines

    @property
    def mid_line(self) -> bool:
        """The last chunk ended inside a line (a giant line arrives in pieces)."""
        return self.split.mid_line

    # ---------------------------------------------------------------- position
    def skip_lines(self, n: int) -> None:
        """n lines went by unread (a huge log's middle, counted on the host)."""
        self.split.skip(n)
        if self.parser is not None:
            self.parser.skip_lines(n)

    def reset(self) -> list[Any]:
        """The file was truncated or rotated: the line in progress ends (its events are returned),
        what follows starts a new line."""
        return self._parse(self.split.reset())

    def finish(self) -> list[Any]:
        """The events of a trailing partial line and the parser's last ones, at the end of the input."""
        events = self._parse(self.split.finish())
        return events + list(self.parser.finish()) if self.parser is not None else events

    def _parse(self, lines: Lines) -> list[Any]:
        return list(self.parser.feed(lines)) if self.parser is not None and not lines.empty else []

    # ---------------------------------------------------------------- reading
    def feed(self, data: bytes) -> tuple[list[Any], list[Piece]]:
        """Events of the chunk's complete lines, and its lines to show as pieces: a chunk that
        ends inside a line gives that line's start, and the next chunk a piece that continues it."""
        lines = self.split.feed(data)
        return self._parse(lines), self._pieces(lines)

    def feed_lines(self, data: bytes) -> tuple[list[Any], list[LogLine]]:
        """`feed` for display: the new lines only (a giant line's start stands for all of it)."""
        events, pieces = self.feed(data)
        return events, [p.line for p in pieces if not p.continued]

    def _pieces(self, lines: Lines) -> list[Piece]:
        """The chunk's pieces as display lines: cleaned and capped (or the file's text when raw),
        each with its record's rank, Cockpit's own access lines left out."""
        if lines.caught_up:
            self.rank = None
        out: list[Piece] = []
        raw = self.raw
        record_rank = self.backend.logs.record_rank
        host = self.host
        rank = self.rank
        for piece in lines.shown:
            line = piece.text
            if piece.continued:
                out.append(Piece(LogLine(piece.number, rank, line, host), True, piece.ends))
                continue
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
            out.append(Piece(LogLine(piece.number, rank, line, host), False, piece.ends))
        self.rank = rank
        return out
