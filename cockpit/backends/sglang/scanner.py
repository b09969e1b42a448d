"""The streaming scanner: whole, numbered lines (from the one splitter, cockpit/core/linesplit.py)
-> the events of the lines worth classifying.

Why the scanning looks the way it does: a busy server log is millions of uvicorn access lines and
`Decode batch` / `Prefill batch` lines, and the handful of lines that matter (memory milestones,
the crash) are rare. Python's `re` runs at ~125 MB/s and a per-line Python loop is slower still,
while `bytes.count` runs at GB/s. So the parser works on big byte blocks cut into 64 KiB windows
and asks C, per half window, "does every line here look routine?" (newlines == batch markers +
access markers; the newlines are counted by what `bytes.replace` removes, which finds them with
memchr at twice `count`'s speed). A routine half costs one `replace` and two `count` calls (every
other window also gives its last batch line to the throughput series); a half that holds something
else is re-checked in 8 KiB pieces and only the lines that are not routine are classified, each
after the batch line just before it (so "which batch ran last" is right when a crash follows).
Small feeds (a live tail) are classified line by line in full, so the live view sees every batch
and access line.

Line numbers stay exact (the newlines of every window are counted, from the splitter's number of
the block's first line), a line held over chunks is at most 64 KiB (the splitter's cap), bytes that are not UTF-8 are
replaced, escape sequences and control characters are removed (`core.sanitize.clean_text`, after a
tqdm line redrawn with `\\r` is cut to its last segment), wrapper prefixes are stripped (`wrappers.py`)
and nothing in the input makes the parser raise.
"""

from __future__ import annotations

from cockpit.backends import rejoin
from cockpit.backends.rejoin import MIN_WIDTH
from cockpit.backends.sglang.grammar import FOREIGN, GENERIC, NONE, STRONG, Peek, _no_peek, classify_line
from cockpit.backends.sglang.wrappers import Unwrapper
from cockpit.core import bytecount
from cockpit.core import events as ev
from cockpit.core.events import Event
from cockpit.core.linesplit import LINE_CAP, Lines  # noqa: F401 (LINE_CAP: logparse's re-export)
from cockpit.core.sanitize import clean_text

# longest text of one line the grammar reads: every pattern is linear, but a file of 64 KiB lines
# would still cost ~30 ms a line; SGLang's longest lines (the server_args dump) are ~3-8 KiB.
# A line cut here is counted (`lines_cut`) and `diagnose` says so.
CLASSIFY_CAP = 16 * 1024
WINDOW = 64 * 1024  # bytes per routine-check window
FULL_FEED_LINES = 512  # a feed with at most this many lines is classified line by line in full
SUB_WINDOW = 8 * 1024  # a window with news is checked again in pieces of this size
TAIL_SAMPLE = 8192  # bytes at the end of a window searched for its last batch lines
SAMPLE_EVERY = 2  # one batch line per this many windows (~1 per 1,000 lines) feeds the series
READ_CHUNK = 1 << 20

# A routine line holds exactly one of these (batch lines / uvicorn access lines).
_BATCH_MARK = b"#running-req: "  # in every Prefill and Decode batch line, both versions
_ACCESS_MARK = b" HTTP/1."
# Most access lines end so (uvicorn prints the status with its phrase). CPython's `count` skips
# ahead by up to a needle's length, so this 18-byte one is counted in ~0.6 of the time of the
# 8-byte mark, and each of its matches holds one: a half window whose lines are all batch lines or
# such access lines is proved routine without the mark's own count (see _window).
_ACCESS_OK = b' HTTP/1.1" 200 OK\n'
# What `str.isprintable` refuses in ASCII: C0 controls (tab among them) and DEL; in a feed, but the newline
_C0_DEL = bytes([*range(0x20), 0x7f])
_ASCII_CONTROLS = _C0_DEL.replace(b"\n", b"")

TRACEBACK_SOURCE_LINES = 3  # after a frame: its source line and, on Python 3.11+, a caret line
# bytes `_clean` removes whole (C0 controls but tab, DEL; `\r` as a redraw of nothing): a line of
# only these is empty text, which nothing classifies
_BLANK = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])
SHORT_LINE = 64  # lines up to this long are remembered when they read as nothing
MEMO_LINES = 4096  # at most so many of them

_WAITS = (ev.ExceptionLine, ev.PhaseEvidence, ev.EngineAdvice)  # what a line that may be a first piece can say (rejoin.py)


def _read_joined(lineno: int, text: str) -> list[Event]:
    return classify_line(lineno, text)[0]


