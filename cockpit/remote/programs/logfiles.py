"""The host program's logs: the run's own log file and the profile's link to it (their safety
checks), and the operations that read them: `read` (bytes of a file), `scan` (where a big log's
head ends and its last lines begin) and `follow` (a stream from a byte offset). Stdlib only,
Python 3.8+; sent after proctree.py.

Each run writes its own log file, `<stem>.<run_id><ext>` beside the profile's `log:` path, which
becomes a symlink Cockpit points at the current run's file. The run's file is opened for appending
with O_NOFOLLOW and refused (LogRefused, with why) when it is a link, a file of another user or one
every user can write, or when its directory belongs to another user or is writable by everyone
without the sticky bit; the profile's path is refused when it is a link Cockpit did not make, a file
of another user or one every user can write.

Follow frames on stdout: a header line `F <json>\n`, followed by `len` raw bytes for data
frames. Data frames always end at a newline (a partial last line is held back until it is
complete, unless it exceeds the chunk cap), so a reconnect that resumes at off+len neither loses
nor repeats a line. Header kinds: start, data, reset (truncated/rotated: the next data is the
new file from 0), hb (heartbeat with the file size), exit (the watched pid died), error.
"""

import errno
import json
import os
import sys
import time

try:  # here, from the package; on a host the text of proctree.py and the modules before it ran just above
    from cockpit.remote.programs.oomwatch import OOM_EVIDENCE_FILE
    from cockpit.remote.programs.procfs import _alive
    from cockpit.remote.programs.proctree import _is_our_server
    from cockpit.remote.programs.runfiles import _read, _read_int, _sync_dir
    from cockpit.remote.programs.runtree import _expand, _owner_name
except ImportError:
    pass


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
    _sync_dir(head)  # the link, like the run files, survives a host crash


def op_scan(req):
    """Where to read a big log: the head (startup lines), the tail, and how many lines lie between.

    {path, offset, ino, head_bytes, tail_lines} -> {size, ino, offset, head_end, tail_start, skipped_lines}
    """
    path = _expand(req["path"])
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        size = st.st_size
        offset = int(req.get("offset", 0))
        if (req.get("ino") is not None and st.st_ino != req["ino"]) or size < offset:
            offset = 0
        head_end = min(size, offset + int(req.get("head_bytes", 64 << 20)))
        if head_end < size:
            f.seek(offset)
            head = f.read(head_end - offset)
            head_end = offset + head.rfind(b"\n") + 1
        tail_start = max(head_end, tail_offset(f, size, int(req.get("tail_lines", 20000)), head_end))
        skipped = 0
        f.seek(head_end)
        left = tail_start - head_end
        while left > 0:
            block = f.read(min(left, 4 << 20))
            if not block:
                break
            skipped += block.count(b"\n")
            left -= len(block)
    return {"size": size, "ino": st.st_ino, "offset": offset, "head_end": head_end,
            "tail_start": tail_start, "skipped_lines": skipped}


def op_read(req):
    import base64

    path = _expand(req["path"])
    start = max(0, int(req.get("start", 0)))
    end = int(req["end"]) if req.get("end") is not None else None
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read((end - start) if end is not None else -1)
    return {"start": start, "data": base64.b64encode(data).decode()}


# ---------------------------------------------------------------- follow


def _frame(out, head, payload=b""):
    out.write(b"F " + json.dumps(head, separators=(",", ":")).encode() + b"\n")
    if payload:
        out.write(payload)
    out.flush()


def tail_offset(f, end, lines, floor=0):
    """Byte offset where the last `lines` lines of [floor, end) begin; a partial last line counts."""
    if lines <= 0 or end <= floor:
        return end
    f.seek(end - 1)
    # the newline that ends the last line does not start one
    pos = end - 1 if f.read(1) == b"\n" else end
    seen = 0
    block = 65536
    while pos > floor:
        start = max(floor, pos - block)
        f.seek(start)
        buf = f.read(pos - start)
        idx = len(buf)
        while True:
            idx = buf.rfind(b"\n", 0, idx)
            if idx < 0:
                break
            seen += 1
            if seen == lines:
                return start + idx + 1
        pos = start
    return floor


