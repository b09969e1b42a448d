"""The host-side half of the supervisor: one stdlib-only program sent to the host's python; this
module holds its runs (launch and its waiter, find, stop, kill) and main().

It runs as `python3 -` with this file's text on stdin followed by one line that calls main()
with the JSON request (locally through the same LocalTransport), so nothing has to be installed
on a GPU host and no shell ever parses a command line. The request is never in argv: a launch's
waiter lives as long as the run, and any local user can read a process's argv (`ps`) while the
request carries the profile's env (HF_TOKEN, ...).

Operations (the request's "op"):

  launch  take the profile's lock, refuse if a run of the profile is alive, else create the run
          directory, double-fork into a new session and start the server with stdout+stderr
          written to the run's own log file; print {"pid", "pgid", "run_dir", ...} and exit. A waiter process
          stays in the new session (ignoring SIGTERM/SIGHUP), reaps the server and writes
          exit_code, so the run outlives the cockpit, the SSH session and the tmux pane.
  find    the profile's newest run (alive or not) with its facts.
  stop    SIGTERM the run's process group (and every other process of its session), SIGKILL
          after the timeout, wait until none is left.
  kill    send a signal to given pids (leftovers the operator agreed to kill).
  alive   which of the given pids are alive.
  read    bytes [start, end) of a file (older log lines on demand).
  free_port  a TCP port free on the host and its outward address (multi-node --dist-init-addr).
  launch_check  do these paths exist, is this TCP port bound (before a launch that would die of it).
  scan    for a log too big to read whole: where its head ends, where its last N lines begin,
          and how many lines lie between (counted at C speed, not sent).
  follow  stream a log from a byte offset as framed chunks (see below), optionally watching the
          server pid and reporting its exit.

Privacy and safety (see docs/RELIABILITY.md): run directories are 0700 and their files 0600;
the run's log is opened with O_NOFOLLOW and refused when it, or its directory, belongs to another
user or can be written by others; the profile's log path is a symlink only Cockpit repoints. A disk error is reported as such, and leaves either a complete run
or none. Every process of a run carries COCKPIT_RUN_DIR in its environment, so a run whose
directory was deleted is still found (by its processes), refused a second launch, and stopped.

Run directory: <runs_root>/<profile>/<run_id>/ (runs_root defaults to $XDG_CACHE_HOME/cockpit/runs,
i.e. ~/.cache/cockpit/runs) holds argv.json, env.json, cwd, pid, pgid, sid,
waiter_pid, waiter_start, proc_start, started_at, log_path, log_offset, log_inode, meta.json (what the cockpit
wants to remember: flags as launched, node rank) and, when the server ended,
exit_code (shell convention: 128+N for a signal). <runs_root>/<profile>/current names the newest
run. Each run writes its own log, `<stem>.<run_id><ext>` beside the profile's `log:` path, and
that path becomes a symlink to the current run's file (logfiles.run_log_path); log_path names
the run's own file and log_offset is 0 unless the file was there before.
"""

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time

try:  # here, from the package; on a host the text of logfiles.py and the modules before it ran just above
    from cockpit.remote.programs.logfiles import (
        LogRefused,
        _open_log,
        check_log_link,
        op_follow,
        op_read,
        op_scan,
        point_log_link,
        run_log_path,
    )
    from cockpit.remote.programs.oomwatch import OOM_EVIDENCE_FILE, OomWatch
    from cockpit.remote.programs.procfs import _alive, _cmdline, _ppid, _proc_stat
    from cockpit.remote.programs.proctree import (
        REAPED_FILE,
        WAITER_START_FILE,
        _is_our_server,
        _reap_leftovers,
        _run_members,
        _run_session,
        _signal_all,
        _tagged_processes,
        _wait_recording_tree,
        name_waiter,
    )
    from cockpit.remote.programs.runfiles import (
        _DISK_ERRNOS,
        RUN_TAG,
        DiskError,
        _disk_words,
        _read,
        _read_int,
        _read_json,
        _write,
    )
    from cockpit.remote.programs.runtree import _expand, _private_dir
except ImportError:
    pass

# Stdlib only and compatible with the python3 of older GPU hosts (3.8+).


def _group_leader(pids):
    """The first of the pids that leads its own process group (the server: its waiter made it so)."""
    return next((p for p in pids if (_proc_stat(p) or (0, 0))[1] == p), None)


