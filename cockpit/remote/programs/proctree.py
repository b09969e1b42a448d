"""The host program's view of processes: the run's process tree (recorded while the server lives,
its leftovers ended after it exits) and signals to a whole run. Stdlib only,
Python 3.8+; sent after runfiles.py and procfs.py (the /proc readers it shares with the
telemetry agent).

The waiter records every process the server's tree ever had (TREE_FILE, "pid starttime" lines),
so a leftover that left the session or process group is still the run's; after the server's exit
its children get LEFTOVER_GRACE_S to end, then SIGTERM, then SIGKILL after LEFTOVER_TERM_S, and
what was ended is written to REAPED_FILE.
"""

import json
import os
import signal
import subprocess
import time

try:  # here, from the package; on a host the text of procfs.py and the modules before it ran just above
    from cockpit.remote.programs.procfs import _alive, _cmdline, _environ, _proc_stat, _stat_fields
    from cockpit.remote.programs.runfiles import RUN_TAG, DiskError, _read, _read_int, _write
except ImportError:
    pass


def _run_tag(pid):
    """The COCKPIT_RUN_DIR a process was started with (its initial environment), or None."""
    return _environ(pid, (RUN_TAG,)).get(RUN_TAG)


def _owned(pid, uid):
    """The process belongs to `uid` (its /proc directory's owner)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


WAITER_NAME = "cockpit-waiter"  # the waiter's process name (/proc/<pid>/comm, `ps -o comm`)


def name_waiter():
    """Name this process (the waiter) so runs can be found from /proc/<pid>/stat alone."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(WAITER_NAME)
    except OSError:
        pass


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
    procs = _processes()
    waiters = {pid for pid, (comm, _st, _pp) in procs.items() if comm == WAITER_NAME}
    for pid, (_comm, state, ppid) in procs.items():
        if ppid not in waiters or state in ("Z", "X", "D") or not _owned(pid, me):
            continue  # a run's processes are ours; others' environments are not read
        tag = _run_tag(pid)
        if tag and tag.startswith(prefix) and "/" not in tag[len(prefix):]:
            out.setdefault(tag, []).append(pid)
    return out


def _is_our_server(run_dir, pid):
    """The pid is alive and still the process we launched (its start time, else its cmdline)."""
    if not _alive(pid):
        return False
    if not os.path.isdir(run_dir):  # deleted under the run: its processes still carry the tag
        return _run_tag(pid) == run_dir
    want_start = _read_int(os.path.join(run_dir, "proc_start"))
    st = _proc_stat(pid)
    if want_start is not None and st is not None:
        return st[3] == want_start
    try:
        with open(os.path.join(run_dir, "argv.json")) as f:
            argv = json.load(f)
    except (OSError, ValueError):
        return False
    cmd = _cmdline(pid)
    return cmd is None or cmd == argv


def _session_members(sid, exclude=()):
    """Every live process of the run's session (the server's group and anything it spawned)."""
    out = []  # type: list[int]
    if sid is None or not os.path.isdir("/proc"):
        return out
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in exclude:
            continue
        st = _proc_stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        if st[2] == sid:
            out.append(pid)
    return sorted(out)


# ---------------------------------------------------------------- the run's process tree
#
# vLLM's API server starts VLLM::EngineCore, which starts VLLM::Worker processes; when the API
# server dies or fails to start they are left orphaned (reparented to init). They stay in the
# run's session, unless something called setsid: so while the server lives the waiter records
# every descendant (pid and start time, `tree`), and both the session and that record name the
# run's processes. Nothing is ever found or signalled by its name.

TREE_FILE = "tree"  # "pid starttime" lines: every process the server's tree ever had
REAPED_FILE = "reaped"  # "pid signal cmdline" lines: leftovers the waiter ended after the server exited
TREE_POLL_S = 1.0
LEFTOVER_GRACE_S = 5.0  # after the server's exit, what its children get to end on their own
LEFTOVER_TERM_S = 10.0  # after SIGTERM, before SIGKILL


