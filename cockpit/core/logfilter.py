"""Log view filters: the presets the TUI and `cockpit logs --filter` offer, or any regex, plus a rank.

The presets' words are the engine's: each backend lists the spellings its server prints
(`Backend.logs.filter_presets()`: SGLang's `avail mem`, vLLM's `Available KV cache memory`, …) and the
caller hands them to `LineFilter`; this module knows the preset names and how to match, no engine.
Presets are plain substring checks (`str in str` runs at C speed), never a regex per line; a regex
is compiled once. Matching is case-sensitive, like grep without -i.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PRESET_NAMES: tuple[str, ...] = ("memory", "errors", "batches", "all")
# What any Python/CUDA process prints when it fails, whatever the engine: the error words of a
# log whose backend is not known (a pane painting error lines before a backend is chosen).
GENERIC_ERROR_WORDS: tuple[str, ...] = ("Traceback", "Error", "CUDA out of memory", "OutOfMemoryError", "exception", "Killed")


def preset_words(presets: Mapping[str, tuple[str, ...]] | None, name: str) -> tuple[str, ...]:
    """The substrings of one preset ("all": none, everything shows). Without the backend's words
    "errors" falls back to the generic error words; the other presets are the engine's and are
    refused (ValueError) rather than guessed."""
    if name == "all":
        return ()
    words = (presets or {}).get(name)
    if words:
        return tuple(words)
    if name == "errors":
        return GENERIC_ERROR_WORDS
    raise ValueError(f"the {name!r} filter needs the server's own words, and no backend gave them")


def _normalize_rank(rank: str) -> tuple[str, ...]:
    """"3" -> ("TP3",); "tp3" -> ("TP3",); "DP1 TP3" -> ("DP1", "TP3")."""
    tokens = rank.replace(",", " ").split()
    out = []
    for t in tokens:
        t = t.strip()
        if t.isdigit():
            out.append(f"TP{t}")
        else:
            out.append(t.upper() if t[:2].lower() in ("tp", "dp", "pp", "ep") else t)
    if not out:
        raise ValueError(f"invalid rank {rank!r}: give a number (3) or a label as logged (TP3, DP1 TP3)")
    return tuple(out)


class LineFilter:
    """`matches(text)` for each line, in log order; `spans(text)` for highlighting.

    spec: a preset name (memory, errors, batches, all) or a regular expression.
    rank: only lines from that rank ("3" or "TP3"). A line's rank is the label its reader gave it
    (`LogLine.rank`: the backend reads the record prefix, continuation lines such as a traceback
    inherit their record's), so a rank's traceback stays visible and lines may be judged in any order.
    presets: the backend's words per preset (`get_backend(profile.backend).logs.filter_presets()`).
    """

    def __init__(self, spec: str = "all", rank: str | None = None,
                 presets: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.spec = spec
        self._needles: tuple[str, ...] | None = None
        self._regex: re.Pattern[str] | None = None
        if spec in PRESET_NAMES:
            self._needles = preset_words(presets, spec)
        else:
            try:
                self._regex = re.compile(spec)
            except re.error as exc:
                raise ValueError(
                    f"invalid filter {spec!r}: not a preset ({', '.join(PRESET_NAMES)}) and not a valid "
                    f"regular expression ({exc})"
                ) from None
        self.rank = rank
        self._rank_tokens = _normalize_rank(rank) if rank else None

    @property
    def is_all(self) -> bool:
        return self._needles == () and self._rank_tokens is None

    def _rank_ok(self, rank: str | None) -> bool:
        if self._rank_tokens is None:
            return True
        if not rank:
            return False
        tokens = rank.split()
        return all(t in tokens for t in self._rank_tokens)

    def matches(self, text: str, rank: str | None = None) -> bool:
        """Whether a line with this text, of a record of this rank label ("DP1 TP3"), is shown."""
        if self._rank_tokens is not None and not self._rank_ok(rank):
            return False
        needles = self._needles
        if needles is not None:
            if not needles:
                return True
            for n in needles:  # noqa: SIM110 - a plain loop is twice as fast as any() over a generator
                if n in text:
                    return True
            return False
        assert self._regex is not None
        return self._regex.search(text) is not None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the filter matched, merged and sorted (for highlighting)."""
        found: list[tuple[int, int]] = []
        if self._needles is not None:
            for n in self._needles:
                start = text.find(n)
                while start != -1:
                    found.append((start, start + len(n)))
                    start = text.find(n, start + len(n))
        elif self._regex is not None:
            for m in self._regex.finditer(text):
                if m.end() > m.start():
                    found.append((m.start(), m.end()))
        if not found:
            return []
        found.sort()
        merged = [found[0]]
        for s, e in found[1:]:
            ls, le = merged[-1]
            if s <= le:
                merged[-1] = (ls, max(le, e))
            else:
                merged.append((s, e))
        return merged