def op_follow(req):
    out = sys.stdout.buffer
    path = _expand(req["path"])
    offset = int(req.get("offset", 0))
    want_ino = req.get("ino")
    follow = bool(req.get("follow", True))
    poll = float(req.get("poll", 0.1))
    cap = int(req.get("max_chunk", 256 * 1024))
    hb_every = float(req.get("heartbeat", 2.0))
    end = req.get("end")  # with follow false: stop at this byte (a head read)
    watch = req.get("watch") or {}
    watch_pid = watch.get("pid")
    watch_dir = watch.get("run_dir")
    f = None
    ino = None
    pending = b""  # an incomplete last line, held back until its newline arrives

    def open_file():
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open across polls
        except OSError:
            return None, None
        return fh, os.fstat(fh.fileno()).st_ino

    f, ino = open_file()
    if f is not None:
        size = os.fstat(f.fileno()).st_size
        if want_ino is not None and ino != want_ino:
            offset = 0  # rotated since the offset was taken
        if size < offset:
            offset = 0  # truncated
        if req.get("tail") is not None:
            offset = max(offset, tail_offset(f, size, int(req["tail"]), offset))
        if not follow and end is None:
            end = size  # a one-off read is the log as it is now (`--tail 5` prints 5 lines)
        f.seek(offset)
    _frame(out, {"t": "start", "off": offset, "ino": ino, "path": path})
    last_hb = time.time()
    exited = False
    dead_at = None
    last_check = 0.0
    check_every = float(req.get("watch_every", 0.25))
    while True:
        progressed = False
        if f is None:
            f, ino = open_file()
            if f is not None:
                offset = 0
                pending = b""
                _frame(out, {"t": "reset", "why": "created", "ino": ino})
        if f is not None:
            want = cap if end is None else max(0, min(cap, int(end) - offset - len(pending)))
            data = f.read(want) if want else b""
            if data:
                progressed = True
                buf = pending + data
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) >= cap:
                    cut = len(buf)  # a giant line without newline: emit rather than stall
                if cut:
                    _frame(out, {"t": "data", "off": offset, "len": cut, "ino": ino}, buf[:cut])
                    offset += cut
                pending = buf[cut:]
            elif end is not None:
                pass  # the head read is done: no rotation/truncation checks past `end`
            else:
                # at EOF: truncated or rotated?
                try:
                    st = os.stat(path)
                except OSError:
                    st = None
                cur_size = os.fstat(f.fileno()).st_size
                if st is not None and st.st_ino != ino:
                    # rotated: the old file is finished; emit its partial tail, then switch
                    if pending:
                        _frame(out, {"t": "data", "off": offset, "len": len(pending), "ino": ino}, pending)
                        pending = b""
                    f.close()
                    f, ino = open_file()
                    offset = 0
                    _frame(out, {"t": "reset", "why": "rotated", "ino": ino})
                    progressed = True
                elif cur_size < offset + len(pending):
                    f.seek(0)
                    offset = 0
                    pending = b""
                    _frame(out, {"t": "reset", "why": "truncated", "ino": ino})
                    progressed = True
        now = time.time()
        if watch_pid and dead_at is None and now - last_check >= check_every:
            # checked on a clock, not only when idle: a log kept busy by other writers must not
            # delay the news
            last_check = now
            alive = _is_our_server(watch_dir, watch_pid) if watch_dir else _alive(watch_pid)
            if not alive:
                dead_at = now
        if dead_at is not None and not exited and (not progressed or now - dead_at > 1.0):
            # the server's last lines were drained first (EOF), or 1 s of others' lines passed
            code = None
            deadline = time.time() + 1.0
            while watch_dir and code is None and time.time() < deadline:
                code = _read_int(os.path.join(watch_dir, "exit_code"))
                if code is None:
                    time.sleep(0.05)
            if pending:
                _frame(out, {"t": "data", "off": offset, "len": len(pending), "ino": ino}, pending)
                offset += len(pending)
                pending = b""
            stopped_by = _read(os.path.join(watch_dir, "stopped_by")) if watch_dir else None
            oom = _read(os.path.join(watch_dir, OOM_EVIDENCE_FILE)) if watch_dir else None
            _frame(out, {"t": "exit", "pid": watch_pid, "code": code, "stopped_by": stopped_by, "oom_evidence": oom})
            exited = True
        if not progressed:
            if not follow:
                if pending:
                    _frame(out, {"t": "data", "off": offset, "len": len(pending), "ino": ino}, pending)
                break
            now = time.time()
            if now - last_hb >= hb_every:
                _frame(out, {"t": "hb", "off": offset, "size": os.fstat(f.fileno()).st_size if f else None})
                last_hb = now
            time.sleep(poll)
    return None
