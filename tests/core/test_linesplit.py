"""The one splitter (cockpit/core/linesplit.py): wherever the chunks are cut, the parser is handed
the same numbered whole lines and the screen the same numbered text; a line longer than the hold
cap reaches the parser as its head or last `\\r` segment, whatever the chunking."""

from __future__ import annotations

import ast
import codecs
import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.sglang.scanner import SGLangLogParser
from cockpit.backends.vllm.logparse import VLLMLogParser
from cockpit.core.linesplit import LINE_CAP, ByteReader, Lines, LineSplitter

# log-like lines: text, CRLF endings, tqdm redraws, invalid UTF-8, a multi-byte character a chunk
# boundary may cut, control bytes, empty lines
LINE = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"\r", b"tqdm 10%\rtqdm 90%\r", b"caf\xc3\xa9 \xe2\x82\xac", b"bad \xff\xfe utf-8",
                     b"[2026-02-24 11:55:13 TP1] Load weight begin. avail mem=77.50 GB\r"]),
)


def _parser_lines(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], int]:
    """(number, line) of every whole line the splitter hands the parser, and its final count."""
    split = LineSplitter()
    got: list[tuple[int, bytes]] = []

    def take(lines: Lines) -> None:
        got.extend((lines.first + i, raw) for i, raw in enumerate(lines.raw_lines()))

    for c in chunks:
        take(split.feed(c))
    take(split.finish())
    return got, split.lines


def _shown_lines(chunks: list[bytes]) -> dict[int, str]:
    """Every shown line's text, its pieces joined, by number."""
    split = LineSplitter(show=True)
    text: dict[int, str] = {}
    for c in chunks:
        for piece in split.feed(c).shown:
            assert piece.continued == (piece.number in text)  # a piece continues only a line begun before
            text[piece.number] = text.get(piece.number, "") + piece.text
    return text


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=30), last_newline=st.booleans(), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_any_chunking_gives_the_same_numbered_lines(lines: list[bytes], last_newline: bool, cuts: list[int]) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    want = [(i + 1, raw) for i, raw in enumerate(data.split(b"\n"))]
    if data.endswith(b"\n") or not data:
        want.pop()  # the file's numbering: a newline ends a line, it does not begin one
    chunks = _cut(data, cuts)
    assert _parser_lines(chunks) == (want, len(want))
    assert _parser_lines([data]) == (want, len(want))  # whole, or a byte at a time below
    assert _parser_lines([data[i : i + 1] for i in range(len(data))]) == (want, len(want))
    shown = {n: raw.decode("utf-8", "replace") for n, raw in want}
    if want and not data.endswith(b"\n"):  # a line in progress: a character it has begun waits for its end
        shown[want[-1][0]] = codecs.getincrementaldecoder("utf-8")("replace").decode(want[-1][1])
    assert _shown_lines(chunks) == shown == _shown_lines([data])


def test_a_crlf_and_a_redraw_stay_in_their_line_and_only_a_newline_ends_one() -> None:
    got, n = _parser_lines([b"a\r\nb\rc\x0cd\x1ce\n"])
    assert got == [(1, b"a\r"), (2, b"b\rc\x0cd\x1ce")] and n == 2


