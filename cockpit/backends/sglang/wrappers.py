"""Wrapper prefixes, learned per file: what a launcher or collector put in front of SGLang's lines.

Logs reach operators through docker compose (`sglang-1  | `), kubectl (`[pod/x/c] `), CRI files
(`<RFC3339> stderr F `), `srun -l` (`0: `), journald (`Dec 01 … python3[1234]: `), Ray
(`(SGLangEngine pid=6680) `), Python logging wrappers (`<date,ms> - __main__ - INFO - `), Rust
`tracing` (`<ts>  INFO target: `), CI runners (`<RFC3339> `), Markdown quotes (`> `) … — no list of
products could be complete. So nothing here names one. Instead:

1. A line whose SGLang record (`[YYYY-MM-DD HH:MM:SS`) or traceback header starts after some text
   is a wrapped line: the text before it is a wrapper prefix.
2. Each such prefix is turned into a template (runs of digits and mixed words generalised,
   upper-case words such as log levels generalised, padding generalised, the rest literal) and
   remembered: the first `MAX_TEMPLATES` distinct templates of the file, learned from its first
   `LEARN_LINES` lines that reach the grammar.
3. Any later line that starts with a learned template loses it, so the traceback and NCCL text
   under the same wrapper is read as well as the records are.

A record glued after other text (a tqdm bar without its newline) is found the same way (1) and never
needs a template.
"""

from __future__ import annotations

import re

from cockpit.backends import pylogging
from cockpit.backends.sglang.grammar import split_record

MAX_TEMPLATES = 8
LEARN_LINES = 4000
MAX_PREFIX = 160

# where an SGLang line starts inside a wrapped one: a record, an old `[gpu_id=N]` record, a header
_START = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\[gpu_id=\d+\] |Traceback \(most recent call last\):"
    r'|  File "[^"]{1,300}", line \d+, in '  # a frame: wrappers that miss the header line (pm2's `3|qwen  | `)
)
# a record head that lost its `[` and the first digits of its year in a paste (`026-05-28 00:11:09.816
# DP0 TP0 EP0] …`): the rest is the head as SGLang prints it
_BROKEN_HEAD = re.compile(r"(\d{2,3})-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] ")
_TOKEN = re.compile(r"[A-Za-z0-9_]+|\s+|.", re.DOTALL)


def _looks_like_record(text: str) -> bool:
    return len(text) > 20 and text[0] == "[" and text[1:5].isdigit() and text[5] == "-"


def template(prefix: str) -> str:
    """A regex (anchored by `match`) for prefixes shaped like `prefix`."""
    parts: list[str] = []
    tokens = _TOKEN.findall(prefix)
    for i, tok in enumerate(tokens):
        if tok[0].isspace():
            # padding varies with the level's width; the last run is kept exactly (indentation follows)
            parts.append(re.escape(tok) if i == len(tokens) - 1 else r"\s+")
        elif tok[0].isalnum() or tok[0] == "_":
            if tok.isdigit():
                parts.append(r"\d+")
            elif any(ch.isdigit() for ch in tok):
                # a pod hash, `python3`: must still hold a digit (letters, the first digit, then the
                # rest taken whole: linear on any line, and what follows it is never a word character)
                parts.append(r"[A-Za-z_]*[0-9][A-Za-z0-9_]*+")
            elif tok.isupper() and len(tok) <= 8:
                parts.append(r"[A-Z]+")
            else:
                parts.append(re.escape(tok))
        else:
            parts.append(re.escape(tok))
    return "".join(parts)


class Unwrapper:
    """Strips the file's wrapper prefixes (see the module docstring). One per parser."""

    __slots__ = ("_learn_left", "_sources", "_templates")

    def __init__(self) -> None:
        self._templates: list[re.Pattern[str]] = []
        self._sources: set[str] = set()
        self._learn_left = LEARN_LINES

    @property
    def templates(self) -> list[str]:
        return [t.pattern for t in self._templates]

    def learning(self) -> tuple[int, int]:
        """(templates learnt, lines left to learn from): what unwrap's answers depend on."""
        return len(self._templates), self._learn_left

    def unwrap(self, text: str) -> str:
        if not text or _looks_like_record(text) or (text[0] == "[" and split_record(text)[0] is not None):
            return text  # already a record (`[TP0] …` with its time trimmed, `[gpu_id=0] …`)
        for t in self._templates:
            m = t.match(text)
            if m and m.end() < len(text):
                return text[m.end():]
        if text[0].isdigit() and text[2:4].count("-") == 1:
            b = _BROKEN_HEAD.match(text)
            if b is not None:
                return "[" + "2000"[: 4 - len(b.group(1))] + text
        m = _START.search(text, 0, MAX_PREFIX + 40)
        if m is None:
            return pylogging.peel("sglang", text) or text  # the logger's own format around a bare message
        if m.start() == 0:
            return text
        if m.group(0)[0] == " " and not text[: m.start()].strip():
            return text  # an indented frame: a traceback's own line, not a wrapped one
        if m.group(0)[0] == "T" and "hit an exception: " in text[: m.start()]:
            return text  # SGLang's own header, pasted without its record prefix: not a wrapper
        start = m.start()
        prefix = text[:start]
        if start <= MAX_PREFIX and self._learn_left > 0:
            self._learn_left -= 1
            self._learn(prefix)
        if prefix.startswith((" ", "\t")) and m.group(0).startswith("Traceback"):
            return text  # an indented traceback header inside a message: not a wrapper
        return text[start:]

    def _learn(self, prefix: str) -> None:
        if len(self._templates) >= MAX_TEMPLATES or "%|" in prefix or "it/s]" in prefix or "s/it]" in prefix:
            return  # a tqdm bar glued to a record is not a wrapper
        src = template(prefix)
        if src in self._sources:
            return
        self._sources.add(src)
        try:
            self._templates.append(re.compile(src))
        except re.error:  # cannot happen for escaped text; never let a template stop the parse
            pass