def _run_info(run_dir):
    pid = _read_int(os.path.join(run_dir, "pid"))
    sid = _read_int(os.path.join(run_dir, "sid"))
    waiter = _read_int(os.path.join(run_dir, "waiter_pid"))
    exit_code = _read_int(os.path.join(run_dir, "exit_code"))
    # the run's processes, even after the server itself ended: orphaned ranks still hold GPUs
    members = _run_members(run_dir, sid, exclude=(waiter,) if waiter else ())
    waiter_alive = _alive(waiter) if waiter else False
    if pid is None and exit_code is None and members and waiter_alive:
        # a launch under way, read between the waiter starting the server and writing its pid
        # (another cockpit's `up` racing this one's): the server is the member of the run's
        # session that leads its own process group, as the waiter made it (maybe not yet exec'd
        # into the program, so not checked against argv.json) — not "exited, processes alive"
        pid = _group_leader(members)
        alive = pid is not None
    else:
        alive = _is_our_server(run_dir, pid) if pid else False
    try:
        with open(os.path.join(run_dir, "argv.json")) as f:
            argv = json.load(f)
    except (OSError, ValueError):
        argv = None
    return {
        "run_id": os.path.basename(run_dir),
        "run_dir": run_dir,
        # the server is gone and so is the waiter that would have recorded its exit (killed, or
        # the disk was full): the run is over with its exit code unknown
        "lost": not alive and not members and exit_code is None and not waiter_alive and pid is not None,
        "pid": pid,
        "pgid": _read_int(os.path.join(run_dir, "pgid")),
        "sid": sid,
        "waiter_pid": waiter,
        "started_at": _read(os.path.join(run_dir, "started_at")),
        "log_path": _read(os.path.join(run_dir, "log_path")),
        "log_offset": _read_int(os.path.join(run_dir, "log_offset")) or 0,
        "log_inode": _read_int(os.path.join(run_dir, "log_inode")),
        "alive": alive,
        "exit_code": exit_code,
        "members": members,
        "argv": argv,
        "error": _read(os.path.join(run_dir, "launch_error")),
        "meta": _read_json(os.path.join(run_dir, "meta.json")),
        "stopped_by": _read(os.path.join(run_dir, "stopped_by")),
        "oom_evidence": _read(os.path.join(run_dir, OOM_EVIDENCE_FILE)),
        "reaped": _read(os.path.join(run_dir, REAPED_FILE)),
    }


def _runs_root(req):
    root = req.get("runs_root")
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
        root = os.path.join(cache, "cockpit", "runs")
    return _expand(root)


def _profile_dir(req):
    return os.path.join(_runs_root(req), req["profile"])


def _current_run_dir(pdir):
    rid = _read(os.path.join(pdir, "current"))
    if not rid or "/" in rid:
        return None
    d = os.path.join(pdir, rid)
    return d if os.path.isdir(d) else None


# ---------------------------------------------------------------- runs found by their processes


def _info_from_processes(run_dir, pids):
    """A run whose directory is gone, described from its live processes: the server is the one
    that leads its process group (the waiter made it so), the waiter is its parent, and the
    log is where its stdout goes."""
    pids = sorted(pids)
    server = _group_leader(pids) or pids[0]
    st = _proc_stat(server)
    sid = st[2] if st else None
    waiter = _ppid(server)
    try:
        log_path = os.readlink(f"/proc/{server}/fd/1")
    except OSError:
        log_path = None
    return {
        "run_id": os.path.basename(run_dir), "run_dir": run_dir, "run_dir_missing": True, "lost": False,
        "pid": server, "pgid": st[1] if st else None, "sid": sid, "waiter_pid": waiter,
        "started_at": None, "log_path": log_path, "log_offset": 0, "log_inode": None,
        "alive": True, "exit_code": None, "members": _run_session(run_dir, sid, exclude=(waiter,)) if sid else pids,
        "argv": _cmdline(server), "error": None, "meta": None, "stopped_by": None,
    }


def _locate(pdir, run_id=None):
    """The run (`run_id`, else the current one) with its facts: from its directory, or, when the
    directory was deleted under a live run, from its processes. None when there is neither."""
    run_dir = os.path.join(pdir, run_id) if run_id else _current_run_dir(pdir)
    if run_dir is not None and os.path.isdir(run_dir):
        return _run_info(run_dir)
    tagged = _tagged_processes(pdir)
    if run_id:
        tagged = {d: p for d, p in tagged.items() if os.path.basename(d) == run_id}
    if not tagged:
        return None
    newest = max(tagged)  # run ids sort by their start time
    return _info_from_processes(newest, tagged[newest])


# ---------------------------------------------------------------- launch


