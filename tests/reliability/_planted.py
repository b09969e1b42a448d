"""Planting files as another real local user (issue 27): `nobody` through runuser, in a shared
directory under /tmp that the user can reach (pytest's own tmp dirs are 0700).

These tests fail (never skip) when not run as root: switching user needs it, and CI runs as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

OTHER = "nobody"


def other_uid() -> int:
    return pwd.getpwnam(OTHER).pw_uid


def as_other(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run argv as the other local user (never through a shell)."""
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", OTHER, "--", *argv], check=check, capture_output=True, text=True,
                          timeout=30)


@contextmanager
def shared_dir(prefix: str = "cockpit-shared-", mode: int = 0o777) -> Iterator[Path]:
    """A directory every user may write (a shared project directory: `mode`, no sticky bit by
    default), removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this test acts as the user nobody: run it as root (CI does)")
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, mode)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