def _processes():
    """{pid: (comm, state, ppid)} of every process now (from /proc/<pid>/stat alone)."""
    procs = {}  # type: dict[int, tuple[str, str, int]]
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                procs[int(name)] = fields
    return procs


def _children(procs=None):
    """{ppid: [pids]} of every process now (by the parent links in /proc)."""
    children = {}  # type: dict[int, list[int]]
    for pid, (_comm, _state, parent) in (_processes() if procs is None else procs).items():
        children.setdefault(parent, []).append(pid)
    return children


def _descendants(root, children=None):
    """Pids of `root`'s descendants now."""
    children = _children() if children is None else children
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            out.append(child)
            stack.append(child)
    return out


# ---------------------------------------------------------------- a Slurm job's processes on its node
#
# A Slurm run's server is no child of a waiter: each node's server is the task of a step the batch
# script started (`srun --job-name=node<k>`), a child of that step's `slurmstepd: [<job>.<step>]`.
# This program then runs in a step of its own in the same allocation (`srun --jobid=J --overlap`),
# so it sees the node's processes as the server does.

STEPD = "slurmstepd"


def _job_processes(job_id, step_name):
    """(roots, every pid) of a Slurm job's step named `step_name` on this node: the tasks of the
    job's `slurmstepd: [J.S]` (a numbered step, not the batch script, not this program's own
    step) whose SLURM_JOB_NAME is the step's name, and their descendants. Only the task's own
    environment is read (and not when it is stuck in the kernel, state D: it is kept unread);
    the ranks below it are found by their parent links."""
    mine = os.environ.get("SLURM_STEP_ID")
    me = os.getuid()
    procs = _processes()
    children = _children(procs)
    roots = []
    for stepd in sorted(p for p, (comm, _st, _pp) in procs.items() if comm == STEPD):
        title = " ".join(_cmdline(stepd) or [])
        label = title[title.find("[") + 1 : title.find("]")] if "[" in title else ""
        job, _dot, step = label.partition(".")
        if job != str(job_id) or not step.isdigit() or step == mine:
            continue
        for task in children.get(stepd, ()):
            state = procs[task][1]
            if state in ("Z", "X") or not _owned(task, me):
                continue  # the run's processes are ours
            if state == "D" or _environ(task, ("SLURM_JOB_NAME",)).get("SLURM_JOB_NAME") == step_name:
                roots.append(task)
    pids = set(roots)
    for root in roots:
        pids.update(_descendants(root, children))
    return sorted(roots), sorted(pids)


def _read_tree(run_dir):
    tree = {}  # type: dict[int, int]
    text = _read(os.path.join(run_dir, TREE_FILE)) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            tree[int(parts[0])] = int(parts[1])
    return tree


def _tree_alive(run_dir, exclude=()):
    """The recorded processes of the run still alive (the same process: its start time matches)."""
    out = []
    for pid, start in _read_tree(run_dir).items():
        st = _proc_stat(pid)
        if pid not in exclude and st is not None and st[0] not in ("Z", "X") and st[3] == start:
            out.append(pid)
    return out


WAITER_START_FILE = "waiter_start"  # the waiter's start time (clock ticks after boot, /proc stat field 22)


def _waiter_holds_session(run_dir, sid):
    """The start time of the run's waiter when it still lives in the run's session, else None.

    A session id names the run only while a process of the run holds it: the kernel gives the
    number out again once the session is empty (pids wrap within minutes on a busy box). The
    waiter stays in the session for the whole run, so it is the proof: alive, still the waiter
    (its name, its session, its recorded start time) — then nobody else can hold the number."""
    waiter = _read_int(os.path.join(run_dir, "waiter_pid"))
    st = _proc_stat(waiter) if waiter else None
    if st is None or st[0] in ("Z", "X") or st[2] != sid:
        return None
    want = _read_int(os.path.join(run_dir, WAITER_START_FILE))
    if want is not None:
        return st[3] if st[3] == want else None
    fields = _stat_fields(waiter)  # a run launched before the start was recorded: by its name
    return st[3] if fields is not None and fields[0] == WAITER_NAME else None