def _fast_count() -> bytecount.Count | None:
    """The SIMD count when there is one (then the halves are counted in place, no tricks needed)."""
    return bytecount.counter() if bytecount.is_fast() else None


# ---- the streaming parser ----------------------------------------------------------------------


def _cut(raw: bytes) -> bool:
    """Whether `_clean` reads only the head of this line (its last `\r` segment is over the cap)."""
    if len(raw) <= CLASSIFY_CAP:
        return False
    raw = raw.rstrip(b"\r")
    return len(raw) - (raw.rfind(b"\r") + 1) > CLASSIFY_CAP


def _clean(raw: bytes) -> str:
    """One line's bytes -> text: CRLF and tqdm `\\r` redraws (keep the last segment), bad UTF-8,
    then `clean_text` (escape sequences and control characters: the one rule for log text)."""
    if b"\r" in raw:
        raw = raw.rstrip(b"\r")
        cut = raw.rfind(b"\r")
        if cut != -1:
            raw = raw[cut + 1 :]
    if len(raw) > CLASSIFY_CAP:
        raw = raw[:CLASSIFY_CAP]
    text = raw.decode("utf-8", "replace")
    # Nearly every line holds no control character (C0, DEL, C1 are all unprintable): one C call
    # tells, and only the rest pay for clean_text's patterns. An ASCII line is asked of its bytes
    # (a translate that deletes none: ~0.3 µs, where isprintable calls a function per character).
    if raw.isascii():
        return text if len(raw.translate(None, _C0_DEL)) == len(raw) else clean_text(text, keep_newlines=False)
    return text if text.isprintable() else clean_text(text, keep_newlines=False)


