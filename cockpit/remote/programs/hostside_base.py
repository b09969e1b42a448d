"""The host program's base: run files, the log's safety checks, /proc. Stdlib only, Python 3.8+.

On a host this text runs first, then hostside.py's (HostOps sends both on stdin, in that order):
nothing is installed there. Here, hostside.py imports these names from this module.

- Run files are written 0600 (temp file + rename) in 0700 directories; a disk failure (full,
  quota, size limit, read-only) is a DiskError that names the file. They are read O_NOFOLLOW and
  only when they are regular files of the operator's that nobody else can write, and run
  directories must be the operator's (or the operator's own link to one): anything else is a
  RunTreeRefused naming the path and its owner (a `pid` planted in a shared runs root would name
  another process for `down` to signal).
- Each run writes its own log file, `<stem>.<run_id><ext>` beside the profile's `log:` path, which
  becomes a symlink Cockpit points at the current run's file. The run's file is opened for
  appending with O_NOFOLLOW and refused (LogRefused, with why) when it is a link, a file of another
  user or one every user can write, or when its directory belongs to another user or is writable by
  everyone without the sticky bit; the profile's path is refused when it is a link Cockpit did not
  make, a file of another user or one every user can write.
- Every process of a run carries RUN_TAG=<run dir> in its environment: a run whose directory was
  deleted is still found by its processes.
"""

import errno
import json
import os

try:  # here, from the package; on a host the text of runtree.py ran just before this file
    from cockpit.remote.programs.runtree import RunTreeRefused, _check_ours, _owner_name, _private_dir  # noqa: F401
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


def _write(path, text):
    """Write a run file, 0600, atomically (temp file + rename). A disk failure raises DiskError
    naming the file; the temp file is not left behind."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            data = text.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
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


def _proc_stat(pid):
    """(state, pgrp, session, starttime) from /proc/<pid>/stat, or None when gone/unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = data[data.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[2]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]


def _alive(pid):
    """Alive and not a zombie."""
    if pid is None or pid <= 0:
        return False
    st = _proc_stat(pid)
    if st is not None:
        return st[0] not in ("Z", "X")
    if os.path.isdir("/proc/self"):
        return False
    try:  # no /proc (not Linux): the signal-0 probe
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_json(path):
    text = _read(path)  # the same checks as every run file
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def _run_tag(pid):
    """The COCKPIT_RUN_DIR a process was started with (its initial environment), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    key = RUN_TAG.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("utf-8", "replace")
    return None


WAITER_NAME = "cockpit-waiter"  # the waiter's process name (/proc/<pid>/comm, `ps -o comm`)


def name_waiter():
    """Name this process (the waiter) so runs can be found from /proc/<pid>/stat alone."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(WAITER_NAME)
    except OSError:
        pass