def test_a_multibyte_character_cut_by_a_chunk_is_one_character_on_screen() -> None:
    euro = "€".encode()
    assert _shown_lines([b"price " + euro[:1], euro[1:] + b" \xff\n"]) == {1: "price € \ufffd"}


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(1, 3 * LINE_CAP), max_size=6), redraws=st.booleans())
def test_an_over_long_line_reaches_the_parsers_read_the_same_whatever_the_chunking(
        cuts: list[int], redraws: bool) -> None:
    """Held past the cap, a line reaches the parser as its head or its last non-empty redraw; whole
    in a chunk, as itself. Both parsers read the two alike (they classify a line's last segment,
    capped), so events, numbers and the cut count do not depend on where the chunks were cut."""
    head = b"[2026-02-24 11:55:13 TP3] Load weight begin. avail mem=77.50 GB "
    if redraws:
        long = head + b"x" * LINE_CAP + b"\r" + head + b"\r\r"
        summary = head  # the last non-empty segment: what a terminal shows last
    else:
        long = head + b"x" * (2 * LINE_CAP)
        summary = long[:LINE_CAP]
    data = b"before\n" + long + b"\nafter\n"
    chunks = _cut(data, [c + 7 for c in cuts] + [8])  # the long line never whole in one chunk
    got, n = _parser_lines(chunks)
    assert [g[0] for g in got] == [1, 2, 3] and n == 3
    assert got[1][1] in (long, summary) and (got[0][1], got[2][1]) == (b"before", b"after")
    assert _parser_lines(_cut(data, list(range(8, len(data), 4096))))[0][1] == (2, summary)  # held past the cap
    for parser in (SGLangLogParser, VLLMLogParser):
        whole, cut = ByteReader(parser()), ByteReader(parser())
        want = [*whole.feed(data), *whole.finish()]
        assert [e for c in chunks for e in cut.feed(c)] + cut.finish() == want
        assert (cut.lines_seen, cut.lines_cut) == (whole.lines_seen, whole.lines_cut) == (3, 0 if redraws else 1)


def test_the_held_line_stays_capped_however_long_it_runs() -> None:
    split = LineSplitter()
    for _ in range(100):
        split.feed(b"y" * 65536)
    assert max(len(split._held), len(split._head), len(split._cur)) <= LINE_CAP
    end = split.finish()
    assert end.ended and end.first == 1 and end.raw_lines() == [b"y" * LINE_CAP]


def test_skipped_lines_keep_the_files_numbers_for_parser_and_screen() -> None:
    split = LineSplitter(show=True)
    split.feed(b"one\ntwo\n")
    split.skip(1000)
    lines = split.feed(b"last\n")
    assert lines.first == 1003 and [p.number for p in lines.shown] == [1003] and split.lines == 1003


def test_a_rotation_ends_the_line_in_progress_and_the_next_file_starts_a_new_one() -> None:
    split = LineSplitter(show=True)
    split.feed(b"one\nhal")
    ended = split.reset()
    assert ended.ended and (ended.first, ended.raw_lines()) == (2, [b"hal"])
    nxt = split.feed(b"new\n")
    assert (nxt.first, nxt.raw_lines()) == (3, [b"new"]) and [(p.number, p.continued) for p in nxt.shown] == [(3, False)]


def test_a_catch_up_shows_the_newest_lines_and_hands_the_parser_all() -> None:
    split = LineSplitter(show=True, show_last=10)
    lines = split.feed(b"".join(b"line %d\n" % i for i in range(1, 101)))
    assert lines.caught_up and [p.number for p in lines.shown] == list(range(91, 101))
    assert lines.first == 1 and len(lines.raw_lines()) == 100


def test_the_byte_reader_numbers_lines_as_the_parser_sees_them() -> None:
    class Numbers:
        """A parser that keeps what it is handed (the protocol's four members)."""

        def __init__(self) -> None:
            self.seen: list[tuple[int, bytes]] = []
            self.count = 0

        @property
        def lines_seen(self) -> int:
            return self.count

        def feed(self, lines: Lines) -> list[object]:
            raws = lines.raw_lines()
            self.seen += [(lines.first + i, r) for i, r in enumerate(raws)]
            self.count = lines.first - 1 + len(raws)
            return []

        def finish(self) -> list[object]:
            return []

        def skip_lines(self, n: int) -> None:
            self.count += n

    reader = ByteReader(Numbers())
    reader.feed(b"a\nb")
    reader.skip_lines(0)
    reader.feed(b"c\nd")
    reader.finish()
    assert reader.parser.seen == [(1, b"a"), (2, b"bc"), (3, b"d")] and reader.lines_seen == 3


