"""The login-node half of a Slurm run: one stdlib program sent to the login node's python3.

Like supervisor/hostside.py it runs as `python3 -` with this file's text on stdin, followed by one
line that calls main() with the JSON request: nothing is installed on the login node, no shell
parses anything (Slurm's commands run from argv lists) and the request is never in argv — it holds
the batch script, whose env carries the profile's secrets (HF_TOKEN, --api-key), and any local
user of a login node can read a process's argv with `ps`. It prints one JSON answer.

Operations ("op"):

  submit  take the profile's lock, refuse while the profile's current job is still in the queue,
          create the run directory, write batch.sh and meta.json, run sbatch (its working
          directory is the run directory, so the script finds it as $SLURM_SUBMIT_DIR; --chdir is
          the workdir, --output the run directory's batch.log), record job_id and `current`.
          Slurm's refusal comes back word for word: {"error": "sbatch: error: …"}.
  find    the profile's newest run (or a given run id): its directory, job id, meta.
  query   Slurm's raw answers about jobs: `scontrol show job -o`, else `sacct`, else the
          jobcomp/filetxt record; node names expanded with `scontrol show hostnames`.
  cancel  scancel the job, then wait until it has left the queue (or reached an end state).

Run directory: <runs_root>/<profile>/<run_id>/ where runs_root is the request's, else
<workdir>/.cockpit/runs (the workdir is on the shared filesystem: compute nodes write there).
Private like hostside's: the directories this program creates are 0700 (or tightened to it when
ours), its files 0600 (batch.sh included: it exports the env), written through O_NOFOLLOW; batch.log
is created 0600 before sbatch so Slurm's output keeps that mode (the script does the same for the
node logs and `nodes`).

Trusted only when ours: the workdir is shared, so another user can pre-create `.cockpit/runs/
<profile>/current` and a run directory with their `job_id` and `meta.json` (their model path, their
flags) for a restart to submit under the operator's account. Every directory of the run tree
(`.cockpit`, runs, <profile>, the run) must be a directory owned by the operator (or the
operator's own link to one) and not writable by group or others; every file read (`current`, job_id, meta.json, nodes, …) is
opened with O_NOFOLLOW and must be a regular file of the operator's that group and others cannot
write; `current` must name a run id. Anything else is refused ({"error": …, "untrusted": path})
naming the path and its owner; nothing of it is read or followed.
"""

import errno
import fcntl
import json
import os
import re
import subprocess
import sys
import time

# Stdlib only, python3 3.8+ (login nodes run old distributions).

END = ("COMPLETED", "CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
       "BOOT_FAIL")


try:  # here, from the package; on a login node the text of runtree.py and runfiles.py ran just before this file
    from cockpit.remote.programs.runfiles import _write  # atomic and durable (fsync), as the host's run files
    from cockpit.remote.programs.runtree import (
        RunTreeRefused,
        _check_ours,
        _expand,
        _private_dir,
        _trusted_dir,
    )
except ImportError:
    pass


class Untrusted(RunTreeRefused):
    """A part of the Slurm run tree (in the shared workdir) Cockpit must not trust."""

    hint = "refusing to use the run tree there (ask its owner to remove it, or choose another workdir)"


READ_LIMIT = 1 << 20  # run files are a few bytes; meta.json a few KiB


def _read(path, default=None):
    """A run file's text, opened without following a link and checked: a regular file of ours only
    we can write (RunTreeRefused otherwise); `default` when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return default
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _check_ours(path, os.lstat(path), "file")  # says whose link it is
        raise
    with os.fdopen(fd, "rb") as f:
        _check_ours(path, os.fstat(fd), "file")
        return f.read(READ_LIMIT).decode("utf-8", "replace").strip()


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def _run_id(base, value):
    """A run id read from `current` (or asked for): one path component, never `..` or a path."""
    if value is None or not RUN_ID.fullmatch(value):
        raise Untrusted(os.path.join(base, "current"), f"names {str(value)[:80]!r}, not a run id")
    return value


def _run(argv, timeout=60, cwd=None):
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found on the login node"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {timeout} s"
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def _root(req):
    if req.get("runs_root"):
        return _expand(req["runs_root"])
    return os.path.join(_expand(req.get("workdir") or "."), ".cockpit", "runs")


def _run_facts(run_dir):
    _trusted_dir(run_dir)
    meta = _read(os.path.join(run_dir, "meta.json"))
    nodes = _read(os.path.join(run_dir, "nodes"))
    return {
        "run_id": os.path.basename(run_dir),
        "run_dir": run_dir,
        "job_id": _read(os.path.join(run_dir, "job_id")),
        "submitted_at": _read(os.path.join(run_dir, "submitted_at")),
        "meta": json.loads(meta) if meta else {},
        "nodes": nodes.split() if nodes else [],
    }


def _queue_state(job_id):
    """The job's state while slurmctld still knows it ('' when it has left the queue)."""
    rc, out, _err = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], timeout=30)
    return out.strip().split("\n")[0].strip() if rc == 0 else ""


