"""The Kimi-K2.5 story as RunSnapshots: real domain numbers (DESIGN.md), no I/O stand-ins.

8 × RTX PRO 6000 (95.0 GiB usable), TP8, P ≈ 94.6 GiB, W ≈ 71.82 GiB, graphs 3.75 GiB, TP3 a little
lower than its peers. At mfs 0.93 about 0.8 GiB stays free after capture; at 0.88 about 5.5 GiB.
"""

from __future__ import annotations

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import Crash, RankMemory, RunState, SeriesPoint
from cockpit.supervisor.api import GpuProcess, GpuSample, HostSample, LogLine, NodeView, RunInfo, RunSnapshot

T0 = 1_795_953_720.0  # frozen clock for deterministic screenshots: 2026-11-29T12:02:00Z, after the story's runs began
TOTAL_GIB = 95.0
MLA_CELL_GIB = (512 + 64) * 61 * 2 / 2**30


def _rank(i: int, mfs: float, phase: str) -> RankMemory:
    p = 94.6 if i == 3 else 94.62 + 0.01 * (i % 2)
    w = 71.82
    r = RankMemory(rank=f"TP{i}", pre_load_avail_gb=p)
    r.timeline = {"init": "2026-11-29 11:54:02", "weights_begin": "2026-11-29 11:54:05"}
    if phase == "loading":
        return r
    r.weights_gb = w
    r.after_weights_avail_gb = round(p - w, 2)
    r.timeline["weights_end"] = "2026-11-29 11:55:21"
    kv = round(p * mfs - w, 2)
    r.kv_gb = kv
    r.kv_tokens = int(kv / MLA_CELL_GIB)
    before = round(p - w - kv - 2.05 + (0.02 if i != 3 else 0.0), 2)
    r.avail_before_capture_gb = before
    r.timeline["kv_pool"] = "2026-11-29 11:55:24"
    r.timeline["capture_begin"] = "2026-11-29 11:55:26"
    if phase == "kv_pool":
        return r
    r.graph_gb = 3.75
    r.avail_after_capture_gb = round(before - 3.75, 2)
    r.captures_done = 1
    r.timeline["capture_end"] = "2026-11-29 11:55:40"
    if phase in ("ready", "crashed"):
        r.timeline["ready"] = "2026-11-29 11:55:46"
    return r


def two_node_snapshot(*, node1: str = "alive", processes: bool = False) -> RunSnapshot:
    """TP16 over two hosts (gpu-box-1 logs TP0-7, gpu-box-2 TP8-15), READY at 0.88, with the nodes
    as the supervisor reports them (gpu-box-1's profile names its address). `node1`: node 1's state
    (`died`: its server ended unasked, its GPUs released, the node_died finding on top and the run
    crashed — the dashboard as it stands behind the crash dialog, once that is closed);
    `processes`: the run's 16 processes as telemetry lists them."""
    base = story_snapshot(0.88, "ready")
    state = base.state.copy()
    gpus = []
    procs = []
    rank_gpu = {}
    for i in range(16):
        host = "gpu-box-1" if i < 8 else "gpu-box-2"
        rm = _rank(i % 8, 0.88, "ready")
        rm.rank = f"TP{i}"
        state.ranks[rm.rank] = rm
        rank_gpu[rm.rank] = (host, i % 8)
        used = round(TOTAL_GIB - (rm.avail_after_capture_gb or 0.0), 2)
        if host == "gpu-box-2" and node1 == "died":
            used = 0.45  # the processes are gone; a CUDA context's worth is all a sample shows
        elif processes:
            procs.append(GpuProcess(host=host, pid=5100 + i, gpu_index=i % 8, used_gb=used, belongs_to_run=True))
        gpus.append(GpuSample(host=host, index=i % 8, uuid=None, name=None, used_gb=used, total_gb=TOTAL_GIB,
                              util_pct=90.0, temp_c=None, power_w=None, sampled_at=T0 - 0.5, source="agent"))
    hosts = tuple(
        HostSample(host=h, mem_total_gb=449.0, mem_available_gb=400.0, cgroup_limit_gb=None, sampled_at=T0 - 0.5, source="agent")
        for h in ("gpu-box-1", "gpu-box-2")
    )
    run = RunInfo(id="20261129-120000-tp16", profile="two-node-tp16", hosts=("gpu-box-1", "gpu-box-2"), pid=5100,
                  pgid=5100, started_at="2026-11-29T12:00:00Z", run_dir="/r", log_path="/l",
                  flags={"mem-fraction-static": 0.88, "tp": 16, "enable-hierarchical-cache": True, "hicache-size": 48})
    state.host_cache_gb_per_rank = 48.0
    findings = base.findings
    lifecycle = "running"
    if node1 == "died":
        state.phase, lifecycle = "crashed", "failed"
        findings = (Finding("node_died", "critical", "node 1 (gpu-box-2) died: its server exited with code 137 and "
                            "its log names no cause. The head may still answer /health 200 until a request needs "
                            "this node; restart the whole run."), *findings)
    nodes = (NodeView(0, "gpu-box-1", "10.0.0.1", "alive"), NodeView(1, "gpu-box-2", None, node1))
    return RunSnapshot(taken_at=T0, profile="two-node-tp16", lifecycle=lifecycle, state=state, findings=findings,
                       run=run, gpus=tuple(gpus), gpu_processes=tuple(procs), hosts=hosts, readiness="log + /health",
                       health="200", rank_gpu=rank_gpu, nodes=nodes)


