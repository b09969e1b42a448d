"""The engine's message under Python logging's own format (issue 35, items 1 and 5).

An engine's logger can be given any format by its operator (vLLM's VLLM_LOGGING_CONFIG_PATH, an
embedding program's `logging.basicConfig`, a launcher that re-logs the child's lines): the engine's
record head is then replaced by something like `2025-11-02 13:17:04,315 - vllm.v1.engine.core_client
- ERROR - Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.` or `2025-11-02
13:17:04 [ERROR] sglang.srt.managers.scheduler: …`. What says the line is the engine's is its logger
name (`vllm.…`, `sglang.…`, the engine's module path). The text after the logger name and its
level is the engine's message, read as the engine's bare text (its failure signatures, tracebacks).

Only tried on a line that holds the engine's name followed by a dot, and only when the logger name
sits in the line's first 120 characters after a time or a level word (prose that mentions a module
is not a log line).
"""

from __future__ import annotations

import re

_RX = {
    engine: re.compile(
        r"(?P<pre>[^\n]{0,120}?)(?<![\w./])(?P<logger>" + engine + r"(?:\.\w+)+)"
        r"(?P<sep>\s*(?:-|:|\||\])\s*(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s*(?:-|:|\|)\s*)?)"
    )
    for engine in ("sglang", "vllm")
}
_RX_TIME_OR_LEVEL = re.compile(r"\d\d:\d\d:\d\d|\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_RX_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d:\d\d:\d\d)")
_RX_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


def peel(engine: str, text: str) -> str | None:
    """The engine's line inside a Python-logging line of its logger, or None (not one). With a date
    and time in the outer format, the message is given the engine's own record head back (SGLang
    `[YYYY-MM-DD HH:MM:SS] `, vLLM `LEVEL MM-DD HH:MM:SS [module.py:0] `, no rank: the format
    printed none), so that what only a record says (`Rank 3 scheduler is dead`) reads as one."""
    if engine + "." not in text[:240]:
        return None
    m = _RX[engine].match(text)
    if m is None or not m.group("sep").strip() or _RX_TIME_OR_LEVEL.search(m.group("pre")) is None:
        return None
    rest = text[m.end():]
    if not rest.strip():
        return None
    around = m.group("pre") + m.group("sep")
    st = _RX_STAMP.search(around)
    if st is None or rest.startswith(("Traceback", " ", "[")):
        return rest
    if engine == "sglang":
        return f"[{st[1]}-{st[2]}-{st[3]} {st[4]}] {rest}"
    lv = _RX_LEVEL.search(around)
    return f"{lv[1] if lv else 'INFO'} {st[2]}-{st[3]} {st[4]} [{m.group('logger').rpartition('.')[2]}.py:0] {rest}"
