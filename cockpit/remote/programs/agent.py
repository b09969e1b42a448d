"""Cockpit's telemetry agent: a small stdlib-only program that runs on the GPU host.

Nothing is installed there. Cockpit sends this file's source over the channel's stdin and runs
it with the profile's python:

    <python> - --interval 1 --pids 123,456 [--sim-dir DIR] [--once] [--smi-timeout 5]

It prints one JSON object per line (flushed) at the configured rate:

    {"ts": 1767000000.0, "gpu_ts": ..., "source": "nvml"|"nvidia-smi"|"sim"|"none",
     "gpus": [{"index", "uuid", "name", "mem_used_mib", "mem_total_mib", "util_pct", "temp_c", "power_w"}],
     "procs": [{"pid", "gpu_index", "mem_used_mib", "belongs_to_run"}],
     "host": {"mem_total_kb", "mem_available_kb", "cgroup_limit_bytes", "cgroup_usage_bytes"},
     "pids_alive": {"123": true}, "errors": ["..."]}

A value it cannot read is null, never 0; an error goes into "errors" and the stream goes on.
GPU sources, in order: NVML through pynvml (nvidia-ml-py) when the python has it, else
`nvidia-smi` (with a timeout, in a worker thread so a hanging nvidia-smi cannot stall the
stream), else none. The simulator's GPU files are read only when asked for: an explicit
simulator directory (--sim-dir or COCKPIT_SIM_GPU_DIR) means "this is a simulation".

Keep this file importable and runnable on old pythons (3.8): stdlib only, no 3.10 syntax at
run time. It is sent after procfs.py (AGENT_PROGRAM: the /proc readers the host program uses
too), so it has no `from __future__` line: that must be a program's first statement.
cockpit/telemetry/nvml.py imports it to read NVML in-process with the same code.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

if "_alive" not in globals():  # imported from the package; sent to a host, procfs.py's text ran just above
    from cockpit.remote.programs.procfs import _alive, _ppid

AGENT_VERSION = 1
SMI_GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
SMI_APP_FIELDS = "pid,gpu_uuid,used_memory"
# What nvidia-smi prints for a field it cannot read.
_SMI_UNKNOWN = (
    "[N/A]",
    "[Not Supported]",
    "N/A",
    "[Unknown Error]",
    "[GPU is lost]",
    "[Insufficient Permissions]",
    "",
)
# A sim proc file not touched for this long belongs to a process that died without cleaning up.
SIM_UTIL_RECENT_S = 5.0


# ----------------------------------------------------------------------------- small readers


def _num(text, kind=float):
    """A number from nvidia-smi text; None for [N/A] and anything unparseable (never 0)."""
    t = (text or "").strip()
    if t in _SMI_UNKNOWN:
        return None
    try:
        return kind(float(t)) if kind is int else kind(t)
    except ValueError:
        return None


def belongs_to(pid, roots):
    """True when pid is one of roots or a descendant of one (walking the ppid chain)."""
    if not roots:
        return False
    seen = 0
    p = pid
    while p and p > 1 and seen < 64:
        if p in roots:
            return True
        p = _ppid(p)
        if p is None:
            return False
        seen += 1
    return False


def read_host():
    """Host RAM and the cgroup's limit (bytes; None = unlimited or unknown)."""
    host = {
        "mem_total_kb": None,
        "mem_available_kb": None,
        "cgroup_limit_bytes": None,
        "cgroup_usage_bytes": None,
    }
    errors = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    val = _num(rest.split()[0] if rest.split() else "", int)
                    host["mem_total_kb" if key == "MemTotal" else "mem_available_kb"] = val
    except OSError as exc:
        errors.append(f"host memory: cannot read /proc/meminfo: {exc}")
    limit, usage = cgroup_memory()
    host["cgroup_limit_bytes"] = limit
    host["cgroup_usage_bytes"] = usage
    return host, errors


