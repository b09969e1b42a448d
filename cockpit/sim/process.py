"""The process habits every simulated engine shares with the real ones: a kernel name (what ps and
dmesg show) and dying with the parent (PR_SET_PDEATHSIG), both through prctl."""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1


def set_process_name(name: str) -> None:
    """The kernel's comm (15 characters), what ps -o comm and dmesg show: `sglang::schedul`."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def die_with_parent() -> None:
    """A worker kills itself when the main process dies (PR_SET_PDEATHSIG), as SGLang's schedulers and vLLM's workers do."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
