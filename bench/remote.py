"""Benchmark: what Cockpit costs on and towards a GPU host.

  agent     the telemetry agent's CPU on the host at 1 Hz (sim source with 8 GPUs, and the
            nvidia-smi path with a fake nvidia-smi), measured over --seconds from /proc.
  ssh       SSH connections to the host while a Supervisor follows the log + telemetry + the
            readiness probe through a real sshd on loopback (its per-connection children counted).
  crash     crash detection latency: from the decisive log line (torch.OutOfMemoryError) being
            written to the Supervisor's snapshot saying CRASHED, locally and through sshd.

    python bench/remote.py                 # ~1.5 min
    python bench/remote.py --only crash --runs 9
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CLK_TCK, median, pct, print_machine, proc_cpu_s

FAKE_SMI = """#!/bin/sh
# A stand-in nvidia-smi: 8 GPUs, 8 compute apps, printed the way the real one prints CSV.
case "$*" in
  *--query-compute-apps*)
    for i in 0 1 2 3 4 5 6 7; do echo "4242$i, GPU-aaaaaaaa-0000-0000-0000-00000000000$i, 89000"; done ;;
  *--query-gpu*)
    for i in 0 1 2 3 4 5 6 7; do
      echo "$i, GPU-aaaaaaaa-0000-0000-0000-00000000000$i, NVIDIA RTX PRO 6000, 89000, 97887, 97, 61, 312.50"
    done ;;
  *) echo "fake nvidia-smi" ;;
esac
"""


def _stat_children_cpu(pid: int) -> float:
    """CPU of the reaped children of pid (cutime + cstime): nvidia-smi runs the agent starts."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / CLK_TCK


def agent_cpu(tmp: Path, seconds: float, source: str) -> dict[str, Any]:
    env = dict(os.environ)
    argv = ["python3", "-", "--interval", "1", "--source", source]
    if source == "sim":
        from cockpit.sim.gpus import write_devices
        from cockpit.sim.presets import GPUS

        sim = tmp / "sim-gpus"
        write_devices(sim, GPUS["rtx-pro-6000"], 8)
        argv += ["--sim-dir", str(sim)]
    else:
        bindir = tmp / "fake-bin"
        bindir.mkdir(exist_ok=True)
        smi = bindir / "nvidia-smi"
        smi.write_text(FAKE_SMI)
        smi.chmod(0o755)
        env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    argv += ["--pids", str(os.getpid())]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    from cockpit.telemetry.client import agent_source  # the agent as sent to a host: procfs.py + agent.py

    proc.stdin.write(agent_source())
    proc.stdin.close()
    proc.stdout.readline()  # the first sample: start-up (interpreter, imports) is not the steady cost
    c0, k0, t0 = proc_cpu_s(proc.pid), _stat_children_cpu(proc.pid), time.monotonic()
    samples = 0
    while time.monotonic() - t0 < seconds:
        line = proc.stdout.readline()
        if not line:
            break
        samples += 1
        last = json.loads(line)
    wall = time.monotonic() - t0
    own, kids = proc_cpu_s(proc.pid) - c0, _stat_children_cpu(proc.pid) - k0
    proc.kill()
    proc.wait()
    return {"source": last.get("source"), "gpus": len(last.get("gpus") or []), "samples": samples, "wall_s": wall,
            "agent_pct": own / wall * 100, "nvidia_smi_pct": kids / wall * 100}


async def ssh_connections(tmp: Path, sshd: Any, seconds: float) -> dict[str, Any]:
    from _common import load, writer_profile
    from follow import Seen

    from cockpit.sim.gpus import write_devices
    from cockpit.sim.presets import GPUS
    from cockpit.supervisor.supervisor import Supervisor

    sim = tmp / "conn-gpus"
    write_devices(sim, GPUS["rtx-pro-6000"], 8)
    prof = load(writer_profile(tmp, "conn", ["--rate", "200", "--hz", "10", "--seconds", str(seconds + 30)],
                               ssh="gpu-box-1", sim_dir=sim))
    seen = Seen()
    before = len(sshd.connections())
    sup = Supervisor(prof, on_logs=seen.on_logs, on_snapshot=seen.on_snapshot, runs_root=str(tmp / "runs"))
    await sup.launch(attach=False)
    task = asyncio.create_task(sup.run())
    counts = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.5)
        counts.append(len(sshd.connections()) - before)
    snap = sup.snapshot()
    await sup.stop(timeout=5)
    await sup.close()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
    return {"max_connections": max(counts), "min_connections": min(counts), "lines_seen": seen.top,
            "health": snap.health, "telemetry_source": (snap.gpus[0].source if snap.gpus else None),
            "hosts_sampled": len(snap.hosts)}


def crash_latency(tmp: Path, runs: int, ssh: bool) -> list[float]:
    from follow import cockpit_run

    out = []
    for i in range(runs):
        r = asyncio.run(cockpit_run(tmp, f"crash{'s' if ssh else 'l'}{i}",
                                    ["--rate", "2000", "--hz", "20", "--seconds", "1", "--crash", "--linger", "10"],
                                    ssh="gpu-box-1" if ssh else "local", timeout=60))
        out.append(r["seen"].crashed_at - r["info"]["crash_at"])
        print(f"  {'ssh' if ssh else 'local'} run {i + 1}: {out[-1] * 1e3:.0f} ms", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20, help="agent CPU window")
    ap.add_argument("--only", choices=("agent", "ssh", "crash"), default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print_machine()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-remote-") as d:
        tmp = Path(d)
        os.environ["COCKPIT_RUNS_ROOT"] = str(tmp / "runs")
        if args.only in (None, "agent"):
            for source in ("sim", "nvidia-smi"):
                a = out[f"agent_{source}"] = agent_cpu(tmp, args.seconds, source)
                print(f"agent at 1 Hz, {source} source ({a['gpus']} GPUs, {a['samples']} samples in {a['wall_s']:.0f} s): "
                      f"{a['agent_pct']:.2f}% of a core (must < 1%)"
                      + (f", + {a['nvidia_smi_pct']:.2f}% in the (fake, shell) nvidia-smi it runs" if source != "sim" else ""),
                      flush=True)
        sshd = None
        if args.only in (None, "ssh", "crash"):
            from _sshd import LoopbackSshd

            sshd = LoopbackSshd(tmp / "sshd")
            os.environ["HOME"] = str(sshd.home)
        try:
            if args.only in (None, "ssh"):
                c = out["ssh"] = asyncio.run(ssh_connections(tmp, sshd, 8.0))
                print(f"ssh: {c['max_connections']} SSH connection(s) to the host while following the log "
                      f"({c['lines_seen']} lines), telemetry ({c['telemetry_source']}) and the readiness probe "
                      f"(/health: {c['health']}) (must be 1)", flush=True)
            if args.only in (None, "crash"):
                loc = crash_latency(tmp, args.runs, ssh=False)
                rem = crash_latency(tmp, args.runs, ssh=True)
                out["crash"] = {"local_median_s": median(loc), "local_max_s": max(loc), "ssh_median_s": median(rem),
                                "ssh_max_s": max(rem), "runs": args.runs}
                print(f"crash detection: local median {median(loc) * 1e3:.0f} ms, max {max(loc) * 1e3:.0f} ms (must < 500); "
                      f"through sshd median {median(rem) * 1e3:.0f} ms, max {max(rem) * 1e3:.0f} ms (must < 1000); "
                      f"p90 local {pct(loc, 90) * 1e3:.0f} / ssh {pct(rem, 90) * 1e3:.0f} ms", flush=True)
        finally:
            if sshd is not None:
                sshd.stop()
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
