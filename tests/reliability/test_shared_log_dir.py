"""Issue 18 item 3: a log path in a shared workdir cannot be redirected by another user.

Another local user (`nobody`, through runuser) prepares the log's place in a shared workdir: a
symlink to a 0600 file of ours, or a 0666 file of their own; or the log directory is writable by
everyone. `cockpit up` must refuse, say why, write nothing through the link, and launch nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.reliability.helpers import make_env, writer_profile


def as_nobody(*argv: str) -> None:
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    subprocess.run([runuser, "-u", "nobody", "--", *argv], check=True, capture_output=True, timeout=30)


@pytest.fixture
def shared(tmp_path: Path):
    """A shared workdir the user nobody can reach (pytest's own tmp dirs are 0700)."""
    if os.geteuid() != 0:
        pytest.fail("this test acts as the user nobody: run it as root (CI does)")
    work = Path(tempfile.mkdtemp(prefix="cockpit-shared-", dir="/tmp"))
    os.chmod(work, 0o755)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _setup(tmp_path: Path, work: Path, logs_mode: int):
    env = make_env(tmp_path)
    logs = work / "logs"
    logs.mkdir()
    os.chmod(logs, logs_mode)
    env.write_profile("shared", writer_profile("shared", "local", tmp_path, tmp_path / "stop", delay=0.01)
                      .replace("logs/shared.log", "logs/server.log").replace(str(tmp_path / "work"), str(work)))
    return env, logs / "server.log"


def _current_log(env) -> Path:
    d = env.runs_root / "shared"
    return Path((d / (d / "current").read_text().strip() / "log_path").read_text())


def test_a_link_of_ours_to_elsewhere_is_refused(tmp_path: Path, shared: Path, ledger) -> None:
    """Only a link Cockpit made (a bare `server.<run id>.log` name beside it) is repointed."""
    env, log = _setup(tmp_path, shared, 0o755)
    victim = tmp_path / "home" / "private.txt"
    victim.write_bytes(b"mine\n")
    log.symlink_to(victim)
    _refused(env, ledger, "symbolic link", "Cockpit did not make", str(log))
    assert victim.read_bytes() == b"mine\n" and os.readlink(log) == str(victim)


def test_the_log_runs_appended_to_before_is_kept(tmp_path: Path, shared: Path, ledger) -> None:
    """The one log earlier runs appended to is renamed `<stem>.before-<run id>.log`, never lost."""
    env, log = _setup(tmp_path, shared, 0o755)
    log.write_text("an earlier run\n")
    os.chmod(log, 0o600)
    up = env.cockpit("up", "shared", "--wait", "started")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_log = _current_log(env)
        kept = log.parent / f"server.before-{run_log.name.split('.')[1]}.log"
        assert kept.read_text() == "an earlier run\n"
        assert os.readlink(log) == run_log.name
    finally:
        (tmp_path / "stop").touch()
        env.cockpit("down", "shared", "--timeout", "5")


def _refused(env, ledger, *words: str) -> None:
    ledger.fault("files")
    up = env.cockpit("up", "shared", "--wait", "started", "--timeout", "20")
    try:
        assert up.returncode == 1, up.stdout + up.stderr
        assert "Traceback" not in up.stderr
        for w in words:
            assert w in up.stderr, up.stderr
        assert not (env.runs_root / "shared" / "current").exists()  # nothing launched
    finally:
        (env.root / "stop").touch()
    ledger.survive("files")


def test_symlink_planted_by_another_user_is_refused(tmp_path: Path, shared: Path, ledger) -> None:
    env, log = _setup(tmp_path, shared, 0o1777)  # a sticky shared dir, like /tmp
    victim = tmp_path / "home" / "private.txt"
    victim.write_bytes(b"mine\n")
    os.chmod(victim, 0o600)
    as_nobody("ln", "-s", str(victim), str(log))
    _refused(env, ledger, "symbolic link", str(log))
    assert victim.read_bytes() == b"mine\n"


def test_world_writable_file_of_another_user_is_refused(tmp_path: Path, shared: Path, ledger) -> None:
    env, log = _setup(tmp_path, shared, 0o1777)
    as_nobody("sh", "-c", f"echo '[2026-02-24 11:55:12 TP0] forged line' > {log} && chmod 666 {log}")
    _refused(env, ledger, "belongs to nobody", str(log))
    logs = env.cockpit("logs", "shared")
    assert "forged line" not in logs.stdout


def test_our_own_world_writable_log_is_refused(tmp_path: Path, shared: Path, ledger) -> None:
    env, log = _setup(tmp_path, shared, 0o755)
    log.write_text("old\n")
    os.chmod(log, 0o666)
    _refused(env, ledger, "can be written by every user", str(log))


def test_world_writable_log_directory_is_refused(tmp_path: Path, shared: Path, ledger) -> None:
    env, log = _setup(tmp_path, shared, 0o777)  # no sticky bit: anyone can replace the log at any time
    _refused(env, ledger, "can be written by every user", str(log.parent))


def test_a_private_log_directory_still_launches(tmp_path: Path, shared: Path, ledger) -> None:
    env, log = _setup(tmp_path, shared, 0o755)
    # seconds alone; once, beside the real engines' chain and the serial stories, past 120 s
    up = env.cockpit("up", "shared", "--wait", "started", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # the profile's path is Cockpit's own link to the run's file: a regular file of ours, 0600
        run_log = _current_log(env)
        assert log.exists() and log.is_symlink() and os.readlink(log) == run_log.name
        assert run_log.parent == log.parent and run_log.is_file() and not run_log.is_symlink()
        assert run_log.stat().st_uid == os.getuid() and run_log.stat().st_mode & 0o777 == 0o600
        assert log.lstat().st_uid == os.getuid()
    finally:
        (tmp_path / "stop").touch()
        env.cockpit("down", "shared", "--timeout", "5")
