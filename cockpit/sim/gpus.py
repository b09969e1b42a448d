"""Simulated GPUs on disk: the contract the telemetry agent's "sim" source reads.

Directory: --sim-dir or env COCKPIT_SIM_GPU_DIR when several simulators are told to share GPUs,
else one set per simulator instance: ~/.cache/cockpit/sim-gpus/port-<port> (`instance_dir`). Two
simulators cannot listen on one port of a host, so the port names an instance; a restart on the
same port sees the previous run's leftovers, as a real GPU host would.
- `devices.json`: {"gpu": key, "devices": [{"index", "uuid", "name", "total_mib"}, ...]}, written by
  the sim's main process (atomic rename; entries of other indices are kept).
- `proc-<pid>.json`: {"pid", "gpu_index", "used_mib", "updated"}, written by each rank process
  whenever its memory changes, removed on a clean exit. A file whose pid is dead is ignored, so a
  killed process's memory "vanishes" exactly when the process does.

A GPU's free memory is its total minus the used_mib of every live process file on it, and the
simulated ranks measure their own "avail mem" the same way, so a leftover or foreign process file
lowers what the log prints, like a real GPU would.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cockpit.sim.presets import MIB_PER_GIB, GpuPreset

SHARED_ROOT = "~/.cache/cockpit/sim-gpus"


def instance_dir(port: int) -> str:
    """The simulated GPUs of the simulator serving `port` when nobody chose a directory (unexpanded,
    so a remote agent expands it in its own home)."""
    return f"{SHARED_ROOT}/port-{int(port)}"


def atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie (a zombie's GPU memory is already freed)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]
        return state not in (b"Z", b"X")
    except (OSError, ValueError):
        return True


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def device_uuid(gpu: GpuPreset, index: int) -> str:
    digest = hashlib.sha1(f"{gpu.key}:{index}".encode()).hexdigest()
    return f"GPU-sim-{digest[:8]}-{digest[8:12]}-{index:04d}"


def write_devices(directory: Path, gpu: GpuPreset, count: int) -> None:
    """Declare GPUs 0..count-1 of this simulated host, keeping entries for other indices."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "devices.json"
    with _locked(directory):
        devices: dict[int, dict[str, Any]] = {}
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            for d in old.get("devices", []):
                devices[int(d["index"])] = d
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        for i in range(count):
            devices[i] = {"index": i, "uuid": device_uuid(gpu, i), "name": gpu.name, "total_mib": gpu.total_mib}
        atomic_write_json(path, {"gpu": gpu.key, "devices": [devices[i] for i in sorted(devices)]})


def write_host(directory: Path, total_gb: float, available_gb: float, pid: int) -> None:
    """`host.json` (additive to the contract): the simulated host's memory in decimal GB, so that
    a HiCache story shows the simulated 449 GB rather than this machine's RAM. Ignore it when
    `pid` is dead."""
    atomic_write_json(
        directory / "host.json",
        {"pid": pid, "mem_total_gb": round(total_gb, 2), "mem_available_gb": round(max(0.0, available_gb), 2),
         "updated": time.time()},
    )


def read_procs(directory: Path) -> list[dict[str, Any]]:
    """Every proc file whose process is alive."""
    out: list[dict[str, Any]] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("proc-") and name.endswith(".json")):
            continue
        try:
            data = json.loads((directory / name).read_text(encoding="utf-8"))
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid_alive(pid):
            out.append(data)
    return out


def used_mib(directory: Path, gpu_index: int, job: str | None = None, node: int = 0) -> float:
    """Memory held on GPU `gpu_index`. A process of another node of the same multi-node job (`job`,
    its rendezvous address) is on another machine in reality: it does not count, even when two
    "nodes" share one machine's simulated GPUs (tests run two loopback hosts on one box)."""
    return sum(float(p.get("used_mib", 0.0)) for p in read_procs(directory)
               if int(p.get("gpu_index", -1)) == gpu_index
               and not (job is not None and p.get("job") == job and int(p.get("node", 0)) != node))


def free_gib(directory: Path, gpu_index: int, total_mib: float, job: str | None = None, node: int = 0) -> float:
    return max(0.0, (total_mib - used_mib(directory, gpu_index, job, node)) / MIB_PER_GIB)


def prune_dead(directory: Path) -> int:
    """Remove proc files of processes that no longer exist (they are ignored anyway)."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        # proc-<pid>.json, or a temporary .proc-<pid>.json.<pid>.tmp left by a kill mid-write
        m = re.match(r"^\.?proc-(\d+)\.json(?:\.\d+\.tmp)?$", name)
        if not m:
            continue
        pid = int(m.group(1))
        if not pid_alive(pid):
            with contextlib.suppress(OSError):
                (directory / name).unlink()
                removed += 1
    return removed


class ProcFile:
    """The memory one simulated process holds on its GPU."""

    def __init__(self, directory: Path, gpu_index: int, pid: int | None = None, job: str | None = None, node: int = 0):
        self.directory = directory
        self.gpu_index = gpu_index
        self.job, self.node = job, node  # a multi-node run's rendezvous address and this node's rank
        self.pid = pid or os.getpid()
        self.path = directory / f"proc-{self.pid}.json"
        self.used_gib = 0.0
        self.util_pct: float | None = None
        self.written_at = 0.0

    def set(self, used_gib: float, util_pct: float | None = None) -> None:
        """Rewrite the file. `util_pct` (optional, additive to the contract) is the GPU busy %;
        readers trust it only while `updated` is recent, so busy ranks rewrite it periodically."""
        self.used_gib = max(0.0, used_gib)
        if util_pct is not None:
            self.util_pct = util_pct
        record: dict[str, Any] = {
            "pid": self.pid,
            "gpu_index": self.gpu_index,
            "used_mib": round(self.used_gib * MIB_PER_GIB, 1),
            "updated": time.time(),
        }
        if self.util_pct is not None:
            record["util_pct"] = round(self.util_pct, 1)
        if self.job is not None:
            record.update(job=self.job, node=self.node)
        with contextlib.suppress(OSError):
            atomic_write_json(self.path, record)
        self.written_at = time.monotonic()

    def refresh(self, every_s: float = 2.0) -> None:
        """Keep `updated` fresh while the GPU is busy."""
        if self.util_pct and time.monotonic() - self.written_at >= every_s:
            self.set(self.used_gib)

    def add(self, gib: float) -> None:
        self.set(self.used_gib + gib)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
