"""/proc readers for every program sent to a host: a process's stat fields, command line, name and
whether it is alive. Stdlib only, Python 3.8+, no imports from the modules sent after it.

Sent first to the telemetry agent (AGENT_PROGRAM) and ahead of proctree.py in the host program
(HOST_PROGRAM): both read the same files the same way. `stat` and `comm` never block behind a
process stuck in the kernel; `cmdline` and `environ` read the process's memory and can.
"""

import os


def _stat(pid):
    """(comm, [the fields after comm]) from /proc/<pid>/stat, or None when gone or unreadable.
    comm may hold spaces and parentheses: the fields begin after the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    return data[data.find("(") + 1 : data.rfind(")")], data[data.rfind(")") + 2 :].split()


def _proc_stat(pid):
    """(state, pgrp, session, starttime), or None when gone/unreadable."""
    st = _stat(pid)
    try:
        return (st[1][0], int(st[1][2]), int(st[1][3]), int(st[1][19])) if st else None
    except (IndexError, ValueError):
        return None


def _stat_fields(pid):
    """(comm, state, ppid), or None."""
    st = _stat(pid)
    try:
        return (st[0], st[1][0], int(st[1][1])) if st else None
    except (IndexError, ValueError):
        return None


def _ppid(pid):
    fields = _stat_fields(pid)
    return fields[2] if fields else None


def _comm(pid):
    """The kernel's name of the process (15 characters; a title set with prctl), or None."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _nul_list(pid, name):
    """/proc/<pid>/<name> (cmdline, environ) as its NUL-separated strings, or None."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]


def _cmdline(pid):
    return _nul_list(pid, "cmdline")


def _environ(pid, keys):
    """{key: value} of the wanted keys in the environment the process was started with ({} when
    it cannot be read: another user's process). Reads the process's memory: it can block behind a
    process stuck in the kernel (state D), so callers leave those out."""
    out = {}
    for item in _nul_list(pid, "environ") or ():
        key, eq, value = item.partition("=")
        if eq and key in keys:
            out[key] = value
    return out


def _alive(pid):
    """Alive and not a zombie."""
    if pid is None or pid <= 0:
        return False
    st = _stat_fields(pid)
    if st is not None:
        return st[1] not in ("Z", "X")
    if os.path.isdir("/proc/self"):
        return False  # /proc works and has no such pid
    try:  # no /proc (not Linux): the signal-0 probe
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True