def op_submit(req):
    root = _root(req)
    if not req.get("runs_root"):  # <workdir>/.cockpit: ours, not the operator's workdir
        _private_dir(os.path.dirname(root))
    _private_dir(root)
    base = os.path.join(root, req["profile"])
    _private_dir(base)
    lock_path = os.path.join(base, ".lock")
    try:
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _check_ours(lock_path, os.lstat(lock_path), "file")
        raise
    with os.fdopen(lock_fd, "w") as lock:
        _check_ours(lock_path, os.fstat(lock_fd), "file")
        fcntl.flock(lock, fcntl.LOCK_EX)
        cur = _read(os.path.join(base, "current"))
        if cur and _trusted_dir(os.path.join(base, _run_id(base, cur))):
            facts = _run_facts(os.path.join(base, cur))
            if facts["job_id"]:
                state = _queue_state(facts["job_id"])
                if state and state.split()[0] not in END:
                    facts["state"] = state
                    return {"refused": "live", "run": facts}
        run_dir = os.path.join(base, _run_id(base, req["run_id"]))
        os.mkdir(run_dir, 0o700)
        script = os.path.join(run_dir, "batch.sh")
        _write(script, req["script"])  # 0600: sbatch reads it and sends Slurm a copy
        os.close(os.open(os.path.join(run_dir, "batch.log"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        _write(os.path.join(run_dir, "meta.json"), json.dumps(req.get("meta") or {}))
        workdir = _expand(req.get("workdir") or ".")
        argv = [*req["sbatch"], "--chdir=" + workdir, "--output=" + os.path.join(run_dir, "batch.log"), script]
        _write(os.path.join(run_dir, "sbatch_argv.json"), json.dumps(argv))
        rc, out, err = _run(argv, timeout=120, cwd=run_dir)
        job = out.strip().split(";")[0].strip()
        if rc != 0 or not job.isdigit():
            _write(os.path.join(run_dir, "submit_error"), err)
            return {"error": err.strip() or out.strip() or f"sbatch exited with {rc}", "run_dir": run_dir}
        _write(os.path.join(run_dir, "job_id"), job)
        _write(os.path.join(run_dir, "submitted_at"), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        _write(os.path.join(base, "current"), req["run_id"])
        return {"submitted": True, "run": _run_facts(run_dir)}


def op_find(req):
    root = _root(req)
    base = os.path.join(root, req["profile"])
    dirs = [root, base] if req.get("runs_root") else [os.path.dirname(root), root, base]
    for d in dirs:  # each level must be ours before anything below it is looked at
        if not _trusted_dir(d):
            return {"run": None}
    run_id = req.get("run_id") or _read(os.path.join(base, "current"))
    if not run_id:
        return {"run": None}
    run_dir = os.path.join(base, _run_id(base, run_id))
    if not _trusted_dir(run_dir):
        return {"run": None}
    return {"run": _run_facts(run_dir)}


def _jobcomp_lines(job_id):
    _rc, out, _err = _run(["scontrol", "show", "config"], timeout=30)
    conf = {}
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            conf[k.strip()] = v.strip()
    if conf.get("JobCompType") != "jobcomp/filetxt" or not conf.get("JobCompLoc"):
        return None, "no job-completion file (JobCompType={})".format(conf.get("JobCompType", "unknown"))
    found = []
    try:
        with open(conf["JobCompLoc"], errors="replace") as f:
            for line in f:
                if line.startswith(f"JobId={job_id} "):
                    found.append(line.rstrip("\n"))
    except OSError as exc:
        return None, "{}: {}".format(conf["JobCompLoc"], exc.strerror)
    return "\n".join(found), ""


def op_query(req):
    out = {}
    for job in req["job_ids"]:
        job = str(job)
        ans = {}
        rc, text, err = _run(["scontrol", "show", "job", "-o", job], timeout=30)
        ans["scontrol"] = text if rc == 0 else ""
        ans["scontrol_error"] = "" if rc == 0 else err.strip()
        if rc != 0:
            rc, text, err = _run(["sacct", "-j", job, "-X", "-n", "-P", "-o",
                                  "JobID,State,ExitCode,Reason,NodeList,Elapsed,Timelimit"], timeout=30)
            ans["sacct"] = text if rc == 0 else ""
            ans["sacct_error"] = "" if rc == 0 else err.strip()
            if not text.strip():
                ans["jobcomp"], ans["jobcomp_error"] = _jobcomp_lines(job)
        node_list = ""
        for line in (ans.get("scontrol") or "").split():
            if line.startswith("NodeList="):
                node_list = line[len("NodeList="):]
        if node_list and node_list != "(null)":
            rc, text, _err = _run(["scontrol", "show", "hostnames", node_list], timeout=30)
            ans["hostnames"] = text.split() if rc == 0 else []
        out[job] = ans
    return {"jobs": out}


def op_cancel(req):
    job = str(req["job_id"])
    rc, _out, err = _run(["scancel", job], timeout=60)
    if rc != 0 and "Invalid job id" not in err:
        return {"error": err.strip() or f"scancel exited with {rc}"}
    deadline = time.monotonic() + float(req.get("timeout") or 60)
    state = _queue_state(job)
    while state and state.split()[0] not in END and time.monotonic() < deadline:
        time.sleep(0.25)
        state = _queue_state(job)
    return {"cancelled": True, "left_queue": not state or state.split()[0] in END, "state": state}


OPS = {"submit": op_submit, "find": op_find, "query": op_query, "cancel": op_cancel}


def main(argv):
    try:
        req = json.loads(argv[1])
        ans = OPS[req["op"]](req)
    except RunTreeRefused as exc:  # the shared checks raise the base class: worded for a Slurm tree here
        ans = {"error": f"{exc.path} {exc.why}; {Untrusted.hint}", "untrusted": exc.path}
    except Exception as exc:  # one line the cockpit shows, never a traceback
        ans = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(ans) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__" and len(sys.argv) > 1:  # else the line after this file calls main()
    sys.exit(main(sys.argv))
