"""Issue 18 items 9 and 11: profile names cannot alias a multi-node node's run directory;
bombs, floods and duplicate keys in a profile are refused with exit 2 naming the file; a
`--set` value with a newline is refused; a journal on a read-only filesystem is called read-only.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.reliability.helpers import PY, make_env, wait_for, writer_script


def _refused_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    for w in words:
        assert w in done.stderr, done.stderr


def test_nesting_bomb_is_exit_2_naming_the_file(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    for name, text in (("brackets", "name: brackets\nserver: " + "[" * 100_000 + "\n"),
                       ("braces", "name: braces\nserver: " + "{a: " * 50_000 + "\n"),
                       ("indent", "name: indent\nserver:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000)))):
        path = env.write_profile(name, text)
        t0 = time.monotonic()
        done = env.cockpit("check", str(path))
        ledger.tried("profiles")
        _refused_2(done, str(path))
        assert time.monotonic() - t0 < 20
    ledger.fault("profiles", 3)
    ledger.survive("profiles", 3)


def test_huge_server_map_is_refused_fast(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    path = env.write_profile("flood", "name: flood\nserver:\n" + "".join(f"  flag-{i}: {i}\n" for i in range(400_000)))
    t0 = time.monotonic()
    done = env.cockpit("check", str(path))
    took = time.monotonic() - t0
    ledger.tried("profiles")
    _refused_2(done, str(path), "KiB")
    assert took < 5, took
    ledger.note(f"400k-key profile refused in {took:.2f} s (was 34 s and 623 MB)")
    ledger.fault("profiles")
    ledger.survive("profiles")


def test_duplicate_keys_are_refused_naming_both_lines(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    path = env.write_profile("dup", "name: dup\nserver:\n  model-path: /m\n  tp: 8\n  port: 30000\n  tp: 4\n")
    done = env.cockpit("check", str(path))
    ledger.tried("profiles")
    _refused_2(done, str(path), "tp", "line 4", "line 6")
    top = env.write_profile("dup2", "name: dup2\nworkdir: /a\nname: other\n")
    _refused_2(env.cockpit("check", str(top)), "name", "line 1", "line 3")
    ledger.fault("profiles", 2)
    ledger.survive("profiles", 2)


def test_set_with_a_newline_is_refused(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    stop = tmp_path / "stop"
    env.write_profile("nl", f"name: nl\nprogram: {json.dumps([PY, str(writer_script(tmp_path)), str(stop), '0.05'])}\n"
                            f"workdir: {tmp_path / 'work'}\nserver:\n  model-path: /m\n")
    for value in ("model-path=a\nb", "model-path=a\rb", "--model-path=a\nrm -rf ~"):
        done = env.cockpit("up", "nl", "--set", value)
        ledger.tried("profiles")
        _refused_2(done, "--set", "newline")
    assert not (env.runs_root / "nl").exists()  # nothing was launched
    stop.touch()
    ledger.fault("profiles", 3)
    ledger.survive("profiles", 3)


def test_profile_named_like_a_node_directory_is_refused(ssh_home, tmp_path: Path, ledger) -> None:
    """`mn` runs on two nodes; node 1 keeps its runs under `mn.node1`. A profile named `mn.node1`
    is refused (exit 2), so `down mn.node1` can never stop mn's node 1."""
    env = make_env(tmp_path, ssh_home.env)
    stop = tmp_path / "stop"
    program = json.dumps([PY, str(writer_script(tmp_path)), str(stop), "0.05"])
    env.write_profile("mn", f"name: mn\nhosts:\n  - ssh: gpu-box-1\n  - ssh: gpu-box-2\nprogram: {program}\n"
                            f"workdir: {tmp_path / 'work'}\nlog: logs/mn.log\nserver:\n  model-path: {tmp_path}\n  tp: 2\n")
    alias = env.write_profile("mn.node1", f"name: mn.node1\nhosts:\n  - ssh: gpu-box-2\nprogram: {program}\n"
                                          f"workdir: {tmp_path / 'work'}\nlog: logs/other.log\n")
    up = env.cockpit("up", "mn", "--wait", "started")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        node1 = env.runs_root / "mn.node1"
        assert wait_for(lambda: (node1 / "current").exists(), 10)
        pid1 = int((env.current_run("mn.node1") / "pid").read_text())
        for args in (("down", "mn.node1"), ("up", "mn.node1"), ("status", "mn.node1")):
            done = env.cockpit(*args)
            ledger.tried("profiles")
            _refused_2(done, str(alias), ".node")
        assert os.path.exists(f"/proc/{pid1}"), "mn's node 1 was stopped by another profile"
        ledger.fault("profiles", 3)
        ledger.survive("profiles", 3)
    finally:
        stop.touch()
        env.cockpit("down", "mn", "--timeout", "5")


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 4 MiB tmpfs of our own (mount works as root here; CI runs as root)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here ({done.stderr.strip()}): these tests need root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_journal_on_a_read_only_filesystem_is_called_read_only(tmp_path: Path, small_fs: Path, ledger) -> None:
    from cockpit.journal import Journal
    from cockpit.journal.schema import JournalError

    env = make_env(tmp_path)
    data = small_fs / "xdg-data"
    env.env["XDG_DATA_HOME"] = str(data)
    path = data / "cockpit" / "journal.sqlite3"
    Journal.open(path).close()  # a valid, current (WAL) journal
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    ledger.fault("journal")
    done = env.cockpit("runs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not a Cockpit journal" not in done.stdout + done.stderr
    with pytest.raises(JournalError) as ei:
        Journal.open(path)
    assert "read-only" in str(ei.value) and "not a Cockpit journal" not in str(ei.value)
    # a command that would record a run says the journal is read-only (and still works)
    env.write_profile("ro", f"name: ro\nprogram: ['true']\nworkdir: {tmp_path / 'work'}\n")
    st = env.cockpit("status", "ro")
    assert st.returncode == 0, st.stderr
    assert "read-only" in st.stderr and "not a Cockpit journal" not in st.stderr, st.stderr
    ledger.survive("journal")