def _lock(pdir, timeout):

    fd = os.open(os.path.join(pdir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.time() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.time() > deadline:
                raise
            time.sleep(0.05)


def _abandon(pdir, run_dir, previous, run_log):
    """Undo a launch that did not happen: no half-written run directory stays `current`, no empty
    log file of a run that never started stays beside the others."""
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        if os.path.getsize(run_log) == 0 and not os.path.islink(run_log):
            os.unlink(run_log)
    except OSError:
        pass
    try:
        if previous:
            _write(os.path.join(pdir, "current"), previous)
        else:
            os.unlink(os.path.join(pdir, "current"))
    except OSError:
        pass


def op_launch(req):
    pdir = _profile_dir(req)
    _private_dir(_runs_root(req))
    _private_dir(pdir)
    lock_fd = _lock(pdir, float(req.get("lock_timeout", 30)))
    # Held until this program exits, after `current` names the new run: a second launcher
    # waits here and then sees the live run.
    live = _locate(pdir)
    if live is not None and (live["alive"] or live["members"]):
        return {"refused": "live", "run": live}
    run_dir = os.path.join(pdir, req["run_id"])
    cwd = _expand(req.get("cwd") or "~")
    link_path = _expand(os.path.join(cwd, req["log"]))
    log_path = run_log_path(link_path, req["run_id"])
    try:
        os.makedirs(cwd, exist_ok=True)
        found = check_log_link(link_path)
        log_fd, offset, inode = _open_log(log_path)
    except LogRefused as exc:
        return {"error": f"refused: {exc}"}
    except OSError as exc:
        if exc.errno in _DISK_ERRNOS:
            return {"error": _disk_words(exc, log_path) + "; nothing was launched"}
        raise
    argv = list(req["argv"])
    env_add = dict(req.get("env") or {})
    previous = _read(os.path.join(pdir, "current"))
    files = {
        "argv.json": json.dumps(argv),
        "env.json": json.dumps(env_add),
        "cwd": cwd,
        "log_path": log_path,
        "log_offset": str(offset),
        "log_inode": str(inode),
        "meta.json": json.dumps(req.get("meta") or {}),
    }
    try:
        os.mkdir(run_dir, 0o700)
        for name, text in files.items():
            _write(os.path.join(run_dir, name), text)
        _write(os.path.join(pdir, "current"), req["run_id"])
        point_log_link(link_path, log_path, req["run_id"], found)
    except (DiskError, OSError) as exc:
        os.close(log_fd)
        _abandon(pdir, run_dir, previous, log_path)
        return {"error": f"{exc}; nothing was launched"}

    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # first child: new session, then fork the waiter and leave
        try:
            os.close(lock_fd)
            os.close(r)
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # never hold the SSH channel / the caller's pipes open
                os.dup2(devnull, fd)
            if os.fork() != 0:
                os._exit(0)
            _waiter(run_dir, argv, env_add, cwd, log_fd, w, files)
        finally:
            os._exit(0)
    os.close(w)
    os.close(log_fd)
    os.waitpid(child, 0)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    try:
        started = json.loads(data.decode() or "{}")
    except ValueError:
        started = {}
    if not started:
        started = {"error": "the launch waiter died before it could report (see the run directory "
                            f"{run_dir}); nothing was launched"}
    if "error" in started:
        if started.get("disk"):
            _abandon(pdir, run_dir, previous, log_path)
            return {"error": started["error"]}
        return {"error": started["error"], "run": _run_info(run_dir)}
    return {"launched": True, "run": _run_info(run_dir)}


def _report(w, obj):
    try:
        os.write(w, json.dumps(obj).encode())
        os.close(w)
    except OSError:
        pass


def _waiter(run_dir, argv, env_add, cwd, log_fd, w, files):
    # The waiter must survive the stop's SIGTERM and the SSH session's SIGHUP to record the code.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        _waiter_run(run_dir, argv, env_add, cwd, log_fd, w, files)
    except DiskError as exc:
        _report(w, {"error": f"{exc}; nothing is running", "disk": True})
    except Exception as exc:  # the launcher must hear why, never read silence as success
        _report(w, {"error": f"the launch waiter failed: {type(exc).__name__}: {exc}"})


def _record(run_dir, files, name, text):
    files[name] = text
    _write(os.path.join(run_dir, name), text)


def _restore(run_dir, files):
    """The run directory was deleted under the run: put back what the waiter knows, so the exit
    code it is about to record has a place and the run stays findable after it ended."""
    if os.path.isdir(run_dir):
        return
    _private_dir(run_dir)
    for name, text in files.items():
        _write(os.path.join(run_dir, name), text)
    pdir = os.path.dirname(run_dir)
    if _current_run_dir(pdir) is None:
        _write(os.path.join(pdir, "current"), os.path.basename(run_dir))


def _waiter_run(run_dir, argv, env_add, cwd, log_fd, w, files):

    name_waiter()
    _record(run_dir, files, "waiter_pid", str(os.getpid()))
    me = _proc_stat(os.getpid())
    if me is not None:  # with the pid, who the waiter is: the session is the run's while it lives
        _record(run_dir, files, WAITER_START_FILE, str(me[3]))
    _record(run_dir, files, "sid", str(os.getsid(0)))
    env = dict(os.environ)
    env.update(env_add)
    env[RUN_TAG] = run_dir  # the run's processes can be found even without its directory

    def _child_setup():
        # Ignored dispositions survive exec: give the server the default ones back, and its own
        # process group so that a stop can signal the whole server without hitting the waiter.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.setpgid(0, 0)

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            preexec_fn=_child_setup,
            close_fds=True,
        )
    except Exception as exc:  # the operator needs to see why it did not start
        msg = f"{type(exc).__name__}: {exc}"
        _write(os.path.join(run_dir, "launch_error"), msg)
        _write(os.path.join(run_dir, "exit_code"), "127")
        _report(w, {"error": msg})
        return
    os.close(log_fd)
    try:
        st = _proc_stat(proc.pid)
        if st is not None:
            _record(run_dir, files, "proc_start", str(st[3]))
        _record(run_dir, files, "pid", str(proc.pid))
        _record(run_dir, files, "pgid", str(proc.pid))
        _record(run_dir, files, "started_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    except DiskError as exc:
        # A server nobody could find, stop or see exit is worse than none: stop it, then say why.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        raise DiskError(f"{exc}; the server (pid {proc.pid}) was started and stopped again") from None
    try:  # read before the launch is told done: the counter at the start is this run's baseline
        watch = OomWatch(proc.pid)
    except Exception:  # no cgroup or /proc to read: no evidence, never a failed run
        watch = None
    _report(w, {"pid": proc.pid})
    code = _wait_recording_tree(proc, run_dir, watch.poll if watch is not None else None)
    if code < 0:
        code = 128 - code
    try:
        evidence = watch.evidence() if watch is not None else None
    except Exception:
        evidence = None
    # Recorded even when the disk is full at the end of a long run: retried for a minute. The
    # evidence first: a reader waits for exit_code, then reads both.
    for _ in range(12):
        try:
            _restore(run_dir, files)
            if evidence:
                _write(os.path.join(run_dir, OOM_EVIDENCE_FILE), evidence)
            _write(os.path.join(run_dir, "exit_code"), str(code))
            break
        except (DiskError, OSError):
            time.sleep(5)
    _reap_leftovers(run_dir, os.getsid(0), os.getpid())


# ---------------------------------------------------------------- find / stop / kill / alive


def op_find(req):
    return {"run": _locate(_profile_dir(req), req.get("run_id"))}


def op_stop(req):
    pdir = _profile_dir(req)
    info = _locate(pdir, req.get("run_id"))
    if info is None:
        return {"stopped": True, "killed": False, "left": [], "run": None}
    run_dir = info["run_dir"]
    pgid, sid, waiter = info["pgid"], info["sid"], info["waiter_pid"]
    timeout = float(req.get("timeout", 30))
    exclude = (waiter,) if waiter else ()

    def members():
        found = _run_members(run_dir, sid, exclude)
        if not found and info["alive"] and _is_our_server(run_dir, info["pid"]):
            found = [info["pid"]]
        return found

    left = members()
    killed = False
    # Marked before the first signal: a cockpit watching the run from elsewhere reads the exit
    # (even a SIGKILL after the timeout, 137) as this stop, not as a crash. Only a run that was
    # still going is "stopped": a crashed one stays crashed in later reports.
    if (info["alive"] or info["members"]) and os.path.isdir(run_dir) \
            and not os.path.exists(os.path.join(run_dir, "stopped_by")):
        try:
            _write(os.path.join(run_dir, "stopped_by"), "operator" if req.get("by") == "operator" else "cockpit")
        except DiskError:
            pass  # the stop matters more than its mark
    if left or info["alive"]:
        _signal_all(pgid if info["alive"] else None, left, signal.SIGTERM)
        deadline = time.time() + timeout
        while time.time() < deadline:
            left = members()
            if not left:
                break
            time.sleep(0.1)
        if left:
            killed = True
            _signal_all(pgid, left, signal.SIGKILL)
            deadline = time.time() + 10
            while time.time() < deadline:
                left = members()
                if not left:
                    break
                time.sleep(0.1)
    # the waiter records the exit code right after reaping the server
    deadline = time.time() + 3
    while _read(os.path.join(run_dir, "exit_code")) is None and time.time() < deadline:
        time.sleep(0.05)
    after = _run_info(run_dir) if os.path.isdir(run_dir) else dict(info, alive=False, members=left)
    return {"stopped": not left, "killed": killed, "left": left, "run": after}


def op_kill(req):
    sig = int(req.get("signal", signal.SIGKILL))
    done, failed = [], []
    for pid in req.get("pids", []):
        try:
            os.kill(int(pid), sig)
            done.append(pid)
        except (ProcessLookupError, PermissionError) as exc:
            failed.append([pid, str(exc)])
    return {"signalled": done, "failed": failed}


def op_alive(req):
    return {"alive": [p for p in req.get("pids", []) if _alive(int(p))]}


def op_free_port(req):
    """A TCP port free on this host now, and an address other nodes can reach it at."""

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    addr = None
    try:  # the address of the interface that routes outwards (no packet is sent)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("10.255.255.255", 1))
            addr = u.getsockname()[0]
    except OSError:
        pass
    if not addr:
        try:
            addr = socket.gethostbyname(socket.gethostname())
        except OSError:
            addr = "127.0.0.1"
    return {"port": port, "addr": addr, "hostname": socket.gethostname()}


def op_launch_check(req):
    """What would kill a launch at once, checked on the host before it: {paths, cwd, host, port,
    ports, dist, pythons} -> {"missing": [paths that do not exist, relative ones from cwd],
    "port_bound": why or None, "port_unusable": why or None, "ports_bound": [why, for each of
    `ports` ([host, port]) bound or unusable], "engine_version": the distribution `dist`'s version
    under the first of `pythons` that runs (None: none answered), "engine_python": that python}.
    `port_bound`: a listener holds the port; `port_unusable`: the address cannot be bound for another
    reason (not this host's address, a privileged port, a name that does not resolve): the server
    would die at bind either way, but "in use" would mislead."""

    cwd = _expand(req.get("cwd") or "~")
    missing = []
    for p in req.get("paths") or []:
        full = os.path.expanduser(p)
        if not os.path.isabs(full):
            full = os.path.join(cwd, full)
        if not os.path.exists(full):
            missing.append(p)
    port = req.get("port")
    bound, unusable = _bindable(req.get("host"), port) if port else (None, None)
    others = [_bindable(h, p) for h, p in req.get("ports") or []]
    out = {"missing": missing, "port_bound": bound, "port_unusable": unusable,
           "ports_bound": [b or u for b, u in others if b or u]}
    if req.get("dist"):
        out["engine_version"], out["engine_python"] = _dist_version(req["dist"], req.get("pythons") or [])
    return out


def _bindable(host, port):
    """(why `host:port` is bound by a listener, why it cannot be bound for another reason); (None,
    None) when a server could bind it now."""
    host = host or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, OverflowError) as exc:
        return None, f"{host}:{port} cannot be resolved to an address to listen on ({exc})"
    for family, kind, proto, _name, addr in infos[:1]:
        s = socket.socket(family, kind, proto)
        try:
            # as uvicorn binds (SO_REUSEADDR): a socket in TIME_WAIT is no conflict, a listener is
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
        except OverflowError as exc:
            return None, f"{host}:{port} cannot be bound ({exc})"
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"{host}:{port} is already bound ({exc.strerror})", None
            return None, f"{host}:{port} cannot be bound on this host ({exc.strerror})"
        finally:
            s.close()
    return None, None


def _dist_version(dist, pythons):
    """(version, python) of the installed distribution `dist` as the engine's own python sees it:
    the first of `pythons` that exists and answers (importlib.metadata only: nothing of the engine
    is imported or run); (None, None) when none does."""
    code = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    for py in pythons:
        full = _expand(py)
        if not (os.path.isfile(full) and os.access(full, os.X_OK)):
            continue
        try:
            res = subprocess.run([full, "-c", code, dist], capture_output=True, text=True, timeout=60,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            continue
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip().splitlines()[-1][:100], py
    return None, None


OPS = {
    "launch": op_launch,
    "find": op_find,
    "stop": op_stop,
    "kill": op_kill,
    "alive": op_alive,
    "read": op_read,
    "free_port": op_free_port,
    "launch_check": op_launch_check,
    "scan": op_scan,
    "follow": op_follow,
}


def main(argv):
    try:
        req = json.loads(argv[1])
        result = OPS[req["op"]](req)
    except BrokenPipeError:
        return 0
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    if result is not None:
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__" and len(sys.argv) > 1:  # else the line after this file calls main()
    sys.exit(main(sys.argv))
