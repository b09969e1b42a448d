"""The host program's `tree` operation: every process of a run on this host, and on request each
one's Python stack (py-spy).

Sent to the host after hostside.py's text (host.py HOSTSIDE_SOURCE), stdlib only like it. The
run's processes are, for a run launched here, its recorded session members (hostside `_locate`:
every live process of the run's session and recorded tree, orphaned EngineCore/Worker processes
included); for a Slurm run, the tasks of the job's step on this node and their descendants
(proctree `_job_processes`; the program then runs in a step of the same job). py-spy is looked for
on PATH, then beside the run's own program (the engine's venv `bin/`), then beside each process's
interpreter: it is never installed here. A stopped process (state T) is dumped with
`--nonblocking` (py-spy would wait to pause it); a running one is paused for the dump so its stack
is consistent.

Request: {"op": "tree", "profile", "run_id"} or {"op": "tree", "slurm_job", "step_name"}, and
"stacks": {"native": bool, "timeout": seconds per process} for the dumps.
Answer: {"run_id", "server_pid", "processes": [{"pid", "ppid", "name", "cmdline", "state"}]}; with
stacks also "py_spy": path or None, "hint": how to get it when missing, and in each process
"threads": [{"name", "id", "active", "frames": [{"function", "file", "line"}]}], "error".
"""

import json
import os
import shutil
import subprocess

if "OPS" not in globals():  # imported from the package; on a host hostside.py's text ran just above
    from cockpit.remote.programs.hostside import OPS, _locate, _profile_dir
    from cockpit.remote.programs.procfs import _cmdline, _comm, _ppid, _proc_stat
    from cockpit.remote.programs.proctree import _job_processes

PY_SPY_HINT = ("py-spy is not on PATH nor in the engine's environment on this host: install it there "
               "(`pip install py-spy` into the engine's venv, or your package manager's py-spy) and "
               "take the stacks again")


def find_py_spy(argvs):
    """py-spy on PATH, else beside a program of the run (argv[0] of each process)."""
    found = shutil.which("py-spy")
    if found:
        return found
    for argv in argvs:
        if not argv or not os.path.isabs(argv[0]):
            continue
        cand = os.path.join(os.path.dirname(argv[0]), "py-spy")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _name(pid, cmd):
    """The process's title as the engine set it (`VLLM::Worker_TP1`, `sglang::scheduler_TP3`),
    else its command line's first words."""
    first = cmd[0].strip().split(" ")[0] if cmd else ""
    if "::" in first:
        return first
    comm = _comm(pid) or ""
    if "::" in comm:  # a title set with prctl only: the kernel keeps 15 characters of it
        return comm
    if cmd:
        return " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:4]))[:120]
    return comm or str(pid)


def _threads(raw):
    out = []
    for t in raw if isinstance(raw, list) else []:
        frames = [{"function": fr.get("name"), "file": fr.get("filename"), "line": fr.get("line")}
                  for fr in t.get("frames") or []]
        out.append({"name": t.get("thread_name"), "id": t.get("os_thread_id") or t.get("thread_id"),
                    "active": t.get("active"), "frames": frames})
    return out


def dump(py_spy, pid, state, native, timeout):
    argv = [py_spy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    if state == "T":
        argv.append("--nonblocking")
    try:
        # (not capture_output: a host may run Python 3.6, as hostside.py allows)
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)  # noqa: UP022
    except subprocess.TimeoutExpired:
        return [], f"py-spy did not answer within {timeout:g} s"
    except OSError as exc:
        return [], f"py-spy could not run: {exc}"
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        err = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return [], err[:300]
    try:
        return _threads(json.loads(text)), None
    except ValueError:
        return [], "py-spy's answer was not JSON: " + text[:200]


def _found(req):
    """The run on this host: {"server": pid, "pids": [every pid], "run_id", "argv": its program},
    or {"error": why}. A run launched here (req profile, run_id: its recorded session and tree), or
    a Slurm job's step on this node (req slurm_job, step_name: proctree._job_processes)."""
    job = req.get("slurm_job")
    if job:
        roots, pids = _job_processes(str(job), req.get("step_name"))
        if not pids:
            return {"error": f"no process of Slurm job {job} (step {req.get('step_name')}) on this node"}
        return {"server": roots[0], "pids": pids, "run_id": None, "argv": _cmdline(roots[0]) or []}
    info = _locate(_profile_dir(req), req.get("run_id"))
    if info is None:
        return {"error": "no run of this profile on this host"}
    pids = sorted(set(info.get("members") or []) | ({info["pid"]} if info.get("alive") else set()))
    if not pids:
        return {"error": f"run {info.get('run_id')} has no live process on this host: it has ended"}
    return {"server": info.get("pid"), "pids": pids, "run_id": info.get("run_id"), "argv": info.get("argv") or []}


def op_tree(req):
    """The run's processes (pid, ppid, name, state, cmdline); with req "stacks" ({"native",
    "timeout"}), each one's py-spy dump as well."""
    run = _found(req)
    if "error" in run:
        return run
    procs = []
    for pid in run["pids"]:
        st = _proc_stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        cmd = _cmdline(pid) or []
        procs.append({"pid": pid, "ppid": _ppid(pid), "state": st[0], "cmdline": cmd, "name": _name(pid, cmd)})
    ans = {"run_id": run["run_id"], "server_pid": run["server"], "processes": procs}
    stacks = req.get("stacks")
    if not stacks:
        return ans
    py_spy = stacks.get("py_spy") or find_py_spy([run["argv"]] + [p["cmdline"] for p in procs])
    timeout = float(stacks.get("timeout") or 20)
    for p in procs:
        if py_spy is None:
            p["threads"], p["error"] = [], "py-spy not found on this host"
            continue
        p["threads"], p["error"] = dump(py_spy, p["pid"], p["state"], bool(stacks.get("native")), timeout)
    ans.update(py_spy=py_spy, hint=None if py_spy else PY_SPY_HINT)
    return ans


OPS["tree"] = op_tree
