"""The shared sshd fixture itself: the OpenSSH client can log in through every alias it promises."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.conftest import SshHome


def test_openssh_client_reaches_aliases(ssh_home: SshHome) -> None:
    for alias in ("gpu-box-1", "gpu-box-2", "via-jump"):
        out = subprocess.run(
            ssh_home.ssh_argv(alias, "echo", "ok"), env=ssh_home.env, capture_output=True, timeout=30
        )
        assert out.returncode == 0, (alias, out.stderr.decode())
        assert out.stdout == b"ok\n"


def test_unknown_key_is_refused_by_openssh_too(ssh_home: SshHome) -> None:
    out = subprocess.run(
        ssh_home.ssh_argv("unknown-key", "true"), env=ssh_home.env, capture_output=True, timeout=30
    )
    assert out.returncode == 255