def _stat_fields(pid):
    """(comm, state, ppid) from /proc/<pid>/stat (no lock on the process's memory), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    comm = data[data.find("(") + 1 : data.rfind(")")]
    rest = data[data.rfind(")") + 2 :].split()
    try:
        return comm, rest[0], int(rest[1])
    except (IndexError, ValueError):
        return None


def _tagged_processes(pdir):
    """{run_dir: [server pid]} of live runs of this profile directory, found without their run
    directories: the waiters (by name, from /proc/<pid>/stat), then the tag in their children's
    environment. Only those few environments are read: reading another process's memory can
    block behind its own (a process stuck on a hung filesystem)."""
    out = {}  # type: dict[str, list[int]]
    if not os.path.isdir("/proc"):
        return out
    prefix = pdir.rstrip("/") + "/"
    me = os.getuid()
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                procs[int(name)] = fields
    waiters = {pid for pid, (comm, _st, _pp) in procs.items() if comm == WAITER_NAME}
    for pid, (_comm, state, ppid) in procs.items():
        if ppid not in waiters or state in ("Z", "X", "D"):
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != me:
                continue  # a run's processes are ours; others' environments are not read
        except OSError:
            continue
        tag = _run_tag(pid)
        if tag and tag.startswith(prefix) and "/" not in tag[len(prefix):]:
            out.setdefault(tag, []).append(pid)
    return out


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
        return int(data[data.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class LogRefused(Exception):
    """The log path is not safe to write (another user's file or link, a directory others write)."""


def _check_log_dir(path):
    st = os.stat(path)
    me = os.getuid()
    if st.st_uid not in (me, 0):
        raise LogRefused(f"log directory {path} belongs to {_owner_name(st.st_uid)}, not to "
                         f"{_owner_name(me)}: they could replace the log with a link to any of your files")
    if st.st_mode & 0o002 and not st.st_mode & 0o1000:
        raise LogRefused(f"log directory {path} can be written by every user (mode {st.st_mode & 0o7777:04o}, "
                         "no sticky bit): another user could put a link or their own file where the log goes")


def _open_log(log_path):
    """The log, opened for appending without following a link, and checked: a regular file of
    ours that no other user can write. Returns (fd, size at open, inode)."""
    log_dir = os.path.dirname(log_path)
    os.makedirs(log_dir, exist_ok=True)
    _check_log_dir(log_dir)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
    # Looked at first for a clear message (the kernel's protected_symlinks/regular may answer a
    # planted file with a bare EACCES); O_NOFOLLOW and fstat below close the race.
    try:
        lst = os.lstat(log_path)
    except OSError:
        lst = None
    if lst is not None and (os.path.islink(log_path) or lst.st_uid != os.getuid()):
        if os.path.islink(log_path):
            raise LogRefused(f"log {log_path} is a symbolic link (to {os.readlink(log_path)!r}): refusing to "
                             "append to whatever it points at; remove it, or name the real file as the log")
        raise LogRefused(f"log {log_path} belongs to {_owner_name(lst.st_uid)}, not to {_owner_name(os.getuid())}; "
                         "move it aside (or fix its owner) and launch again")
    try:
        # a new log is 0600: SGLang prints its server_args (an --api-key among them) into it
        fd = os.open(log_path, flags | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LogRefused(f"log {log_path} is a symbolic link (to {os.readlink(log_path)!r}): refusing to "
                             "append to whatever it points at; remove it, or name the real file as the log") from None
        raise
    os.set_blocking(fd, True)
    st = os.fstat(fd)
    why = None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != os.getuid():
        why = f"belongs to {_owner_name(st.st_uid)}, not to {_owner_name(os.getuid())}"
    elif st.st_mode & 0o002:
        why = f"can be written by every user (mode {st.st_mode & 0o777:04o}): their lines would read as the server's"
    if why:
        os.close(fd)
        raise LogRefused(f"log {log_path} {why}; move it aside (or fix its owner/mode) and launch again")
    return fd, st.st_size, st.st_ino


# ---- one log file per run ------------------------------------------------------------------
# The profile's `log:` (logs/sglang.log) names a symlink that Cockpit points at the current run's
# own file, logs/sglang.<run_id>.log, so `tail -F logs/sglang.log` shows the current run and
# every earlier run keeps its whole log (docs/OPERATIONS.md, "One log file per run").


def run_log_path(log_path, run_id):
    """`logs/sglang.log` -> `logs/sglang.<run_id>.log`: the file this run writes."""
    head, name = os.path.split(log_path)
    stem, ext = os.path.splitext(name)
    return os.path.join(head, f"{stem}.{run_id}{ext}")


def _our_log_link(log_path, lst):
    """A symlink Cockpit made: ours, pointing at a run file beside it (a bare `<stem>.….<ext>` name)."""
    import stat as _stat

    if not _stat.S_ISLNK(lst.st_mode) or lst.st_uid != os.getuid():
        return False
    target = os.readlink(log_path)
    stem, ext = os.path.splitext(os.path.basename(log_path))
    return "/" not in target and target.startswith(stem + ".") and target.endswith(ext) and target != os.path.basename(log_path)


def check_log_link(log_path):
    """Refuse (LogRefused, before anything is written) a profile log path Cockpit may not repoint:
    a link it did not make, a file of another user or one every user can write. Returns what is
    there: None, "link" (ours) or "file" (the one log runs appended to before; kept, renamed)."""
    log_dir = os.path.dirname(log_path)
    os.makedirs(log_dir, exist_ok=True)
    _check_log_dir(log_dir)
    try:
        lst = os.lstat(log_path)
    except FileNotFoundError:
        return None
    import stat as _stat

    if _stat.S_ISLNK(lst.st_mode):
        if _our_log_link(log_path, lst):
            return "link"
        raise LogRefused(f"log {log_path} is a symbolic link (to {os.readlink(log_path)!r}) that Cockpit did not make: "
                         "refusing to replace or follow it; remove it, or name another log path")
    if lst.st_uid != os.getuid():
        raise LogRefused(f"log {log_path} belongs to {_owner_name(lst.st_uid)}, not to {_owner_name(os.getuid())}; "
                         "move it aside (or fix its owner) and launch again")
    if not _stat.S_ISREG(lst.st_mode):
        raise LogRefused(f"log {log_path} is not a regular file; move it aside and launch again")
    if lst.st_mode & 0o002:
        raise LogRefused(f"log {log_path} can be written by every user (mode {lst.st_mode & 0o777:04o}): their lines "
                         "would read as the server's; move it aside (or fix its mode) and launch again")
    return "file"


def point_log_link(log_path, run_log, run_id, found):
    """Make `log_path` a symlink to this run's file (a relative name: the pair can be moved). A
    regular file there (`found == "file"`) is the appended log of earlier runs: it is renamed to
    `<stem>.before-<run_id><ext>`, never lost. The link is made under a fresh name and renamed
    over the old one, so a reader always finds one or the other."""
    head, name = os.path.split(log_path)
    if found == "file":
        stem, ext = os.path.splitext(name)
        os.rename(log_path, os.path.join(head, f"{stem}.before-{run_id}{ext}"))
    tmp = os.path.join(head, f".{name}.{run_id}.{os.getpid()}.link")
    os.symlink(os.path.basename(run_log), tmp)
    try:
        os.replace(tmp, log_path)
    except OSError:
        os.unlink(tmp)
        raise
