"""The one place a log's bytes become numbered lines, for the parser and for the screen.

A node's log arrives in chunks of any size (the host frames them at newlines, but a line longer
than a frame, or the end of a file being written, arrives in pieces). `LineSplitter.feed(chunk)`
gives a `Lines`: the lines the chunk completes, numbered as the file numbers them, for the
backend's parser (which therefore never holds a partial line of its own), and, when the splitter
shows (`show=True`: the TUI and `cockpit logs`), the chunk's lines as text pieces, a line in
progress shown as it comes.

Rules, one owner each:
- a line ends at `\\n` only: a tqdm `\\r`, a form feed or a `\\x1c` in binary garbage is not a line
  break in the file, and the numbers must be the file's (`grep -n`, `sed -n`);
- a line in progress is held for the parser up to LINE_CAP bytes; a longer one is not buffered:
  it reaches the parser as its head, or, when it holds `\\r` redraws (a tqdm bar redrawn for
  minutes, maybe ending in a record), its last non-empty `\\r` segment, capped (the parsers read a
  line's last segment anyway, and at most their classify cap of it);
- shown text is decoded incrementally with "replace": a UTF-8 sequence cut by a chunk boundary is
  one character, a bad one is U+FFFD, as the decoder of the whole file would give.

Pure bytes and text; Textual-free, I/O-free.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from cockpit.core import bytecount

LINE_CAP = 64 * 1024  # bytes of a line in progress held for the parser (see the module's rules)
BIG_BLOCK = 256 * 1024  # a chunk at least this big is a file's block, not a live tail's few lines


@dataclass(frozen=True, slots=True)
class Shown:
    """A line to show, or the piece of one the chunk holds."""

    number: int  # the file's line number
    text: str  # decoded; not cleaned (the reader cleans for a terminal, or keeps the file's text)
    continued: bool = False  # continues a line an earlier chunk began (shown there already)
    ends: bool = True  # a newline followed it in this chunk


@dataclass(frozen=True, slots=True)
class Lines:
    """The whole lines one chunk completes, for the parser, and its pieces to show.

    The parser's lines are `lead` (a line begun in an earlier chunk, completed here; over LINE_CAP:
    its head or last `\\r` segment) then `data[start:end]` (the chunk's own whole lines, never copied),
    each ending with its newline, numbered from `first`."""

    first: int  # the number of the first of the parser's lines (the next line when there are none)
    lead: bytes = b""
    data: bytes = b""
    start: int = 0
    end: int = 0
    shown: tuple[Shown, ...] = ()
    caught_up: bool = False  # older lines of the chunk were counted, not shown (a long catch-up)
    ended: bool = False  # lead is the line that was in progress, ended by the input's end (or a rotation)

    @property
    def empty(self) -> bool:
        return not self.lead and self.end <= self.start

    def whole(self) -> bytes:
        """The parser's lines as one block (a copy: for parsers that read lines one by one)."""
        return self.lead + self.data[self.start : self.end] if self.lead else self.data[self.start : self.end]

    def raw_lines(self) -> list[bytes]:
        """The parser's lines, each without its newline."""
        return self.whole().split(b"\n")[:-1]


def _newlines(data: bytes, start: int, end: int) -> int:
    """The newlines in data[start:end]: a big block's counted at SIMD speed (bytecount), a live
    tail's by `bytes` (the SIMD library is imported only when a big block is read)."""
    if end - start < BIG_BLOCK:
        return data.count(b"\n", start, end)
    return bytecount.counter()(data, b"\n", start, end)


class LineSplitter:
    """Cuts one log's chunks into numbered lines. Not thread-safe; one per log being read.

    show: also give each chunk's lines as text pieces; show_last: of a chunk with more lines than
    this, only the newest are given as text (a catch-up on a long log: the screen's ring holds no
    more), the older counted so the numbers stay the file's."""

    def __init__(self, *, show: bool = False, show_last: int | None = None) -> None:
        self.lines = 0  # lines begun so far: the number of the line in progress, when mid_line
        self.mid_line = False  # the last chunk ended inside a line
        self.show = show
        self.show_last = show_last
        self._held = b""  # the line in progress, for the parser, while it is at most LINE_CAP bytes
        self._long = False  # the line in progress is over LINE_CAP: only its summary is kept
        self._head = b""  # that line's first LINE_CAP bytes
        self._cur = b""  # its current `\r` segment (capped)
        self._prev = b""  # its last non-empty `\r` segment before that
        self._cr = False  # it holds a `\r`
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    # ------------------------------------------------------------------------- position
    def skip(self, n: int) -> None:
        """n whole lines went by unread (a huge log's middle, counted on the host). Between lines only."""
        self.lines += n

    def finish(self) -> Lines:
        """The end of the input: the line in progress, if any, ends there (it is the parser's last)."""
        return self._end_line()

    def reset(self) -> Lines:
        """The file was truncated or rotated: the line in progress ends, what follows starts a new one."""
        self._decoder.reset()
        return self._end_line()

    def _end_line(self) -> Lines:
        if not self.mid_line:
            return Lines(self.lines + 1)
        self.mid_line = False
        return Lines(self.lines, self._complete(b""), ended=True)

    # ------------------------------------------------------------------------- reading
    def feed(self, data: bytes) -> Lines:
        if not data:
            return Lines(self.lines + (0 if self.mid_line else 1))
        before, cont = self.lines, self.mid_line
        ends = data.endswith(b"\n")
        last_nl = len(data) - 1 if ends else data.rfind(b"\n")
        shown: tuple[Shown, ...] = ()
        caught_up = False
        if self.show:
            shown, caught_up = self._shown(data, before, cont, ends)
        if last_nl == -1:  # no line ends here
            if not cont:
                self.lines += 1
                self.mid_line = True
            self._grow(data)
            return Lines(before if cont else before + 1, shown=shown, caught_up=caught_up)
        newlines = _newlines(data, 0, last_nl + 1)
        lead = b""
        start = 0
        if cont:
            first_nl = data.find(b"\n")
            lead = self._complete(data[: first_nl + 1])
            start = first_nl + 1
        self.lines = before - cont + newlines + (0 if ends else 1)
        self.mid_line = not ends
        if not ends:
            self._grow(data[last_nl + 1 :])
        return Lines(before if cont else before + 1, lead, data, start, last_nl + 1, shown, caught_up)

    def _grow(self, part: bytes) -> None:
        """More of the line in progress, without its newline."""
        if not self._long:
            held = self._held + part
            if len(held) <= LINE_CAP:
                self._held = held
                return
            self._long, self._held = True, b""
            self._head = held[:LINE_CAP]
            self._cur = self._prev = b""
            self._cr = False
            part = held
        segs = part.split(b"\r")
        if len(self._cur) < LINE_CAP:
            self._cur = (self._cur + segs[0][:LINE_CAP])[:LINE_CAP]
        if len(segs) == 1:
            return
        self._cr = True
        for seg in (self._cur, *segs[1:-1]):
            if seg:
                self._prev = seg[:LINE_CAP]
        self._cur = segs[-1][:LINE_CAP]

    def _complete(self, rest: bytes) -> bytes:
        """The line in progress ended with `rest` (its last bytes and newline, or b"" at the end of
        the input): the line for the parser, with its newline."""
        if not self._long:
            line = self._held + rest
            self._held = b""
            return line if line.endswith(b"\n") else line + b"\n"
        self._grow(rest.rstrip(b"\n"))
        line = (self._cur or self._prev) if self._cr else self._head
        self._long = self._cr = False
        self._head = self._cur = self._prev = b""
        return line + b"\n"

    # ------------------------------------------------------------------------- showing
    def _shown(self, data: bytes, before: int, cont: bool, ends: bool) -> tuple[tuple[Shown, ...], bool]:
        """The chunk's pieces as text: the one continuing the line in progress, then the lines it
        begins (the last maybe unfinished)."""
        caught_up = False
        if self.show_last is not None:
            total = _newlines(data, 0, len(data)) + (0 if ends else 1)
            if total > self.show_last:
                cut = len(data)
                for _ in range(self.show_last + (1 if ends else 0)):
                    cut = data.rfind(b"\n", 0, cut)
                # lines counted, not shown: numbering goes on after them, the text restarts clean
                before += _newlines(data, 0, cut + 1) - (1 if cont else 0)
                cont = False
                caught_up = True
                self._decoder.reset()
                data = data[cut + 1 :]
        parts = self._decoder.decode(data).split("\n")
        if ends:
            parts.pop()  # the "" after the last newline (a line in progress may decode to "" so far)
        out: list[Shown] = []
        n = before
        if cont and parts:
            out.append(Shown(n, parts.pop(0), continued=True, ends=bool(parts) or ends))
        for text in parts:
            n += 1
            out.append(Shown(n, text))
        if out and not ends:
            tail = out[-1]
            out[-1] = Shown(tail.number, tail.text, tail.continued, ends=False)
        return tuple(out), caught_up


class LineParser(Protocol):
    """What ByteReader drives: a backend's log parser (`cockpit.backends.base.LogParser`)."""

    @property
    def lines_seen(self) -> int: ...

    def feed(self, lines: Lines) -> Iterable[Any]: ...

    def finish(self) -> Iterable[Any]: ...

    def skip_lines(self, n: int) -> None: ...


P = TypeVar("P", bound=LineParser)


class ByteReader(Generic[P]):
    """A parser fed bytes in any chunking, through one splitter: a log file read whole (`diagnose`,
    `read_log`), a test's or a benchmark's input. The live path's splitter is its NodeLog's."""

    def __init__(self, parser: P) -> None:
        self.parser = parser
        self.split = LineSplitter()

    @property
    def lines_seen(self) -> int:
        return self.parser.lines_seen

    def __getattr__(self, name: str) -> Any:
        """The parser's own counters (`lines_cut`, a tally), read through the reader (tests, bench)."""
        return getattr(self.parser, name)

    def feed(self, data: bytes) -> list[Any]:
        lines = self.split.feed(data)
        return [] if lines.empty else list(self.parser.feed(lines))

    def skip_lines(self, n: int) -> None:
        self.split.skip(n)
        self.parser.skip_lines(n)

    def finish(self) -> list[Any]:
        lines = self.split.finish()
        return [*([] if lines.empty else self.parser.feed(lines)), *self.parser.finish()]
