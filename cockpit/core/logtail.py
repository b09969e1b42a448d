"""The decisive lines at the end of a log: what an operator must read when a launch failed and no
crash signature explained it (a missing module, a usage error, a shell error).

Pure text in, text out: the last Python traceback's header, its last frame and its exception line
(with any chained "During handling…" context dropped), else the last non-empty lines.
"""

from __future__ import annotations

from cockpit.core.sanitize import clean_text

TRACEBACK = "Traceback (most recent call last):"


def decisive_tail(lines: list[str], limit: int = 6) -> list[str]:
    """At most `limit` lines from the end of `lines` that say why the process ended."""
    text = [clean_text(ln.rstrip("\r\n")) for ln in lines]
    text = [ln for ln in text if ln.strip()]
    if not text:
        return []
    start = max((i for i, ln in enumerate(text) if ln.rstrip().endswith(TRACEBACK)), default=None)
    if start is None:
        return text[-limit:]
    block = text[start:]
    # the exception line: the first line after the frames that is not indented
    exc_at = next((i for i in range(1, len(block)) if not block[i].startswith((" ", "\t"))), None)
    if exc_at is None:
        return block[-limit:]
    frames = block[1:exc_at]
    last_frame = frames[-2:] if len(frames) >= 2 else frames
    after = block[exc_at:]
    return ([block[0], *last_frame, *after])[:limit]
