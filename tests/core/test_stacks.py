"""Stacks grouped by rank (cockpit/core/stacks.py) and the engines' process titles."""

from __future__ import annotations

from typing import Any

from cockpit.backends import get_backend
from cockpit.core.stacks import group, main_frames

RECV = [{"function": "recv", "file": "/x/shm_broadcast.py", "line": 10},
        {"function": "worker_busy_loop", "file": "/x/multiproc_executor.py", "line": 700}]
ALL_REDUCE = [{"function": "all_reduce", "file": "/x/parallel_state.py", "line": 512},
              {"function": "worker_busy_loop", "file": "/x/multiproc_executor.py", "line": 700}]


def proc(rank: str, frames: list[dict[str, Any]], state: str = "S", role: str = "worker") -> dict[str, Any]:
    pid = 100 + int(rank.removeprefix("TP"))
    return {"node": "h", "pid": pid, "name": f"VLLM::Worker_{rank}", "role": role, "rank": rank, "state": state,
            "frames": frames, "error": None}


def test_one_rank_of_eight_elsewhere_is_the_odd_one_out() -> None:
    procs = [proc(f"TP{i}", ALL_REDUCE if i == 5 else [{**RECV[0], "line": 10 + i}, RECV[1]]) for i in range(8)]
    procs.append({"node": "h", "pid": 1, "name": "vllm serve", "role": "api_server", "rank": None, "state": "S",
                  "frames": ALL_REDUCE, "error": None})
    groups, odd = group(procs)
    assert [g["count"] for g in groups] == [7, 1]  # line numbers differ within a group: still one group
    assert groups[0]["top_frame"] == "recv (shm_broadcast.py:10)"
    assert odd is not None and odd["rank"] == "TP5" and odd["pid"] == 105
    assert odd["reason"] == "TP5 in all_reduce (parallel_state.py:512); 7 others elsewhere"


def test_with_two_ranks_the_stopped_one_is_named() -> None:
    groups, odd = group([proc("TP0", ALL_REDUCE), proc("TP1", RECV, state="T")])
    assert len(groups) == 2
    assert odd is not None and odd["rank"] == "TP1" and "stopped" in odd["reason"]


def test_identical_ranks_have_no_odd_one_out() -> None:
    groups, odd = group([proc(f"TP{i}", RECV) for i in range(4)])
    assert len(groups) == 1 and groups[0]["ranks"] == ["TP0", "TP1", "TP2", "TP3"] and odd is None


def test_a_rank_py_spy_could_not_read_is_left_out_of_the_groups() -> None:
    p = proc("TP1", [])
    p["error"] = "Permission denied"
    groups, _ = group([proc("TP0", RECV), p])
    assert groups[0]["ranks"] == ["TP0"]


def test_main_thread_frames_are_the_ranks_stack() -> None:
    p = {"threads": [{"name": "Thread-1", "frames": RECV}, {"name": "MainThread", "frames": ALL_REDUCE}]}
    assert main_frames(p) == ALL_REDUCE


def test_process_titles_name_role_and_rank() -> None:
    v, s = get_backend("vllm"), get_backend("sglang")
    assert v.launch.process_role("VLLM::Worker_TP1", False) == ("worker", "TP1")
    assert v.launch.process_role("VLLM::Worker_PP1_TP0", False) == ("worker", "PP1 TP0")
    assert v.launch.process_role("VLLM::Worker", False) == ("worker", "TP0")
    assert v.launch.process_role("VLLM::EngineCore", False) == ("engine_core", None)
    assert v.launch.process_role("vllm serve /m", True) == ("api_server", None)
    assert s.launch.process_role("sglang::scheduler_TP3", False) == ("scheduler", "TP3")
    assert s.launch.process_role("sglang::scheduler_DP1_TP3_EP3", False) == ("scheduler", "DP1 TP3")
    assert s.launch.process_role("sglang::detokenizer", False) == ("detokenizer", None)