def story_snapshot(mfs: float = 0.93, phase: str = "ready", *, crashed: bool = False, restarted: bool = False) -> RunSnapshot:
    state = RunState(format="sglang-0.5.9", phase="crashed" if crashed else phase, phase_since="2026-11-29 11:55:46")
    state.server_args = {"mem_fraction_static": mfs, "tp_size": 8, "model_path": "/models/Kimi-K2.5"}
    for i in range(8):
        rm = _rank(i, mfs, phase)
        state.ranks[rm.rank] = rm
    if phase in ("ready", "crashed"):
        state.max_total_num_tokens = state.ranks["TP3"].kv_tokens
        state.ready_in_log = True
        for k in range(40):
            state.gen_throughput.append(SeriesPoint(ts=f"11:56:{k:02d}", value=2400.0 + 15 * k - (k % 5) * 30))
            state.token_usage.append(SeriesPoint(ts=f"11:56:{k:02d}", value=min(0.95, 0.05 + 0.02 * k)))
    findings: list[Finding] = []
    change = FlagChange("--mem-fraction-static", 0.93, 0.88)
    if mfs >= 0.93 and phase in ("ready", "crashed"):
        findings.append(
            Finding(
                id="low_headroom_after_graph_capture",
                severity="critical",
                message="TP3 has 0.80 GiB free after CUDA graph capture (target 5.0 GiB): a large prefill will run out of memory.",
                ranks=("TP3",),
                changes=(change,),
                predicted={"headroom_gb": 5.5, "max_total_num_tokens": 174617},
                arithmetic="P = 94.60 GiB, f = 0.80 GiB, δ = (5.0 − 0.80) / 94.60 = 0.044 → 0.93 − 0.05 = 0.88",
            )
        )
    if crashed:
        state.crash = Crash(
            kind="cuda_oom",
            phase="prefill",
            rank="TP3",
            line=812,
            message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 3 has a total capacity of 95.00 GiB of which 812.00 MiB is free.",
            decisive_lines=[
                "[2026-11-29 11:57:03 TP3] Scheduler hit an exception: Traceback (most recent call last):",
                '  File "sglang/srt/model_executor/model_runner.py", line 1720, in forward_extend',
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 3 has a total capacity of 95.00 GiB of which 812.00 MiB is free.",
                "[2026-11-29 11:57:03] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            ],
            exit_code=137,
        )
    if mfs < 0.93 and phase == "ready":
        findings.append(Finding(id="headroom_ok", severity="ok", message="headroom ≥ 5.0 GiB on every rank after capture"))
    gpus = []
    procs = []
    for i in range(8):
        rm = state.ranks[f"TP{i}"]
        used = None
        if not crashed:
            used = round(TOTAL_GIB - (rm.avail_after_capture_gb or rm.avail_before_capture_gb or rm.pre_load_avail_gb or 0.0), 2)
        gpus.append(
            GpuSample(
                host="local", index=i, uuid=f"GPU-sim-{i}", name="NVIDIA RTX PRO 6000 (simulated)",
                used_gb=used, total_gb=TOTAL_GIB, util_pct=None if crashed else 96.0 + i % 3,
                temp_c=61.0, power_w=410.0, sampled_at=T0 - 0.4 - (9.0 if crashed else 0.0), source="sim",
            )
        )
        if not crashed:
            procs.append(GpuProcess(host="local", pid=41000 + i, gpu_index=i, used_gb=used, belongs_to_run=True))
    if restarted:
        procs.append(GpuProcess(host="local", pid=4412, gpu_index=3, used_gb=0.4, belongs_to_run=False))
    run = RunInfo(
        id="20261129-115402-demo" if not restarted else "20261129-115811-demo",
        profile="demo", hosts=("local",), pid=40999, pgid=40999, started_at="2026-11-29T11:54:02Z",
        run_dir="/tmp/runs/demo", log_path="/tmp/demo/logs/sglang.log",
        flags={"mem-fraction-static": mfs, "tp": 8},
    )
    return RunSnapshot(
        taken_at=T0,
        profile="demo",
        lifecycle="stopped" if crashed else "running",
        state=state,
        findings=tuple(findings),
        run=run,
        gpus=tuple(gpus),
        gpu_processes=tuple(procs),
        hosts=(HostSample(host="local", mem_total_gb=449.0, mem_available_gb=380.0, cgroup_limit_gb=None, sampled_at=T0 - 0.4, source="sim"),),
        readiness="log + /health" if phase == "ready" else "",
        health="200" if phase == "ready" and not crashed else None,
        flag_diff=(FlagChange("--mem-fraction-static", 0.93, mfs),) if restarted else (),
        rank_gpu={f"TP{i}": ("local", i) for i in range(8)},
    )


def story_log_lines() -> list[LogLine]:
    lines = []
    n = 0
    for i in range(8):
        n += 1
        lines.append(LogLine(n, f"TP{i}", f"[2026-11-29 11:54:05 TP{i}] Load weight begin. avail mem=94.6{i % 2} GB"))
    for i in range(8):
        n += 1
        lines.append(LogLine(n, f"TP{i}", f"[2026-11-29 11:55:21 TP{i}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=22.78 GB, mem usage=71.82 GB."))
    for i in range(8):
        n += 1
        lines.append(LogLine(n, f"TP{i}", f"[2026-11-29 11:55:40 TP{i}] Capture cuda graph end. Time elapsed: 13.98 s. mem usage=3.75 GB. avail mem=0.8{i} GB."))
    for k in range(20):
        n += 1
        lines.append(LogLine(n, "TP0", f"[2026-11-29 11:56:{k:02d} TP0] Decode batch. #running-req: 12, #token: 4096, token usage: 0.{k:02d}, gen throughput (token/s): {2400 + 15 * k:.2f}, #queue-req: 0, "))
    return lines
