"""The run tree's trust checks, shared by the host program and the login-node program. Stdlib only,
Python 3.8+.

Sent first, ahead of either program's text (cockpit/remote/programs/__init__.py `assemble`): a run
directory must be the operator's (or the operator's own link to one) and writable by nobody else,
and a run file a regular file of the operator's that nobody else can write. Anything else is a
RunTreeRefused naming the path, what it is and its owner: a `pid` or `job_id` planted in a shared
tree would name another user's process or job for `down` to end. Each program words the advice
that follows (`hint`).
"""

import os


class RunTreeRefused(Exception):
    """A run directory or run file that is not the operator's alone (another user's, a link, one
    others can write): what it holds could name anyone's process or job, so nothing of it is used."""

    hint = ("refusing to use that run tree (runs root shared with another user? remove it, or point "
            "COCKPIT_RUNS_ROOT at a directory of your own)")

    def __init__(self, path, why):
        super().__init__(f"{path} {why}; {self.hint}")
        self.path = path
        self.why = why


def _expand(path):
    return os.path.abspath(os.path.expanduser(path))


def _owner_name(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _check_ours(path, st, kind):
    """`st` (lstat/fstat of `path`) is a `kind` ("dir"/"file") of ours that only we can write."""
    import stat as _stat

    me = os.getuid()
    owner = _owner_name(st.st_uid)
    if _stat.S_ISLNK(st.st_mode):
        raise RunTreeRefused(path, f"is a symbolic link (owned by {owner})")
    if (kind == "dir" and not _stat.S_ISDIR(st.st_mode)) or (kind == "file" and not _stat.S_ISREG(st.st_mode)):
        raise RunTreeRefused(path, f"is not a {'directory' if kind == 'dir' else 'regular file'} (owned by {owner})")
    if st.st_uid != me:
        raise RunTreeRefused(path, f"belongs to {owner}, not to {_owner_name(me)}")
    if st.st_mode & 0o022:
        raise RunTreeRefused(path, f"can be written by other users (mode {st.st_mode & 0o7777:04o}, owner {owner})")


def _trusted_dir(path):
    """True when `path` is a directory of ours only we can write (one of ours with a loose mode,
    left by an older Cockpit, is tightened to 0700 first; a link of ours has its target checked);
    False when it does not exist; RunTreeRefused when it is anything else."""
    import stat as _stat

    try:
        st = os.lstat(path)
        if _stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid():
            st = os.stat(path)  # a link of the operator's own (runs kept on another disk): its target is checked
    except FileNotFoundError:
        return False
    if st.st_uid == os.getuid() and _stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077:
        os.chmod(path, 0o700)
        st = os.stat(path)
    _check_ours(path, st, "dir")
    return True


def _private_dir(path):
    """`path` 0700 and ours (a run's files say what it runs, with which env): created (missing
    directories above it get the usual mode: they are the operator's), or an existing one checked
    as `_trusted_dir` does."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    _trusted_dir(path)