def test_shown_text_decodes_as_the_whole_file_would() -> None:
    data = bytes(range(256)) * 3 + b"\n" + "ü€😀".encode() * 5 + b"\n"
    whole = codecs.decode(data, "utf-8", "replace").split("\n")[:-1]
    assert _shown_lines(_cut(data, list(range(0, len(data), 7)))) == dict(enumerate(whole, 1))


# ---------------------------------------------------------------- one splitter: what the scan holds
# A scan of the source (ast), not a grep: what it checks, and what it does not.
#  1. Every log parser (a class with `feed`, `finish` and `skip_lines`, in cockpit/backends and the
#     third engine's backend) takes `Lines` in `feed` and starts no bytes buffer (`self.x = b""`,
#     `bytearray()`): each partial-line buffer the parsers had began so.
#  2. No module outside cockpit/backends that handles the log stream (imports one of STREAM_NAMES)
#     cuts text at newlines (`split`/`find`/`count`/… of "\n", `splitlines`, an incremental decoder),
#     but linesplit.py. The parsers' own bulk scanners do find newlines, inside the whole lines they
#     are handed (window bounds, counts): that is reading, not splitting the stream, and rule 1
#     keeps them from holding a line across feeds.
REPO = Path(__file__).resolve().parents[2]
STREAM_NAMES = {"LogChunk", "LogFollower", "NodeLog", "read_log", "Read", "LineSplitter", "Lines", "LogLine", "LogBatch"}
_CUTS = {"split", "rsplit", "find", "rfind", "index", "rindex", "count", "partition", "rpartition"}


def _newline_cuts(tree: ast.AST) -> list[int]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            a = n.func.attr
            first = n.args[0] if n.args else None
            if a in ("splitlines", "getincrementaldecoder") or (
                    a in _CUTS and isinstance(first, ast.Constant) and first.value in ("\n", b"\n")):
                out.append(n.lineno)
    return out


def _imports(tree: ast.AST) -> set[str]:
    return {al.asname or al.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for al in n.names}


def _parser_classes(tree: ast.AST) -> list[ast.ClassDef]:
    return [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            and {"feed", "finish", "skip_lines"} <= {f.name for f in c.body if isinstance(f, ast.FunctionDef)}]


def test_no_log_parser_keeps_a_partial_line() -> None:
    files = [*(REPO / "cockpit" / "backends").rglob("*.py"), REPO / "tests" / "third_engine" / "backend.py"]
    parsers = []
    for path in files:
        for cls in _parser_classes(ast.parse(path.read_text())):
            parsers.append(cls.name)
            feed = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "feed")
            assert ast.unparse(feed.args.args[1].annotation or ast.Constant(None)) == "Lines", (path, cls.name)
            for n in ast.walk(cls):
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) for t in n.targets):
                    v = n.value
                    starts_bytes = (isinstance(v, ast.Constant) and isinstance(v.value, bytes)) or (
                        isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "bytearray")
                    assert not starts_bytes, f"{path}:{n.lineno}: {cls.name} starts a bytes buffer"
    assert {"SGLangLogParser", "VLLMLogParser", "EchoParser"} <= set(parsers)  # the scan sees them all


def test_only_the_splitter_cuts_the_log_stream_into_lines() -> None:
    scanned, cutters = [], {}
    for path in sorted((REPO / "cockpit").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("cockpit/backends/"):
            continue
        tree = ast.parse(path.read_text())
        if rel != "cockpit/core/linesplit.py" and not (_imports(tree) & STREAM_NAMES):
            continue
        scanned.append(rel)
        if (lines := _newline_cuts(tree)):
            cutters[rel] = lines
    assert list(cutters) == ["cockpit/core/linesplit.py"], cutters
    # the scan covers the readers the issue named (a scope that lost them would pass anything)
    assert {"cockpit/supervisor/nodelog.py", "cockpit/supervisor/follower.py", "cockpit/supervisor/logstream.py",
            "cockpit/commands/logs.py", "cockpit/ui/logmodel.py"} <= set(scanned)
