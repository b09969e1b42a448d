"""A real vLLM 0.32.0 CPU log at TP2 (tests/data/real-engine/vllm-0.32.0-cpu-tp2-worker-tp1-sigkill.log, written by
the engine on this machine: `--tensor-parallel-size 2`, VLLM_CPU_OMP_THREADS_BIND="0|1", a client's
request, Worker_TP1 stopped and continued, then SIGKILLed): both ranks seen, the crash is TP1's."""

from __future__ import annotations

from pathlib import Path

from cockpit.backends import get_backend

LOG = Path(__file__).resolve().parents[1] / "data" / "real-engine" / "vllm-0.32.0-cpu-tp2-worker-tp1-sigkill.log"


def test_a_killed_worker_is_a_crash_of_its_rank() -> None:
    st = get_backend("vllm").logs.read(LOG)
    assert list(st.ranks) == ["TP0", "TP1"]
    assert st.format == "vllm-0.32.0"
    assert st.phase == "crashed" and st.crash is not None
    # `Worker proc VllmWorker-1 died unexpectedly (exit code: -9)`: worker 1 is TP1
    assert st.crash.rank == "TP1"
    assert st.crash.exit_code == -9 or "exit code: -9" in st.crash.message


def test_its_stats_lines_count_as_tokens_moving_only_when_they_move() -> None:
    st = get_backend("vllm").logs.read(LOG)
    nonzero = sum(1 for p in st.gen_throughput if p.value > 0)
    assert st.progress_lines >= nonzero >= 1
