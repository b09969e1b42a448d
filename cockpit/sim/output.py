"""Writing a simulated server's log to its stderr.

Every record is one `os.write` of whole lines, so that the main process and the rank processes,
which share the same stderr, never interleave inside a line (the same guarantee a real server gets
from its logging handlers, as long as lines stay short of the pipe buffer).
"""

from __future__ import annotations

import os


def write_raw(text: str, fd: int = 2) -> None:
    data = text.encode("utf-8", "replace")
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:
        # stderr closed or a full disk: the simulated server keeps running, like one whose
        # terminal went away.
        pass
