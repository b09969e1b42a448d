"""Facts about THIS machine for preflight: available host RAM and the visible GPUs.

Host RAM available = min(/proc/meminfo MemAvailable, cgroup memory.max − memory.current): inside a
container the cgroup limit is what the kernel OOM-killer enforces, not the host's free memory.
GPUs come from NVML (nvidia-ml-py) when it works, else from `nvidia-smi`, else stay unknown (None,
never 0). Remote hosts are measured by the telemetry agent over SSH, not here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from cockpit.backends.base import HostFacts

GB = 1e9
GIB = 2**30
CGROUP_ROOT = Path("/sys/fs/cgroup")
SMI_QUERY = "index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
SMI_TIMEOUT_S = 5.0


def _meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            mult = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[key.strip()] = int(parts[0]) * mult
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_headroom_bytes(root: Path = CGROUP_ROOT) -> int | None:
    """memory.max − memory.current of this process's cgroup (v2, or v1 limit − usage); None if unlimited."""
    rel = ""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                rel = line[3:].strip().lstrip("/")
    except OSError:
        pass
    for base in ([root / rel] if rel else []) + [root]:
        limit = _read_int(base / "memory.max")
        if limit is not None:
            used = _read_int(base / "memory.current") or 0
            return max(0, limit - used)
    limit = _read_int(root / "memory" / "memory.limit_in_bytes")
    if limit is not None and limit < 1 << 60:  # v1 writes a huge number for "no limit"
        used = _read_int(root / "memory" / "memory.usage_in_bytes") or 0
        return max(0, limit - used)
    return None


def _gpus_nvml() -> tuple[int, list[float], list[float]] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVML raises its own NVMLError subclasses
        return None
    try:
        n = pynvml.nvmlDeviceGetCount()
        totals: list[float] = []
        frees: list[float] = []
        for i in range(n):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            totals.append(info.total / GIB)
            frees.append(info.free / GIB)
        return n, totals, frees
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _gpus_smi(env: dict[str, str] | None = None) -> tuple[int, list[float], list[float | None]] | None:
    path = (env or os.environ).get("PATH")
    exe = shutil.which("nvidia-smi", path=path)
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    totals: list[float] = []
    frees: list[float | None] = []
    for line in proc.stdout.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5:
            continue
        used, total = _float(cols[3]), _float(cols[4])
        if total is None:
            continue
        totals.append(total / 1024)  # MiB -> GiB
        frees.append((total - used) / 1024 if used is not None else None)
    if not totals:
        return None
    return len(totals), totals, frees


def local_host_facts(*, use_nvml: bool = True, env: dict[str, str] | None = None) -> HostFacts:
    """Measure this machine. Anything unreadable stays None."""
    mi = _meminfo()
    total = mi.get("MemTotal")
    avail = mi.get("MemAvailable")
    cg = cgroup_headroom_bytes()
    if cg is not None:
        avail = cg if avail is None else min(avail, cg)
    gpus: tuple[int, list[float], list[float]] | tuple[int, list[float], list[float | None]] | None = None
    source = "psutil"
    if use_nvml:
        gpus = _gpus_nvml()
        if gpus is not None:
            source = "nvml"
    if gpus is None:
        gpus = _gpus_smi(env)
        if gpus is not None:
            source = "nvidia-smi"
    if total is None:
        try:
            import psutil

            vm = psutil.virtual_memory()
            total = vm.total
            if avail is None:
                avail = vm.available
        except Exception:
            pass
    return HostFacts(
        host="local",
        mem_total_gb=round(total / GB, 2) if total is not None else None,
        mem_available_gb=round(avail / GB, 2) if avail is not None else None,
        gpu_count=gpus[0] if gpus else None,
        gpu_mem_total_gib=round(min(gpus[1]), 2) if gpus else None,
        gpu_free_gib=tuple(round(f, 2) if f is not None else None for f in gpus[2]) if gpus else (),
        source=source,
    )