class SGLangLogParser:
    """Hand it whole, numbered lines (`Lines`, from the one splitter: cockpit/core/linesplit.py);
    it returns their events. It holds no partial line: an over-long one reaches it as its head or
    its last `\r` segment (the splitter's rule)."""

    def __init__(self) -> None:
        self._lines = 0
        self._last_line = 0  # the last line handed to classify (lines are never classified twice)
        self._windows = 0
        self._unsampled: tuple[bytes, int, int, int, int] | None = None
        self._unwrapper = Unwrapper()
        self._frame_line = -TRACEBACK_SOURCE_LINES - 1  # the last traceback frame's line number
        self._frame_func = ""  # and its function
        # lines by what they prove (see recognition): SGLang's own, any Python/torch server's, another engine's
        self._tally = [0, 0, 0, 0]  # lines per recognition class (failures.NONE … FOREIGN)
        self.lines_cut = 0  # lines longer than CLASSIFY_CAP, classified on their head
        self._looked_at = 0  # lines of windows classified one by one (the rest are routine)
        self._nothing: dict[bytes, tuple[int, int, int, str, int]] = {}  # short lines read as nothing, in which context
        self._held: rejoin.Held = None  # a line that may be the first piece of a re-wrapped one (rejoin.py)

    @property
    def lines_seen(self) -> int:
        return self._lines

    @property
    def strong(self) -> int:
        return self._tally[STRONG]

    @property
    def generic(self) -> int:
        return self._tally[GENERIC]

    @property
    def foreign(self) -> int:
        return self._tally[FOREIGN]

    @property
    def lines_recognised(self) -> int:
        """Lines read as this server's log: SGLang's own text, plus Python/torch structure
        (tracebacks, NCCL) unless another engine's lines say the log is not SGLang's."""
        if self.strong == 0:
            # torch's and CUDA's words, tracebacks and NCCL lines alone are any Python server's:
            # evidence for SGLang is one of its own lines or frames (issue 35)
            return 0
        return self.strong + self.generic

    def _classify(self, lineno: int, text: str, peek: Peek = _no_peek, tally: bool = True) -> list[Event]:
        """One cleaned line -> events: the wrapper prefix off, the grammar, the recognition tally."""
        if text[:1] != "[" or not text[1:2].isdigit():  # a record start needs no unwrapping
            text = self._unwrapper.unwrap(text)
        near = lineno - self._frame_line <= TRACEBACK_SOURCE_LINES
        events, recog = classify_line(lineno, text, peek, self._frame_func if near else None)
        if self._held is not None or (len(text) >= MIN_WIDTH and (not events or type(events[-1]) in _WAITS)):
            events = self._rejoin(lineno, text, events)
        if events:
            last = events[-1]
            if type(last) is ev.TracebackFrame and last.file is not None:
                self._frame_line = lineno
                self._frame_func = last.function
        if tally:
            self._tally[recog] += 1
        return events

    def _rejoin(self, lineno: int, text: str, events: list[Event]) -> list[Event]:
        """A line after one that may have been cut by a terminal's wrap: the two joined and read
        again as the first one's line (rejoin.py)."""
        out, self._held = rejoin.step(lineno, text, events, self._held, _read_joined)
        return out

    def skip_lines(self, n: int) -> None:
        """n whole lines went by unread (the middle of a huge log): keep numbering as the file does."""
        self._lines += n
        self._last_line = self._lines

    def feed(self, lines: Lines) -> list[Event]:
        out: list[Event] = []
        if lines.first - 1 > self._lines:  # lines went by unread (the splitter's count is the file's)
            self.skip_lines(lines.first - 1 - self._lines)
        if lines.ended:  # the input's end: the last window's batch line comes before that last line
            self._flush_sample(out)
        if lines.lead:
            # the line an earlier chunk began, on its own; the chunk's own lines are scanned in place
            self._block(lines.lead, 0, len(lines.lead), out)
        if lines.end > lines.start:
            self._block(lines.data, lines.start, lines.end, out)
        return out

    def finish(self) -> list[Event]:
        """The last batch line of the input's last window, and a re-wrapped exception's text that
        ran to the end. The line in progress was the splitter's, handed in a last `feed`."""
        out: list[Event] = []
        self._flush_sample(out)
        out.extend(rejoin.flush(self._held))  # a re-wrapped exception's text that ran to the end
        self._held = None
        return out

    # -- internals --

    def _flush_sample(self, out: list[Event]) -> None:
        """The last window's batch line, not sampled yet: the last one before the end counts."""
        if self._unsampled is not None:
            buf, ws, we, wnl, before = self._unsampled
            self._unsampled = None
            lines, self._lines = self._lines, before
            self._sample(buf, ws, we, wnl, out)
            self._lines = lines

    def _block(self, buf: bytes, start: int, n: int, out: list[Event]) -> None:
        """buf[start:n] ends with a newline. Appends events; advances the line count."""
        if n - start <= FULL_FEED_LINES * 64 and buf.count(b"\n", start, n) <= FULL_FEED_LINES:
            feed = buf[start:n]
            if b"\r" not in feed:
                # A live tail's feed: decoded at once, not line by line (the same text: a newline never
                # sits inside a UTF-8 sequence, so each bad sequence is replaced as it would be alone).
                texts = feed.decode("utf-8", "replace").split("\n")
                texts.pop()
                ascii_ = feed.isascii()  # then a line's characters are its bytes
                if n - start <= CLASSIFY_CAP or max(map(len, texts if ascii_ else feed.split(b"\n"))) <= CLASSIFY_CAP:
                    # the usual feed, printable ASCII and newlines, is every line's clean text as it is
                    if not (ascii_ and len(feed.translate(None, _ASCII_CONTROLS)) == n - start):
                        clean_text_ = clean_text
                        texts = [t if t.isprintable() else clean_text_(t, keep_newlines=False) for t in texts]
                    self._lines += self._classify_lines(texts, self._lines, out)
                    return
            lines = feed.split(b"\n")[:-1]
            for raw in lines:
                if len(raw) > CLASSIFY_CAP:
                    self.lines_cut += _cut(raw)
            self._lines += self._classify_lines([_clean(raw) for raw in lines], self._lines, out)
            return
        pos = start
        while pos < n:
            end = pos + WINDOW
            if end >= n:
                end = n
            else:
                nl = buf.find(b"\n", end - 1, n)
                end = n if nl == -1 else nl + 1
            self._window(buf, pos, end, out)
            pos = end

    def _window(self, buf: bytes, s: int, e: int, out: list[Event]) -> None:
        base = self._lines
        nl = 0
        pos = s
        find = buf.find
        count = buf.count
        batch_mark, access_ok = _BATCH_MARK, _ACCESS_OK
        step = SUB_WINDOW - 1
        looked_at = self._looked_at
        fast = _fast_count()
        while pos < e:
            # The window is checked in halves of four pieces, cut where _find_news cuts its
            # pieces (buf[e - 1] is a newline, so a search that starts past it gives e), so that
            # a line with news costs a second look at half a window, not a whole one. Newlines
            # are counted by what `replace` removes: that path finds them with memchr, about
            # twice as fast as `count`'s byte loop.
            he = find(b"\n", pos + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            he = find(b"\n", he + step, e) + 1 or e
            if fast is not None:  # SIMD counts over the range itself: three, each at memory speed
                hnl = fast(buf, b"\n", pos, he)
                news = hnl - fast(buf, batch_mark, pos, he) - fast(buf, _ACCESS_MARK, pos, he)
            else:
                half = buf[pos:he]
                hnl = len(half) - len(half.replace(b"\n", b""))
                batches = count(batch_mark, pos, he)
                # Each `_ACCESS_OK` holds one `_ACCESS_MARK`, so its count is at most the mark's and
                # the news it leaves is at least the true one: when that is not above 0, neither is
                # the true news (and news below 0, lines holding two marks, is no news either). Only
                # a half with other lines pays for the mark's own count.
                news = hnl - batches - count(access_ok, pos, he)
                if news > 0:
                    news = hnl - batches - count(_ACCESS_MARK, pos, he)
            if news > 0:
                self._lines = base + nl
                self._find_news(buf, pos, he, news, out)
            nl += hnl
            pos = he
        # every routine line (batch or access: SGLang's own record) is recognised without a look,
        # as the line-by-line path counts it; the others were tallied when looked at
        self._tally[STRONG] += nl - (self._looked_at - looked_at)
        self._lines = base
        self._windows += 1
        if self._windows % SAMPLE_EVERY == 0:
            self._sample(buf, s, e, nl, out)
            self._unsampled = None
        else:
            # remembered so that finish() can still give the last batch line of the input
            self._unsampled = (buf, s, e, nl, self._lines)
        self._lines += nl

    def _find_news(self, buf: bytes, s: int, e: int, news: int, out: list[Event]) -> None:
        """buf[s:e] holds `news` lines besides routine ones (self._lines: the lines before s): find
        them in pieces with the same test, stopping once every line with news is accounted for."""
        pos = s
        fast = _fast_count()
        while pos < e and news > 0:
            se = buf.find(b"\n", min(pos + SUB_WINDOW, e) - 1, e) + 1 or e
            if se == e:
                # the last piece holds what the ones before did not (`news` is exact and no mark
                # spans two pieces): its counts would say so again; the caller counts its lines
                sub_news, snl = news, 0
            elif fast is not None:
                snl = fast(buf, b"\n", pos, se)
                sub_news = snl - fast(buf, _BATCH_MARK, pos, se) - fast(buf, _ACCESS_MARK, pos, se)
            else:
                piece = buf[pos:se]
                snl = len(piece) - len(piece.replace(b"\n", b""))  # memchr, as for the halves
                sub_news = snl - piece.count(_BATCH_MARK) - piece.count(_ACCESS_MARK)
            if sub_news:
                self._last_batch_before(buf, pos, out)
                self._dirty(buf[pos:se].split(b"\n")[:-1], out)
                news -= sub_news
            self._lines += snl
            pos = se

    def _emit(self, lineno: int, raw: bytes, out: list[Event], peek: Peek = _no_peek, tally: bool = False) -> None:
        """Classify one line of a window. `tally`: count its recognition (routine batch lines were
        counted by the window already)."""
        if lineno <= self._last_line:
            return  # already classified (a sample may meet a line the dirty path took)
        self._last_line = lineno
        if len(raw) > CLASSIFY_CAP:
            self.lines_cut += _cut(raw)
        text = _clean(raw)
        if text:
            out.extend(self._classify(lineno, text, peek, tally))

    def _sample(self, buf: bytes, s: int, e: int, nl: int, out: list[Event]) -> None:
        """Keep a window's last batch line: one point of the series per window."""
        p = buf.rfind(_BATCH_MARK, max(s, e - TAIL_SAMPLE), e)
        if p == -1:
            return
        ls = buf.rfind(b"\n", s, p) + 1 or s
        le = buf.find(b"\n", p, e)
        # counted from the window's end: the sampled line sits near it
        self._emit(self._lines + nl - buf.count(b"\n", ls, e) + 1, buf[ls:le], out)

    def _last_batch_before(self, buf: bytes, pos: int, out: list[Event]) -> None:
        """Before a piece with news (maybe a crash), the batch line just before it: the crash phase."""
        p = buf.rfind(_BATCH_MARK, max(0, pos - TAIL_SAMPLE), pos)
        if p == -1:
            return
        ls = buf.rfind(b"\n", 0, p) + 1
        le = buf.find(b"\n", p, pos)
        self._emit(self._lines - buf.count(b"\n", ls, pos) + 1, buf[ls:le], out)

    def _dirty(self, lines: list[bytes], out: list[Event]) -> None:
        """Classify the lines that are not routine, each after the batch line just before it.

        Hostile short lines (a megabyte of empty or one-byte lines: every one is "news") would each
        pay the whole classifier: lines that clean to nothing (empty, `\r`, control bytes) are
        passed over as the classifier would pass them, and a line the classifier has just read as
        nothing (no event, unrecognised, no look at the next line, no parser state changed) is not
        read again while that state holds (`_nothing`); a piece that is one such line repeated, or
        only blank lines, is passed over whole."""
        base = self._lines
        count = len(lines)
        if count and (lines.count(lines[0]) == count or not b"".join(lines).translate(None, _BLANK)) \
                and self._pass_over(lines[0], base + 1, count):
            return
        bm, am = _BATCH_MARK, _ACCESS_MARK
        done = -1
        ok = _ACCESS_OK[:-1]  # the usual access line's ending holds the access mark: no search for it
        nothing = self._nothing
        # the piece's ~60 lines tested in one comprehension; a piece holds one or two lines with news
        for i in [i for i, raw in enumerate(lines) if not (raw.endswith(ok) or bm in raw or am in raw)]:
            raw = lines[i]
            for j in range(i - 1, done, -1):
                if bm in lines[j]:
                    self._emit(base + j + 1, lines[j], out)
                    break
                if am not in lines[j]:
                    break
            done = i
            self._looked_at += 1
            lineno = base + i + 1
            if not raw.translate(None, _BLANK) or (nothing.get(raw) == self._context()
                                                   and lineno - self._frame_line > TRACEBACK_SOURCE_LINES):
                self._last_line = max(self._last_line, lineno)
                self._tally[NONE] += 1 if raw.translate(None, _BLANK) else 0
                continue
            asked = [False]

            def peek(i: int = i, asked: list[bool] = asked) -> str | None:
                asked[0] = True
                return _clean(lines[i + 1]) if i + 1 < count else None

            before, unrecognised, emitted = self._context(), self._tally[NONE], len(out)
            self._emit(lineno, raw, out, peek, True)
            if (len(raw) <= SHORT_LINE and not asked[0] and len(out) == emitted and self._tally[NONE] > unrecognised
                    and self._context() == before and lineno - self._frame_line > TRACEBACK_SOURCE_LINES):
                if len(nothing) >= MEMO_LINES:
                    nothing.clear()
                nothing[raw] = before

    def _context(self) -> tuple[int, int, int, str, int]:
        """What besides a line's text its classification depends on and may change: the wrappers
        learnt so far, the last traceback frame, the piece held for a rejoin."""
        learnt, left = self._unwrapper.learning()
        return learnt, left, self._frame_line, self._frame_func, (self._held or (0,))[0]

    def _pass_over(self, raw: bytes, first: int, n: int) -> bool:
        """Lines first … first+n-1 are all `raw` repeated, or all blank: passed over when the
        classifier would read each as nothing (see _dirty). False: read them one by one."""
        blank = not raw.translate(None, _BLANK)
        if not blank and (self._nothing.get(raw) != self._context() or first - self._frame_line <= TRACEBACK_SOURCE_LINES):
            return False
        self._looked_at += n
        self._last_line = max(self._last_line, first + n - 1)
        if not blank:
            self._tally[NONE] += n
        return True

    def _classify_lines(self, texts: list[str], base: int, out: list[Event]) -> int:
        """Classify every line (their clean texts); returns how many there were."""
        count = len(texts)

        def peek() -> str | None:
            """The next line's text, for the line being classified (valid during its classify_line:
            it reads the loop's index)."""
            return texts[i + 1] if i + 1 < count else None

        unwrap = self._unwrapper.unwrap
        tally = self._tally
        frame_line = self._frame_line
        frame = ev.TracebackFrame
        waits = _WAITS
        for i in range(count):
            t = texts[i]
            if not t:
                continue
            # self._classify, inlined: a live tail sends every line through here
            lineno = base + i + 1
            if t[0] != "[" or not t[1:2].isdigit():
                t = unwrap(t)
            evs, recog = classify_line(lineno, t, peek, self._frame_func if lineno - frame_line <= TRACEBACK_SOURCE_LINES else None)
            tally[recog] += 1
            if self._held is not None or (len(t) >= MIN_WIDTH and (not evs or type(evs[-1]) in waits)):
                evs = self._rejoin(lineno, t, evs)
            if evs:
                last = evs[-1]
                if type(last) is frame and last.file is not None:
                    self._frame_line = frame_line = lineno
                    self._frame_func = last.function
                out.extend(evs)
        self._last_line = max(self._last_line, base + count)
        self._unsampled = None
        return count
