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
"""

import fcntl
import json
import os
import subprocess
import sys
import time

# Stdlib only, python3 3.8+ (login nodes run old distributions).

END = ("COMPLETED", "CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
       "BOOT_FAIL")


def _expand(path):
    return os.path.abspath(os.path.expanduser(path))


def _write(path, text):
    """A run file, 0600, atomically; O_NOFOLLOW: a planted symlink is refused, not written through."""
    tmp = path + ".tmp"
    try:
        os.unlink(tmp)  # a leftover (or planted) temp file is never reused
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _private_dir(path):
    """`path` 0700 (directories above it that are missing, e.g. the workdir, get the usual mode:
    they are the operator's); an existing one of ours with group/other bits is tightened."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


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
    with os.fdopen(os.open(os.path.join(base, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cur = _read(os.path.join(base, "current"))
        if cur:
            facts = _run_facts(os.path.join(base, cur))
            if facts["job_id"]:
                state = _queue_state(facts["job_id"])
                if state and state.split()[0] not in END:
                    facts["state"] = state
                    return {"refused": "live", "run": facts}
        run_dir = os.path.join(base, req["run_id"])
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
    base = os.path.join(_root(req), req["profile"])
    run_id = req.get("run_id") or _read(os.path.join(base, "current"))
    if not run_id or not os.path.isdir(os.path.join(base, run_id)):
        return {"run": None}
    return {"run": _run_facts(os.path.join(base, run_id))}


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
    except Exception as exc:  # one line the cockpit shows, never a traceback
        ans = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(ans) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__" and len(sys.argv) > 1:  # else the line after this file calls main()
    sys.exit(main(sys.argv))
