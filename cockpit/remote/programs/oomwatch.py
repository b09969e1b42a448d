"""The evidence an OOM kill needs, gathered by the run's waiter on the host (stdlib only, 3.8+).

A SIGKILL says nothing about who sent it: an operator, a job scheduler at its time limit, a
supervisor, or the kernel's OOM killer. The waiter, which lives beside the server for the whole
run, reads what only the host knows, and names it when the server has ended:

- the `oom_kill` counter of `memory.events` in the server's cgroup (v2; v1's `memory.oom_control`)
  and its ancestors, at the start and at the end: the kernel counts there every process of the group killed by any OOM
  killer (the cgroup's own limit or the whole host's), so a rise proves one;
- host and cgroup memory, sampled on the waiter's poll: available memory at ≤ NEAR_LIMIT_SHARE of
  the limit within NEAR_WINDOW_S before the end is memory at its limit just before.

Nothing is evidence by default: a missing or unreadable file is no evidence, never a guess. The
cgroup tree is /sys/fs/cgroup unless COCKPIT_CGROUP_ROOT names another (the tests' written tree).
"""

import os
import time

CGROUP_ROOT_ENV = "COCKPIT_CGROUP_ROOT"
OOM_EVIDENCE_FILE = "oom_evidence"  # the run file the waiter writes before exit_code, when proven
NEAR_LIMIT_SHARE = 0.03  # available ≤ 3 % of the limit: at the limit (the kernel reclaims below ~1 %)
NEAR_WINDOW_S = 30.0  # SGLang's launcher sleeps 5 s after a child dies before it exits: look back further


def _cgroup_dirs(pid):
    """The memory cgroup directories of `pid`, its own first, then each ancestor up to the root:
    cgroup v2 (`0::/path`) and v1's memory controller (`N:memory:/path`, under <root>/memory)."""
    root = os.environ.get(CGROUP_ROOT_ENV) or "/sys/fs/cgroup"
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            base = root
        elif "memory" in parts[1].split(","):
            base = os.path.join(root, "memory")
        else:
            continue
        segs = [s for s in parts[2].strip("/").split("/") if s and s != ".."]
        out += [os.path.join(base, *segs[:i]) if i else base for i in range(len(segs), -1, -1)]
    return out


def _int_file(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None  # "max": no limit here


def oom_kills(dirs):
    """{path: oom_kill count} for the directories that have one: v2's memory.events, v1's
    memory.oom_control (its `oom_kill` line, Linux 4.13+)."""
    counts = {}
    for d in dirs:
        path = os.path.join(d, "memory.events")
        if not os.path.exists(path):
            path = os.path.join(d, "memory.oom_control")
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        counts[path] = int(value)
        except (OSError, ValueError):
            continue
    return counts


def memory_sample(dirs):
    """(available bytes, limit bytes, where) of the tightest limit now: the host's MemAvailable of
    MemTotal, or a cgroup's memory.max − memory.current; None when nothing could be read."""
    best = None
    try:
        with open("/proc/meminfo") as f:
            info = {}
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable") and rest.split():
                    info[key] = int(rest.split()[0]) * 1024
        if "MemTotal" in info and "MemAvailable" in info:
            best = (info["MemAvailable"], info["MemTotal"], "the host")
    except (OSError, ValueError):
        pass
    for d in dirs:
        limit = _int_file(os.path.join(d, "memory.max")) or _int_file(os.path.join(d, "memory.limit_in_bytes"))
        current = _int_file(os.path.join(d, "memory.current")) or _int_file(os.path.join(d, "memory.usage_in_bytes"))
        if limit is None or current is None or limit <= 0 or limit >= 2**60:
            continue  # v1 says "no limit" with a huge number
        avail = max(0, limit - current)
        if best is None or avail < best[0]:
            best = (avail, limit, f"cgroup {d}")
    return best


class OomWatch:
    """Started with the server; `poll()` on the waiter's clock; `evidence()` once it has ended."""

    def __init__(self, pid):
        self.dirs = _cgroup_dirs(pid)
        self.before = oom_kills(self.dirs)
        self.samples = []  # (monotonic time, available, limit, where), the last NEAR_WINDOW_S

    def poll(self):
        s = memory_sample(self.dirs)
        if s is None:
            return
        now = time.monotonic()
        self.samples.append((now, *s))
        while self.samples and self.samples[0][0] < now - NEAR_WINDOW_S:
            del self.samples[0]

    def evidence(self):
        """What proves an OOM kill during the run, in words, or None."""
        after = oom_kills(self.dirs)
        for path, n in after.items():
            was = self.before.get(path)
            if was is not None and n > was:
                return (f"the cgroup's oom_kill counter rose from {was} to {n} during the run "
                        f"({path}): the kernel's OOM killer killed a process of it")
        self.poll()
        if self.samples:
            t, avail, limit, where = min(self.samples, key=lambda x: x[1] / x[2])
            if avail <= NEAR_LIMIT_SHARE * limit:
                ago = max(0.0, time.monotonic() - t)
                return (f"memory was at its limit just before the end: {avail / 2**30:.2f} GiB of "
                        f"{limit / 2**30:.2f} GiB available ({where}) {ago:.0f} s before it")
        return None