def _belongs(pid, run_dir, since):
    """The process is the run's: the operator's own, and started no earlier than the run (`since`,
    clock ticks; None: not known) or carrying the run's tag. A process stuck in the kernel (state
    D) is not asked for its tag (reading its environment could block) and, with no start to go
    by, counts: only processes of a session a run's own process holds are asked."""
    if not _owned(pid, os.getuid()):
        return False
    st = _proc_stat(pid)
    if st is None:
        return False
    if since is not None and st[3] >= since:
        return True
    if st[0] == "D":
        return since is None
    return _run_tag(pid) == run_dir


def _run_session(run_dir, sid, exclude=(), since=None):
    """The live processes of the run's session that are the run's (`_belongs`)."""
    return [p for p in _session_members(sid, exclude) if _belongs(p, run_dir, since)]


def _run_members(run_dir, sid, exclude=()):
    """Every live process of the run: its session's, and the recorded tree's that left it.

    With the run directory: the recorded session counts only while the waiter holds it, and then
    only its processes that are the run's; without it (deleted under a live run), `sid` was read
    from a live process carrying the run's tag, and its session's processes count when they
    carry the tag too."""
    found = set()
    if run_dir and os.path.isdir(run_dir):
        since = _waiter_holds_session(run_dir, sid) if sid else None
        if since is not None:
            found.update(_run_session(run_dir, sid, exclude, since))
        found.update(_tree_alive(run_dir, exclude))
    elif sid:
        found.update(_run_session(run_dir, sid, exclude))
    return sorted(found)


def _wait_recording_tree(proc, run_dir, on_poll=None):
    """proc.wait(), recording every descendant of the server (TREE_FILE) while it runs; `on_poll`
    is called on the same clock (the OOM watch's memory samples)."""

    tree = {}  # type: dict[int, int]
    while True:
        try:
            return proc.wait(timeout=TREE_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if on_poll is not None:
            try:
                on_poll()
            except Exception:  # a sample that failed is no evidence, and must not end the waiter
                pass
        try:
            now = {}
            for pid in _descendants(proc.pid):
                st = _proc_stat(pid)
                if st is not None and tree.get(pid) != st[3]:
                    now[pid] = st[3]
            if now:
                tree.update(now)
                _write(os.path.join(run_dir, TREE_FILE), "".join(f"{p} {t}\n" for p, t in sorted(tree.items())))
        except Exception:  # a full disk or a deleted run directory must not end the waiter
            pass


def _reap_leftovers(run_dir, sid, me):
    """The server has exited: what it left behind (an orphaned EngineCore or Worker, a rank still
    holding a GPU) gets LEFTOVER_GRACE_S to end on its own, then SIGTERM, then SIGKILL. Only the
    run's own processes (its session, its recorded tree), never anything found by name."""

    def left():
        return _run_members(run_dir, sid, exclude=(me,))

    deadline = time.time() + LEFTOVER_GRACE_S
    pids = left()
    while pids and time.time() < deadline:
        time.sleep(0.2)
        pids = left()
    if not pids:
        return
    lines = []
    for sig, wait in ((signal.SIGTERM, LEFTOVER_TERM_S), (signal.SIGKILL, 10.0)):
        for pid in pids:
            cmd = " ".join(_cmdline(pid) or [])[:200]
            try:
                os.kill(pid, sig)
                lines.append(f"{pid} {sig.name} {cmd}")
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + wait
        while pids and time.time() < deadline:
            time.sleep(0.2)
            pids = left()
        if not pids:
            break
    try:
        _write(os.path.join(run_dir, REAPED_FILE), "\n".join(lines))
    except (DiskError, OSError):
        pass


def _signal_all(pgid, members, sig):
    if pgid:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in members:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