def _read_int(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


V1_NO_LIMIT = 1 << 60  # cgroup v1 writes a huge number (9223372036854771712) for "no limit"


def _cgroup_levels(lines, root):
    """(limit file, usage file) of every level of this process's memory cgroup path, its own
    group first and the hierarchy's root last: v2 (`0::/path`) and v1 (the `memory` controller)."""
    levels = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            base, names = root, ("memory.max", "memory.current")
        elif "memory" in parts[1].split(","):
            base, names = os.path.join(root, "memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        segs = [s for s in parts[2].strip().split("/") if s]
        for i in range(len(segs), -1, -1):
            d = os.path.join(base, *segs[:i])
            levels.append((os.path.join(d, names[0]), os.path.join(d, names[1])))
    return levels


def cgroup_memory(root="/sys/fs/cgroup", self_cgroup="/proc/self/cgroup"):
    """(limit, usage) in bytes of the memory cgroup level with the least headroom (limit − usage)
    over every level of this process's cgroup path, v2 and v1: a limit set on a parent group (a
    container's, a Slurm job's above its step) binds as the kernel enforces it, with that level's
    own usage (its other members count). (None, None) when no level is limited. This machine's
    facts use it too (cockpit/telemetry/hostfacts.py): one reader for local and remote hosts."""
    try:
        with open(self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    best = None
    for limit_file, usage_file in _cgroup_levels(lines, root):
        lim = _read_int(limit_file)
        if lim is None or lim >= V1_NO_LIMIT:  # v2 writes "max", which reads as None
            continue
        use = _read_int(usage_file) or 0
        if best is None or lim - use < best[0] - best[1]:
            best = (lim, use)
    return best if best is not None else (None, None)


# ----------------------------------------------------------------------------- GPU sources


class NvmlSource:
    """NVML through pynvml. Every NVML call goes through `_q`, which turns any error into None."""

    name = "nvml"

    def __init__(self, nvml_module):
        self.nv = nvml_module
        self.nv.nvmlInit()

    @classmethod
    def try_open(cls):
        try:
            import pynvml  # nvidia-ml-py
        except Exception:
            return None, None
        try:
            return cls(pynvml), None
        except Exception as exc:
            return None, f"NVML unavailable: {exc}"

    def _q(self, fn, *args):
        try:
            value = getattr(self.nv, fn)(*args)
        except Exception:
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value

    def read(self, roots):
        errors = []
        count = self._q("nvmlDeviceGetCount")
        if count is None:
            return [], [], ["NVML: cannot count GPUs"]
        gpus, procs = [], []
        for i in range(count):
            h = self._q("nvmlDeviceGetHandleByIndex", i)
            if h is None:
                errors.append(f"NVML: GPU {i} is not accessible")
                gpus.append(_gpu(i, None, None, None, None, None, None, None))
                continue
            mem = self._q("nvmlDeviceGetMemoryInfo", h)
            util = self._q("nvmlDeviceGetUtilizationRates", h)
            power = self._q("nvmlDeviceGetPowerUsage", h)
            gpus.append(
                _gpu(
                    i,
                    self._q("nvmlDeviceGetUUID", h),
                    self._q("nvmlDeviceGetName", h),
                    _mib(getattr(mem, "used", None)),
                    _mib(getattr(mem, "total", None)),
                    getattr(util, "gpu", None),
                    self._q("nvmlDeviceGetTemperature", h, 0),  # NVML_TEMPERATURE_GPU
                    power / 1000.0 if power is not None else None,
                )
            )
            running = self._q("nvmlDeviceGetComputeRunningProcesses", h)
            if running is None:
                errors.append(f"NVML: cannot list processes on GPU {i}")
                continue
            for p in running:
                pid = getattr(p, "pid", None)
                if pid is None:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                procs.append(_proc(pid, i, _mib(used), roots))
        return gpus, procs, errors


def _mib(nbytes):
    if nbytes is None:
        return None
    try:
        return round(float(nbytes) / (1024 * 1024), 1)
    except (TypeError, ValueError):
        return None


def _gpu(index, uuid, name, used, total, util, temp, power):
    return {
        "index": index,
        "uuid": uuid,
        "name": name,
        "mem_used_mib": used,
        "mem_total_mib": total,
        "util_pct": util,
        "temp_c": temp,
        "power_w": power,
    }


def _proc(pid, gpu_index, used_mib, roots):
    return {
        "pid": int(pid),
        "gpu_index": gpu_index,
        "mem_used_mib": used_mib,
        "belongs_to_run": belongs_to(int(pid), roots),
    }


class SmiSource:
    """`nvidia-smi --query-*` with a timeout; [N/A] and friends become null."""

    name = "nvidia-smi"

    def __init__(self, exe, timeout):
        self.exe = exe
        self.timeout = timeout
        self._running = None  # the nvidia-smi in flight: close() must not leave it behind

    def _query(self, what, fields):
        argv = [self.exe, f"--query-{what}={fields}", "--format=csv,noheader,nounits"]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            return None, f"nvidia-smi could not run: {exc}"
        self._running = proc
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, f"nvidia-smi --query-{what} did not answer within {self.timeout:g} s (killed)"
        finally:
            self._running = None
        if proc.returncode != 0:
            msg = (stdout + stderr).decode("utf-8", "replace").strip().splitlines()
            first = msg[0] if msg else "no output"
            return None, f"nvidia-smi exited with {proc.returncode}: {first}"
        return stdout.decode("utf-8", "replace"), None

    def close(self):
        """The agent is leaving: an nvidia-smi the poller still waits on goes with it (orphaned, a
        hung one would sleep on for ever)."""
        proc = self._running
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass

    def read(self, roots):
        errors = []
        gpus = []
        by_uuid = {}
        text, err = self._query("gpu", SMI_GPU_FIELDS)
        if err:
            return [], [], [err]
        for line in text.splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) < 8:
                if line.strip():
                    errors.append(f"nvidia-smi: unexpected line {line[:120]!r}")
                continue
            idx = _num(cols[0], int)
            if idx is None:
                continue
            uuid = cols[1] if cols[1] not in _SMI_UNKNOWN else None
            # A GPU name may contain a comma: everything between uuid and the 5 numbers.
            name = ",".join(cols[2 : len(cols) - 5]).strip() or None
            nums = cols[len(cols) - 5 :]
            gpus.append(
                _gpu(
                    idx, uuid, name, _num(nums[0]), _num(nums[1]), _num(nums[2]), _num(nums[3]), _num(nums[4])
                )
            )
            if uuid:
                by_uuid[uuid] = idx
        procs = []
        text, err = self._query("compute-apps", SMI_APP_FIELDS)
        if err:
            errors.append(err)
        else:
            for line in text.splitlines():
                cols = [c.strip() for c in line.split(",")]
                if len(cols) < 3:
                    continue
                pid = _num(cols[0], int)
                if pid is None:
                    continue
                procs.append(_proc(pid, by_uuid.get(cols[1]), _num(cols[2]), roots))
        return gpus, procs, errors


class SimSource:
    """The simulator's GPUs: devices.json plus one proc-<pid>.json per simulated process."""

    name = "sim"

    def __init__(self, directory):
        self.dir = directory

    def read(self, roots):
        errors = []
        try:
            with open(os.path.join(self.dir, "devices.json")) as f:
                devices = json.load(f)
        except FileNotFoundError:
            return [], [], [f"sim: no GPUs yet ({self.dir} has no devices.json)"]
        except (OSError, ValueError) as exc:
            return [], [], [f"sim: cannot read devices.json: {exc}"]
        used: dict[int, float] = {}
        sim_util: dict[
            int, float
        ] = {}  # only what the simulator says, from recently updated files; else unknown
        procs = []
        now = time.time()
        for path in sorted(glob.glob(os.path.join(self.dir, "proc-*.json"))):
            try:
                with open(path) as f:
                    rec = json.load(f)
                pid = int(rec["pid"])
                idx = int(rec["gpu_index"])
                mib = float(rec["used_mib"])
            except FileNotFoundError:
                continue  # the process removed it between glob and open
            except (OSError, ValueError, KeyError, TypeError) as exc:
                errors.append(f"sim: {os.path.basename(path)}: {exc}")
                continue
            if not _alive(pid):
                continue  # a dead process holds no memory, whatever its file says
            used[idx] = used.get(idx, 0.0) + mib
            util = rec.get("util_pct")
            upd = rec.get("updated")
            fresh = (
                isinstance(upd, (int, float)) and now - upd < SIM_UTIL_RECENT_S
            )  # a tuple: runs on old pythons
            if isinstance(util, (int, float)) and fresh:
                sim_util[idx] = max(sim_util.get(idx, 0.0), float(util))
            procs.append(_proc(pid, idx, round(mib, 1), roots))
        gpus = []
        for dev in devices.get("devices", []):
            try:
                idx = int(dev["index"])
            except (KeyError, TypeError, ValueError):
                continue
            util = sim_util.get(idx)
            gpus.append(
                _gpu(
                    idx,
                    dev.get("uuid"),
                    dev.get("name") or devices.get("gpu"),
                    round(used.get(idx, 0.0), 1),
                    dev.get("total_mib"),
                    util,
                    dev.get("temp_c"),
                    dev.get("power_w"),
                )
            )
        return gpus, procs, errors


class NoSource:
    name = "none"

    def read(self, roots):
        return [], [], ["no GPU telemetry: no NVML, no nvidia-smi on PATH and no simulator GPUs"]


def default_sim_dir():
    """`--source sim` without a directory: the simulators' shared root (simulators told to share)."""
    return os.path.expanduser(os.environ.get("COCKPIT_SIM_GPU_DIR") or "~/.cache/cockpit/sim-gpus")


def pick_source(args):
    """(source, startup errors). An explicit simulator directory wins; then NVML, nvidia-smi, sim."""
    notes: list[str] = []
    explicit_sim = args.sim_dir or os.environ.get("COCKPIT_SIM_GPU_DIR")
    want = args.source
    if want == "sim" or (want == "auto" and explicit_sim):
        return SimSource(os.path.expanduser(explicit_sim or default_sim_dir())), notes
    if want in ("auto", "nvml"):
        src, err = NvmlSource.try_open()
        if src is not None:
            return src, notes
        if err:
            notes.append(err)
        if want == "nvml":
            return NoSource(), notes
    if want in ("auto", "nvidia-smi"):
        exe = shutil.which("nvidia-smi")
        if exe:
            return SmiSource(exe, args.smi_timeout), []
        if want == "nvidia-smi":
            return NoSource(), [*notes, "nvidia-smi is not on PATH"]
    # No fallback to a simulator's files on "auto": simulated GPUs answer only when asked for
    # (--sim-dir, COCKPIT_SIM_GPU_DIR, --source sim), never for a real profile on a GPU-less host.
    # Only now is "NVML unavailable" news: on a host with nvidia-smi it is just how things are.
    return NoSource(), notes


# ----------------------------------------------------------------------------- the loop


class GpuPoller:
    """Reads the GPU source in a worker thread so a hung query never holds up the stream."""

    def __init__(self, source, roots, interval):
        self.source = source
        self.roots = roots
        self.interval = interval
        self.lock = threading.Lock()
        self.latest = None  # (gpu_ts, gpus, procs, errors)
        self.busy_since = None
        self.fresh = threading.Event()

    def read_once(self):
        self.busy_since = time.time()
        try:
            gpus, procs, errors = self.source.read(self.roots)
        except Exception as exc:  # a bug or a surprise in one source must not end the stream
            gpus, procs, errors = [], [], [f"{self.source.name}: {type(exc).__name__}: {exc}"]
        with self.lock:
            self.latest = (time.time(), gpus, procs, errors)
            self.busy_since = None
        self.fresh.set()

    def run(self):
        while True:
            start = time.time()
            self.read_once()
            time.sleep(max(0.0, self.interval - (time.time() - start)))

    def start(self):
        t = threading.Thread(target=self.run, name="gpu-poller", daemon=True)
        t.start()

    def snapshot(self, stuck_after):
        with self.lock:
            latest = self.latest
            busy = self.busy_since
        errors = []
        if latest is None:
            gpu_ts, gpus, procs = None, [], []
        else:
            gpu_ts, gpus, procs, errors = latest[0], latest[1], latest[2], list(latest[3])
        if busy is not None and time.time() - busy > stuck_after:
            errors.append(f"{self.source.name}: GPU query has not answered for {time.time() - busy:.0f} s")
        return gpu_ts, gpus, procs, errors


def build_sample(source_name, roots, gpu_ts, gpus, procs, errors):
    host, host_errors = read_host()
    return {
        "v": AGENT_VERSION,
        "ts": time.time(),
        "gpu_ts": gpu_ts,
        "source": source_name,
        "gpus": gpus,
        "procs": procs,
        "host": host,
        "pids_alive": {str(p): _alive(p) for p in sorted(roots)},
        "errors": errors + host_errors,
    }


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="cockpit-agent", description="Stream GPU and host telemetry as JSON lines."
    )
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--pids", default="", help="comma-separated pids of the run (their descendants count too)"
    )
    ap.add_argument("--sim-dir", default=None)
    ap.add_argument("--once", action="store_true", help="print one sample and exit")
    ap.add_argument("--smi-timeout", type=float, default=5.0)
    ap.add_argument("--source", choices=("auto", "nvml", "nvidia-smi", "sim", "none"), default="auto")
    ap.add_argument("--count", type=int, default=0, help="stop after this many samples (0 = forever)")
    return ap.parse_args(argv)


