"""Hostile lines for a regular expression, made from the expression itself.

A pattern backtracks badly on text that almost matches it, over and over: a run of what one of its
repeats accepts, followed by something that makes the rest fail; or the pattern's own opening
repeated, so that every start position begins a long attempt. So, from the parsed pattern
(`re._parser`, the parser `re.compile` uses):

- every prefix of the pattern gets a sample text that matches it (a literal as itself, a class as
  a character it accepts, a repeat once or several times, each alternative of a branch);
- a candidate line is a prefix's sample followed by a long run of one character (each character
  the pattern names, and a few common ones), or a prefix's sample repeated to the line's length,
  or a long run of one character followed by a sample;
- plus runs of single characters alone.

No candidate is guaranteed to be the worst case, but together they reproduce every quadratic
pattern the hardening issue found (OOM capacity, learned wrapper templates, exception header,
argparse, capture-failed, vLLM's process-group prefix) and any new one shaped like them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from re import _constants as C
from re import _parser as P

COMMON = " 1a.:-()\"=,/[]|_x\t#A'0Z;"
BASIC = " 1a."  # run characters tried beside the pattern's own
MAX_SAMPLES = 6  # alternatives kept per node (branches multiply)


def _in_class(ch: str, items: list[tuple[object, object]]) -> bool:
    o = ord(ch)
    neg = False
    hit = False
    for op, av in items:
        if op is C.NEGATE:
            neg = True
        elif op is C.LITERAL:
            hit = hit or o == av
        elif op is C.RANGE:
            lo, hi = av  # type: ignore[misc]
            hit = hit or lo <= o <= hi
        elif op is C.CATEGORY:
            hit = hit or _in_category(ch, av)
    return hit != neg


def _in_category(ch: str, cat: object) -> bool:
    name = str(cat)
    if "NOT_DIGIT" in name:
        return not ch.isdigit()
    if "DIGIT" in name:
        return ch.isdigit()
    if "NOT_SPACE" in name:
        return not ch.isspace()
    if "SPACE" in name:
        return ch.isspace()
    if "NOT_WORD" in name:
        return not (ch.isalnum() or ch == "_")
    if "WORD" in name:
        return ch.isalnum() or ch == "_"
    if "NOT_LINEBREAK" in name:
        return ch != "\n"
    return False


def _reps(op: object, av: object) -> list[str]:
    """Characters one class-like node accepts (a few, the common ones first)."""
    if op is C.LITERAL:
        return [chr(av)]  # type: ignore[arg-type]
    if op is C.NOT_LITERAL:
        return [c for c in COMMON if ord(c) != av][:3]
    if op is C.ANY:
        return ["a", " ", "1"]
    if op is C.IN:
        return [c for c in COMMON + "bcdefghijklmnopqrstuvwyzBCDEFGHIJKLMNOPQRSTUVWXY23456789" if _in_class(c, av)][:3]  # type: ignore[arg-type]
    if op is C.CATEGORY:
        return [c for c in COMMON if _in_category(c, av)][:3]
    return []


def _samples(seq: list[tuple[object, object]]) -> list[str]:
    """Texts that match the node sequence (a few)."""
    out = [""]
    for op, av in seq:
        opts = _node(op, av)
        if not opts:
            continue
        out = [a + b for a, b in itertools.islice(itertools.product(out, opts), MAX_SAMPLES)]
    return out


def _node(op: object, av: object) -> list[str]:
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN, C.CATEGORY):
        return _reps(op, av)[:2]
    if op is C.SUBPATTERN:
        return _samples(list(av[-1]))  # type: ignore[index]
    if op is C.ATOMIC_GROUP:
        return _samples(list(av))  # type: ignore[arg-type]
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        lo, hi, sub = av  # type: ignore[misc]
        body = _samples(list(sub))
        n = max(1, lo) if hi != 0 else 0
        return [b * n for b in body][:MAX_SAMPLES] + ([""] if lo == 0 else [])
    if op is C.BRANCH:
        return [s for b in av[1] for s in _samples(list(b))][:MAX_SAMPLES]  # type: ignore[index]
    return [""]  # anchors, lookarounds, back references: nothing to add


def _chars(seq: list[tuple[object, object]]) -> set[str]:
    out: set[str] = set()
    for op, av in seq:
        out.update(_reps(op, av))
        if op is C.SUBPATTERN:
            out |= _chars(list(av[-1]))  # type: ignore[index]
        elif op is C.ATOMIC_GROUP:
            out |= _chars(list(av))  # type: ignore[arg-type]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            out |= _chars(list(av[2]))  # type: ignore[index]
        elif op is C.BRANCH:
            for b in av[1]:  # type: ignore[index]
                out |= _chars(list(b))
    return out


_BACKTRACKS = (C.MAX_REPEAT, C.MIN_REPEAT, C.BRANCH, C.SUBPATTERN)


Recipe = tuple[str, str, int]  # (sample, character, form)


def recipes(pattern: str | bytes, flags: int) -> list[Recipe]:
    """How to build each candidate line (`build`), for any length: the same list for every size."""
    src = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    seq = list(P.parse(src, flags))
    chars = sorted(_chars(seq) | set(BASIC))
    out: list[Recipe] = [("", ch, 0) for ch in chars]
    seen: set[Recipe] = set(out)
    # prefixes that end just before a repeat or a branch (where backtracking starts), and the whole
    cuts = [k for k in range(1, len(seq)) if seq[k][0] in _BACKTRACKS] + [len(seq)]
    for k in cuts:
        for head in _samples(seq[:k]):
            if not head:
                continue
            for r in [(head, "", 1)] + [(head, ch, form) for ch in chars for form in (2, 3, 4)]:
                if r not in seen:
                    seen.add(r)
                    out.append(r)
    return out


def build(recipe: Recipe, size: int) -> str:
    """One candidate line of about `size` characters."""
    head, ch, form = recipe
    if form == 0:
        return ch * size  # a run of one character
    if form == 1:
        return (head * (size // len(head) + 1))[:size]  # the sample, over and over
    if form == 2:
        return head + ch * size  # the sample, then a long run
    if form == 3:
        return ((head + ch) * (size // (len(head) + 1) + 1))[:size]  # sample and character, over and over
    return ch * size + head  # a long run, then the sample


def hostile_lines(pattern: str | bytes, flags: int, size: int) -> Iterator[str]:
    """Candidate lines of about `size` characters for `pattern` (str; a bytes pattern gets
    latin-1 text to encode)."""
    for r in recipes(pattern, flags):
        yield build(r, size)
