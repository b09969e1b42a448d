"""Builders shared by the journal tests: real RunStates and RunInfos, as the supervisor makes them."""

from __future__ import annotations

from typing import Any

from cockpit.core.findings import Finding, FlagChange
from cockpit.core.state import Crash, RunState, SeriesPoint
from cockpit.supervisor.api import RunInfo


def run_info(run_id: str, profile: str = "kimi-k2.5-tp8", started_at: str = "2026-11-29T08:00:00+00:00",
             flags: dict[str, Any] | None = None) -> RunInfo:
    return RunInfo(
        id=run_id,
        profile=profile,
        hosts=("gpu-box-1",),
        pid=4242,
        pgid=4242,
        started_at=started_at,
        run_dir=f"/data/runs/{run_id}",
        log_path=f"/data/runs/{run_id}/sglang.log",
        flags=dict(flags or {}),
        version="0.5.9",
    )


def ready_state(headroom: float = 5.5, kv_tokens: int = 174617, ranks: int = 8,
                throughput: tuple[float, ...] = (2800.0, 3010.0, 2874.0)) -> RunState:
    st = RunState(format="sglang-0.5.9", phase="ready", phase_since="2026-11-29 08:12:41")
    st.max_total_num_tokens = kv_tokens
    for i in range(ranks):
        rm = st.rank(f"TP{i}")
        rm.avail_after_capture_gb = round(headroom + 0.01 * i, 2)
        rm.timeline["init"] = "2026-11-29 08:00:05"
        rm.timeline["ready"] = "2026-11-29 08:12:41"
    st.ready_in_log = True
    for j, v in enumerate(throughput):
        st.gen_throughput.append(SeriesPoint(ts=f"2026-11-29 08:13:{10 + j:02d}", value=v))
        st.token_usage.append(SeriesPoint(ts=f"2026-11-29 08:13:{10 + j:02d}", value=0.1 * (j + 1)))
    st.last_ts = "2026-11-29 08:13:30"
    return st


def crashed_state(headroom: float = 0.82, kv_tokens: int = 246890) -> RunState:
    st = ready_state(headroom=headroom, kv_tokens=kv_tokens, throughput=(1500.0,))
    st.phase = "crashed"
    st.crash = Crash(
        kind="cuda_oom",
        phase="prefill",
        rank="TP3",
        line=812,
        message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB.",
        decisive_lines=["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory."],
    )
    return st


def low_headroom_finding() -> Finding:
    return Finding(
        id="low_headroom_after_graph_capture",
        severity="critical",
        message="TP3 has 0.82 GiB free after CUDA-graph capture; target 5.0 GiB.",
        ranks=("TP3",),
        changes=(FlagChange("--mem-fraction-static", 0.93, 0.88),),
        predicted={"headroom_gb": 5.5, "max_total_num_tokens": 60000},
    )
