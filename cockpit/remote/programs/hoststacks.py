"""The host program's `stacks` operation: py-spy dumps of every process of a run.

Sent to the host after hostside.py's text (host.py HOSTSIDE_SOURCE), stdlib only like it. The
run's processes are its recorded session members (hostside `_locate`: every live process of the
run's session, orphaned EngineCore/Worker processes included). py-spy is looked for on PATH, then
beside the run's own program (the engine's venv `bin/`), then beside each process's interpreter:
it is never installed here. A stopped process (state T) is dumped with `--nonblocking` (py-spy
would wait to pause it); a running one is paused for the dump so its stack is consistent.

Request: {"op": "stacks", "profile", "run_id", "native": bool, "timeout": seconds per process}.
Answer: {"py_spy": path or None, "hint": how to get it when missing, "processes": [{"pid", "ppid",
"name", "cmdline", "state", "threads": [{"name", "id", "active", "frames": [{"function", "file",
"line"}]}], "error"}]}.
"""

import json
import os
import shutil
import subprocess

if "OPS" not in globals():  # imported from the package; on a host hostside.py's text ran just above
    from cockpit.remote.programs.hostside import OPS, _locate, _profile_dir
    from cockpit.remote.programs.procfs import _cmdline, _comm, _ppid, _proc_stat

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


def op_stacks(req):
    info = _locate(_profile_dir(req), req.get("run_id"))
    if info is None:
        return {"error": "no run of this profile on this host"}
    members = sorted(set(info.get("members") or []) | ({info["pid"]} if info.get("pid") else set()))
    procs = []
    for pid in members:
        st = _proc_stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        cmd = _cmdline(pid) or []
        procs.append({"pid": pid, "ppid": _ppid(pid), "state": st[0], "cmdline": cmd, "name": _name(pid, cmd)})
    py_spy = req.get("py_spy") or find_py_spy([info.get("argv") or []] + [p["cmdline"] for p in procs])
    timeout = float(req.get("timeout") or 20)
    for p in procs:
        if py_spy is None:
            p["threads"], p["error"] = [], "py-spy not found on this host"
            continue
        p["threads"], p["error"] = dump(py_spy, p["pid"], p["state"], bool(req.get("native")), timeout)
    return {"py_spy": py_spy, "hint": None if py_spy else PY_SPY_HINT, "run_id": info.get("run_id"),
            "server_pid": info.get("pid"), "processes": procs}


OPS["stacks"] = op_stacks
