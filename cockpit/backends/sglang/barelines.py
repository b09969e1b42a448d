"""SGLang's text outside its records (issue 35): what a crash dump or a progress bar says bare.

- faulthandler's frames (`File "…/sglang/srt/managers/scheduler.py", line 1419 in watchdog_thread`,
  no comma before `in`: a fatal signal's dump of every thread) are frames like a traceback's;
- the capture's progress bar (`Capturing batches (bs=496 avail_mem=20.14 GB):   2%|…`, 0.4.6+) is
  the capture running even when its `Capture cuda graph begin` record is not in view.
"""

from __future__ import annotations

from cockpit.backends.framephase import frame_phase
from cockpit.backends.sglang.textutil import lazy
from cockpit.core import events as ev
from cockpit.core.events import Event

_RX_FAULT_FRAME = lazy(r'^\s*File "([^"]*)", line \d+ in (\S+)\s*$')
_NONE, _GENERIC, _STRONG = 0, 1, 2  # failures.py's recognition classes


def classify(line: int, rank: str | None, s: str, out: list[Event]) -> int | None:
    """The recognition class of a bare line read here, or None (not one of these)."""
    if s.startswith("File ") and " in " in s:
        m = _RX_FAULT_FRAME.match(s)
        if m is None:
            return None
        file, func = m.group(1), m.group(2)
        out.append(ev.TracebackFrame(line, None, rank, func, file, frame_phase("sglang", file, func)))
        return _STRONG if "sglang" in file else _GENERIC
    if s.startswith("Capturing batches (") and "%|" in s:
        out.append(ev.GraphCaptureBegin(line, None, rank, "cuda graph", None))
        return _STRONG
    return None
