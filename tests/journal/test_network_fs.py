"""The journal's directory on a network filesystem gets a rollback journal, never WAL (issue 39
item 2): the filesystem type is read from the kernel's mount table, `/proc/self/mountinfo`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cockpit.journal import Journal
from cockpit.journal.fs import MOUNTINFO, mount_of, network_fs, parse_mountinfo

from .helpers import ready_state, run_info


def _mountinfo(tmp_path: Path, state_dir: Path, fstype: str, source: str) -> Path:
    """A mount table in the kernel's format: / on overlay, the state directory on `fstype`."""
    path = tmp_path / "mountinfo"
    mp = str(state_dir).replace(" ", "\\040")
    path.write_text(
        "22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
        "25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
        f"97 22 0:52 / {mp} rw,relatime shared:50 master:7 - {fstype} {source} rw,vers=4.2,rsize=1048576\n")
    return path


def test_the_mount_table_is_read_the_kernels_way(tmp_path: Path) -> None:
    state = tmp_path / "my state"  # a space: mountinfo writes it \\040
    state.mkdir()
    table = parse_mountinfo(_mountinfo(tmp_path, state, "nfs4", "filer:/home").read_text())
    assert [m.fstype for m in table] == ["overlay", "proc", "nfs4"]
    m = mount_of(state / "cockpit" / "journal.sqlite3", table)  # not there yet: its nearest parent
    assert m is not None and m.mount_point == str(state) and m.source == "filer:/home"
    assert mount_of(tmp_path, table).fstype == "overlay"  # type: ignore[union-attr]


@pytest.mark.parametrize("fstype", ["nfs4", "nfs", "cifs", "smb3", "lustre", "gpfs", "fuse.sshfs"])
def test_a_network_state_directory_gets_a_rollback_journal_with_a_note(tmp_path: Path, fstype: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    table = _mountinfo(tmp_path, state, fstype, "filer:/export/home")
    db = state / "cockpit" / "journal.sqlite3"
    j = Journal.open(db, mountinfo=table)
    try:
        assert j.journal_mode == "delete"
        assert j.note is not None and fstype in j.note and "WAL" in j.note and "XDG_DATA_HOME" in j.note
        j.record_start(run_info("r1"), "p", {})
        j.record_progress("r1", ready_state(), [])
        assert not db.with_name(db.name + "-wal").exists() and not db.with_name(db.name + "-shm").exists()
    finally:
        j.close()
    assert Journal.open(db, readonly=True).get("r1") is not None


def test_a_wal_journal_moved_onto_a_network_filesystem_is_turned_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    db = state / "journal.sqlite3"
    Journal.open(db).close()  # local: WAL, as before
    j = Journal.open(db, mountinfo=_mountinfo(tmp_path, state, "nfs4", "filer:/home"))
    try:
        assert j.journal_mode == "delete"
    finally:
        j.close()


def test_a_local_state_directory_keeps_wal(tmp_path: Path) -> None:
    table = _mountinfo(tmp_path, tmp_path / "elsewhere", "nfs4", "filer:/x")
    j = Journal.open(tmp_path / "journal.sqlite3", mountinfo=table)
    try:
        assert j.journal_mode == "wal" and j.note is None
    finally:
        j.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a filesystem needs root")
def test_the_real_mount_table_names_a_real_mount(tmp_path: Path) -> None:
    """A tmpfs mounted here is found in the kernel's own table with its type; and a journal on it
    is WAL (tmpfs is local)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "cockpit-test", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount refused here: {done.stderr.strip()}")
    try:
        m = mount_of(mnt / "journal.sqlite3", parse_mountinfo(Path(MOUNTINFO).read_text()))
        assert m is not None and m.fstype == "tmpfs" and m.source == "cockpit-test" and m.mount_point == str(mnt)
        assert network_fs(mnt) is None
        j = Journal.open(mnt / "journal.sqlite3")
        try:
            assert j.journal_mode == "wal"
        finally:
            j.close()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
