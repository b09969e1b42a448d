"""Issue 35's classes, each on a short log (the real excerpts are in tests/data/real, batch issue35):
engine deaths of every generation, a gloo peer that closed, the engine's logger under another
format, and SGLang's bare and broken lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cockpit.commands.diagnose import diagnose_logs, to_json


def run(tmp_path: Path, text: str) -> dict[str, Any]:
    p = tmp_path / "x.log"
    p.write_text(text)
    state, findings, reads = diagnose_logs([str(p)])
    out = to_json(state, findings, reads)
    json.dumps(out, allow_nan=False)
    return out


def sched_trace(exc: str, func: str = "event_loop_normal", call: str = "self.run_batch(batch)") -> str:
    """TP0's scheduler trace through one frame of scheduler.py, ending with `exc`."""
    return ("[2026-01-02 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            f'  File "/x/sglang/srt/managers/scheduler.py", line 977, in {func}\n    {call}\n{exc}\n')


V0_SERVING = ("INFO 11-05 12:03:00 engine.py:290] Added request chat-1.\n"
              "INFO 11-05 12:03:01 metrics.py:349] Avg prompt throughput: 6.5 tokens/s, Avg generation throughput: 0.0 "
              "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%.\n")


def test_v0_mqllmengine_dead_is_a_crash_while_serving(tmp_path: Path) -> None:
    out = run(tmp_path, V0_SERVING + "CRITICAL 11-05 12:03:03 launcher.py:99] MQLLMEngine is already dead, terminating server process\n")
    assert out["crash"]["kind"] == "unknown" and out["crash"]["phase"] == "serving"


def test_v0_engine_iteration_timeout_is_the_engines_watchdog(tmp_path: Path) -> None:
    out = run(tmp_path, V0_SERVING + "ERROR 06-13 02:36:52 async_llm_engine.py:532] Engine iteration timed out. This should never happen!\n")
    assert out["crash"]["kind"] == "watchdog_timeout" and out["crash"]["phase"] == "serving"


def test_the_first_real_cause_above_an_engine_death_wins(tmp_path: Path) -> None:
    out = run(tmp_path, V0_SERVING
              + "ERROR 11-05 12:03:02 engine.py:135] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                "GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.\n"
              + "ERROR 11-05 12:03:02 client.py:250] RuntimeError('Engine loop has died')\n")
    assert out["crash"]["kind"] == "cuda_oom"


def test_a_gloo_peer_that_closed_names_the_node(tmp_path: Path) -> None:
    for text in (
        "(EngineCore_1 pid=112924) ERROR 07-13 10:41:52 [core.py:588] RuntimeError: Worker failed with error "
        "'[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [192.168.2.2]:39075', "
        "please check the stack trace above for the root cause\n",
        "[2026-02-11 10:00:05 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 977, in event_loop_normal\n'
        "    self.run_batch(batch)\n"
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.7]:4321\n",
    ):
        out = run(tmp_path, text)
        assert out["crash"]["kind"] == "nccl_error"
        assert "a peer died: the node at " in out["crash"]["message"]


def test_the_method_a_v0_worker_ran_names_the_phase(tmp_path: Path) -> None:
    out = run(tmp_path, "(VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 multiproc_worker_utils.py:233] Exception in worker "
                        "VllmWorkerProcess while processing method determine_num_available_blocks: CUDA out of memory. "
                        "Tried to allocate 19.63 GiB. GPU 3 has a total capacity of 79.15 GiB of which 17.73 GiB is free.\n")
    assert out["crash"]["kind"] == "cuda_oom" and out["crash"]["phase"] == "startup"


def test_vllms_logger_under_python_loggings_format(tmp_path: Path) -> None:
    out = run(tmp_path, "2025-11-02 13:17:00,100 - vllm.entrypoints.openai.api_server - INFO - vLLM API server version 0.11.0\n"
                        "2025-11-02 13:17:04,315 - vllm.v1.engine.core_client - ERROR - Engine core proc EngineCore_DP0 died "
                        "unexpectedly, shutting down client.\n")
    assert out["crash"] is not None and out["crash"]["kind"] == "unknown"


def test_prose_naming_a_module_is_not_a_log_line() -> None:
    from cockpit.backends import pylogging

    assert pylogging.peel("vllm", "see vllm.engine.llm_engine: it is the V0 engine") is None
    assert pylogging.peel("sglang", "2025-11-02 13:17:04 [ERROR] sglang.srt.managers.scheduler: Rank 3 scheduler is dead.") \
        == "[2025-11-02 13:17:04] Rank 3 scheduler is dead."