def _emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    roots = set()
    for part in args.pids.split(","):
        part = part.strip()
        if part.isdigit():
            roots.add(int(part))
    interval = max(0.05, args.interval)
    if args.source == "none":
        source, notes = NoSource(), []
    else:
        source, notes = pick_source(args)
    poller = GpuPoller(source, roots, interval)
    try:
        if args.once:
            poller.read_once()
            gpu_ts, gpus, procs, errors = poller.snapshot(stuck_after=1e9)
            _emit(build_sample(source.name, roots, gpu_ts, gpus, procs, notes + errors))
            return 0
        poller.start()
        # Give the first read a moment, so the first line usually carries GPU values.
        poller.fresh.wait(min(interval, args.smi_timeout))
        n = 0
        stuck_after = max(args.smi_timeout, interval) + interval
        next_at = time.time()
        while True:
            gpu_ts, gpus, procs, errors = poller.snapshot(stuck_after)
            _emit(build_sample(source.name, roots, gpu_ts, gpus, procs, notes + errors))
            notes = []
            n += 1
            if args.count and n >= args.count:
                return 0
            next_at += interval
            time.sleep(max(0.0, next_at - time.time()))
            if time.time() - next_at > interval:
                next_at = time.time()  # fell behind (suspended host): don't burst
    except (BrokenPipeError, KeyboardInterrupt):
        # Cockpit went away: exit quietly.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stop the interpreter's flush from failing
        except OSError:
            pass
        return 0
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


if __name__ == "__main__":
    sys.exit(main())
