"""Which filesystem holds Cockpit's state directory: a network one gets no SQLite WAL.

SQLite's WAL mode keeps its index in a shared-memory file (`-shm`, mmap'd by every process that
opens the database) and its documentation says it does not work over a network filesystem
(https://www.sqlite.org/wal.html, "WAL does not work over a network filesystem"): on NFS two hosts
— or one host with a stale cache — can corrupt the journal. Jump hosts often mount `$HOME` over
NFS. There the journal uses SQLite's rollback journal (`journal_mode=DELETE`), which relies only
on POSIX locks, and says so (`NetworkFs.note`).

The filesystem type comes from the kernel's mount table, `/proc/self/mountinfo` (the mount whose
mount point is the longest prefix of the path wins, as the kernel resolves it); a path that does
not exist yet is looked up by its nearest existing parent. The table's path is a parameter, so a
test can hand a mount table of its own in the same format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"

# fstype words as mountinfo writes them (the kernel's filesystem names, FUSE's `fuse.NAME`)
NETWORK_FS_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p",
    "lustre", "gpfs", "ceph", "glusterfs", "beegfs", "ocfs2", "gfs2", "orangefs", "pvfs2",
    "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs", "fuse.ceph-fuse", "fuse.s3fs", "fuse.gcsfuse",
    "fuse.rclone", "fuse.juicefs", "fuse.lustre", "fuse.beegfs", "fuse.weka", "wekafs", "fuse.mfs",
})


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\040, \\011, \\012, \\134."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo table (proc(5)): `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS
    [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`. Lines that do not parse are skipped."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        head, tail = left.split(), right.split()
        if len(head) < 5 or not tail:
            continue
        mounts.append(Mount(_unescape(head[4]), tail[0], _unescape(tail[1]) if len(tail) > 1 else ""))
    return mounts


def mount_of(path: str | Path, mounts: list[Mount]) -> Mount | None:
    """The mount holding `path`: the longest mount point that is the path or one of its parents
    (the last such line wins, as a later mount over the same point hides the earlier one)."""
    p = Path(path)
    while not p.exists() and p.parent != p:
        p = p.parent
    real = os.path.realpath(p)
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        holds = real == mp or mp == "/" or real.startswith(mp + "/")
        if holds and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best


@dataclass(frozen=True)
class NetworkFs:
    mount: Mount

    @property
    def note(self) -> str:
        m = self.mount
        return (f"the journal's directory is on a network filesystem ({m.fstype} {m.source} at {m.mount_point}): "
                "SQLite's WAL needs shared memory between processes and is unsafe there, so the journal "
                "uses a rollback journal (slower under concurrent readers); set XDG_DATA_HOME to a local "
                "directory to keep it off the network")


def network_fs(path: str | Path, mountinfo: str | Path = MOUNTINFO) -> NetworkFs | None:
    """The network filesystem holding `path`, or None (a local one, or no mount table to read:
    then WAL, as before)."""
    try:
        text = Path(mountinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = mount_of(path, parse_mountinfo(text))
    if m is None:
        return None
    return NetworkFs(m) if m.fstype in NETWORK_FS_TYPES else None