def test_sglang_bare_and_broken_lines(tmp_path: Path) -> None:
    # a head that lost `[2` in a paste still names the rank
    out = run(tmp_path, "026-05-28 00:11:09.816 DP0 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 434, in __init__\n'
                        "    self.init_model_worker()\n")
    assert out["crash"]["rank"] == "DP0 TP0 EP0" and out["crash"]["phase"] == "startup"
    # 0.3's `Exception in run_tp_server:` header names its rank; the capture before it was running
    out = run(tmp_path, "[23:17:01 TP4] Capture cuda graph begin. This can take up to several minutes.\n"
                        "[23:17:08 TP4] Exception in run_tp_server:\nTraceback (most recent call last):\n"
                        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 147, in __init__\n'
                        "    self.capture()\n")
    assert out["crash"]["rank"] == "TP4" and out["crash"]["phase"] == "graph_capture"
    # the capture's progress bar is the capture running
    out = run(tmp_path, "[2026-07-15 13:14:54] Memory pool end. avail mem=74.01 GB\n"
                        "Capturing batches (bs=496 avail_mem=20.14 GB):   2%|▊      | 1/52 [00:03<03:17,  3.88s/it]\n")
    assert out["phase"] == "capturing"
    # faulthandler's dump of an SGLang process is SGLang's, and a crash
    out = run(tmp_path, "Fatal Python error: Aborted\n\nThread 0x00007ee43dfff640 (most recent call first):\n"
                        '  File "/x/sglang/srt/managers/scheduler.py", line 1419 in watchdog_thread\n'
                        '  File "/usr/lib/python3.10/threading.py", line 953 in run\n')
    assert out["crash"] is not None


def test_a_pm2_prefix_learnt_from_frame_lines(tmp_path: Path) -> None:
    out = run(tmp_path, "[2025-04-11 15:03:19 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
                        '3|qwen  |   File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", '
                        "line 112, in forward_thread_func\n"
                        "3|qwen  |     self.forward_thread_func_()\n")
    assert out["crash"]["rank"] == "TP0" and out["crash"]["phase"] == "serving"


def test_a_batch_loop_frame_while_starting_is_the_warmup(tmp_path: Path) -> None:
    out = run(tmp_path, "[2025-06-01 12:00:00 TP0] Load weight begin. avail mem=70.00 GB\n" + sched_trace("RuntimeError: boom"))
    assert out["crash"]["phase"] == "startup"


def test_torch_words_alone_are_no_engines_log(tmp_path: Path) -> None:
    import pytest

    from cockpit.errors import BadInput

    # a training script's PyTorch OOM: CUDA and torch words, no line or frame of either engine
    p = tmp_path / "train.log"
    p.write_text('Traceback (most recent call last):\n  File "/app/train.py", line 42, in <module>\n    out = model(x)\n'
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                 "of 79.10 GiB of which 1.00 GiB is free.\n")
    with pytest.raises(BadInput, match="no SGLang or vLLM log lines recognised"):
        diagnose_logs([str(p)])
    # SGLang's own words for the same kind of failure are SGLang's
    out = run(tmp_path, "RuntimeError: Prefill out of memory. Try to lower your batch size.\nTry to allocate 8192 tokens.\n")
    assert out["crash"]["kind"] == "kv_pool_exhausted"


def test_an_oom_after_a_capture_began_is_the_captures(tmp_path: Path) -> None:
    # the frames are the scheduler's constructor only (it runs the capture); the capture began, never ended
    out = run(tmp_path, "[2025-06-01 12:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
                        "[2025-06-01 12:00:05 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB\n"
                        + sched_trace("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                                      "total capacity of 79.10 GiB of which 1.00 GiB is free.", "run_scheduler_process",
                                      "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)"))
    assert out["crash"]["kind"] == "graph_capture_oom" and out["crash"]["phase"] == "graph_capture"


def test_a_remote_worker_that_crashed_is_a_peer_that_died(tmp_path: Path) -> None:
    out = run(tmp_path, sched_trace("RuntimeError: Connection closed by peer [10.0.0.9]:29500. This is typically "
                                    "caused by a remote worker crashing."))
    assert out["crash"]["kind"] == "nccl_error" and "the node at 10.0.0.9" in out["crash"]["message"]
