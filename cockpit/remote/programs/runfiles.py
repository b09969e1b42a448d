"""The host program's run files. Stdlib only, Python 3.8+.

Sent after runtree.py (the trust checks) and before proctree.py, logfiles.py and hostside.py
(cockpit/remote/programs/__init__.py HOST_PROGRAM): nothing is installed on the host. Imported from
the package (tests), the later modules import these names from here.

- Run files are written 0600 (temp file fsynced, renamed, directory fsynced) in 0700 directories; a disk failure (full,
  quota, size limit, read-only) is a DiskError that names the file. They are read O_NOFOLLOW and
  only when they are regular files of the operator's that nobody else can write (runtree.py):
  anything else is a RunTreeRefused naming the path and its owner (a `pid` planted in a shared
  runs root would name another process for `down` to signal).
- Every process of a run carries RUN_TAG=<run dir> in its environment: a run whose directory was
  deleted is still found by its processes (proctree.py).
"""

import errno
import json
import os

try:  # here, from the package; on a host the text of runtree.py and the modules before it ran just above
    from cockpit.remote.programs.runtree import _check_ours
except ImportError:
    pass


RUN_TAG = "COCKPIT_RUN_DIR"


_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


class DiskError(Exception):
    """A file of the run could not be written because of the disk (full, quota, size limit, RO)."""


def _disk_words(exc, path):
    what = {errno.ENOSPC: "disk full (ENOSPC)", errno.EDQUOT: "disk quota exceeded (EDQUOT)",
            errno.EFBIG: "file size limit reached (EFBIG)", errno.EROFS: "read-only filesystem (EROFS)"}
    return f"{what.get(exc.errno, exc.strerror)} writing {path}"


def _sync_dir(path):
    """fsync a directory: a file renamed into it is on disk only once the directory is. A
    filesystem that cannot sync a directory (EINVAL) has nothing more to give."""
    try:
        fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _write(path, text):
    """Write a run file, 0600, atomically and durably: a fresh temp file (a leftover or planted one
    is removed first, O_EXCL|O_NOFOLLOW: nothing is written through a link), its data fsynced,
    renamed over the old file, the directory fsynced. After a host crash the file is the old one
    or the new one, never empty. The one writer of run files for every program sent to a host or
    login node. A disk failure raises DiskError naming the file; the temp file is not left behind."""
    tmp = path + ".tmp"
    try:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            data = text.encode()
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _sync_dir(os.path.dirname(path))
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if exc.errno in _DISK_ERRNOS:
            raise DiskError(_disk_words(exc, path)) from None
        raise


def _read(path, default=None):
    """A run file's text; `default` when it is missing or unreadable. Opened without following a
    link and refused (RunTreeRefused) when it is not a regular file of ours that only we can
    write: a planted `pid` would name another process for `down` to signal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _check_ours(path, os.lstat(path), "file")
        return default
    with os.fdopen(fd, "rb") as f:
        _check_ours(path, os.fstat(fd), "file")
        return f.read(1 << 20).decode("utf-8", "replace").strip()


def _read_int(path):
    v = _read(path)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _read_json(path):
    text = _read(path)  # the same checks as every run file
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None
