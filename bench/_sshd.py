"""A real OpenSSH server on loopback for the remote benchmarks, set up the way the test fixtures do
(tests/conftest.py's `_Sshd`, reused): a throw-away HOME whose ~/.ssh/config names it `gpu-box-1`,
its host key pinned in known_hosts. The caller points HOME at `home` before connecting."""

from __future__ import annotations

import getpass
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from _common import REPO


def _conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cockpit_tests_conftest", REPO / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


class LoopbackSshd:
    def __init__(self, root: Path) -> None:
        ct = _conftest()
        self.home = root / "home"
        dot = self.home / ".ssh"
        dot.mkdir(parents=True)
        os.chmod(self.home, 0o755)
        os.chmod(dot, 0o700)
        key = dot / "id_ed25519"
        ct._keygen(key, "cockpit-bench")
        authorized = root / "authorized_keys"
        authorized.write_text(key.with_suffix(".pub").read_text())
        os.chmod(authorized, 0o600)
        self.sshd = ct._Sshd(root, "bench", authorized)
        self.sshd.start_on_free_port()
        self.port = self.sshd.port
        known = dot / "known_hosts"
        known.write_text(f"[127.0.0.1]:{self.port} ssh-ed25519 {self.sshd.host_key_b64}\n")
        cfg = dot / "config"
        cfg.write_text(
            f"Host gpu-box-1\n  HostName 127.0.0.1\n  Port {self.port}\n  User {getpass.getuser()}\n"
            f"  IdentityFile {key}\n  IdentitiesOnly yes\n  BatchMode yes\n  ConnectTimeout 5\n"
            f"  UserKnownHostsFile {known}\n"
        )
        os.chmod(cfg, 0o600)

    def connections(self) -> list[int]:
        """The per-connection sshd processes (one per SSH connection)."""
        return self.sshd.children()

    def stop(self) -> None:
        self.sshd.stop()
