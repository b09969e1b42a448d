"""vLLM's older wordings read as the current ones (issue 23): V0's start-up figures per rank, the
executor's `exit code: None` worker death, and a device OOM in ROCm's, Ascend's or Intel's words.

The lines are vLLM's own format strings (vllm/worker/model_runner.py `Loading model weights took
%.4f GB`, the executors' `# %s blocks: %d, # CPU blocks: %d`, worker.py's memory account, the V1
multiproc executor's `Worker proc %s died unexpectedly`), rendered with typical values and the
process groups V0 and V1 print; the real excerpts that carry them (vllm-project-vllm-10517, -12569,
kubernetes-sigs-gateway-api-inference-extension-550) are in tests/data/real/vllm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit.commands.diagnose import diagnose_logs, to_json

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "vllm"


def run(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "server.log"
    path.write_text(text)
    state, findings, reads = diagnose_logs([str(path)])
    return to_json(state, findings, reads)


V0_TP2 = """\
INFO 07-30 18:04:10 llm_engine.py:176] Initializing an LLM engine (v0.5.3.post1) with config: model='m', tensor_parallel_size=2
(VllmWorkerProcess pid=690775) INFO 07-30 18:04:20 multiproc_worker_utils.py:215] Worker ready; awaiting tasks
INFO 07-30 18:05:20 model_runner.py:720] Loading model weights took 6.9888 GB
(VllmWorkerProcess pid=690775) INFO 07-30 18:05:20 model_runner.py:720] Loading model weights took 6.9890 GB
INFO 07-30 18:05:25 distributed_gpu_executor.py:56] # GPU blocks: 27898, # CPU blocks: 4096
INFO 07-30 18:05:29 model_runner.py:1008] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.
(VllmWorkerProcess pid=690775) INFO 07-30 18:05:29 model_runner.py:1008] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.
INFO 07-30 18:05:40 model_runner.py:1205] Graph capturing finished in 11 secs.
"""


def test_v0_weights_and_kv_blocks_per_rank(tmp_path: Path) -> None:
    out = run(tmp_path, V0_TP2)
    assert out["format"] == "vllm-0.5.3.post1"
    ranks = {r["rank"]: r for r in out["ranks"]}
    # the driver worker (no process group: rank 0) and the worker process, named as printed
    assert ranks["TP0"]["weights_gb"] == 6.9888
    assert ranks["VllmWorkerProcess pid=690775"]["weights_gb"] == 6.989
    assert ranks["TP0"]["figures"] == {"kv_blocks": 27898.0, "cpu_blocks": 4096.0}
    assert ranks["TP0"]["timeline"]["capture_end"] == ranks["TP0"]["timeline"]["capture_end"]
    assert "capture_begin" in ranks["VllmWorkerProcess pid=690775"]["timeline"]
    assert out["crash"] is None


def test_a_v0_worker_that_told_its_rank_is_that_rank(tmp_path: Path) -> None:
    text = V0_TP2.replace(
        "(VllmWorkerProcess pid=690775) INFO 07-30 18:04:20 multiproc_worker_utils.py:215] Worker ready; awaiting tasks",
        "(VllmWorkerProcess pid=690775) DEBUG 07-30 18:04:20 parallel_state.py:845] world_size=2 rank=1 local_rank=1 "
        "distributed_init_method=tcp://127.0.0.1:5000 backend=nccl")
    ranks = {r["rank"]: r for r in run(tmp_path, text)["ranks"]}
    assert ranks["TP1"]["weights_gb"] == 6.989 and "VllmWorkerProcess pid=690775" not in ranks


def test_the_real_v0_excerpts_give_their_figures() -> None:
    got = {}
    for name in ("vllm-project-vllm-12569", "kubernetes-sigs-gateway-api-inference-extension-550"):
        state, findings, reads = diagnose_logs([str(REAL / f"{name}.log")])
        got[name] = {r["rank"]: r for r in to_json(state, findings, reads)["ranks"]}
    assert got["vllm-project-vllm-12569"]["TP0"]["weights_gb"] == 67.7229  # `Loading model weights took 67.7229 GB`
    assert got["vllm-project-vllm-12569"]["TP0"]["figures"] == {"kv_blocks": 1381.0}  # `# GPU blocks: 1381`
    k9s = got["kubernetes-sigs-gateway-api-inference-extension-550"]["TP0"]
    assert (k9s["weights_gb"], k9s["kv_gb"]) == (12.55, 56.18)  # `model weights take 12.55GiB; … KV Cache is 56.18GiB.`
    assert k9s["figures"] == {"kv_blocks": 7191.0, "cpu_blocks": 512.0}  # `# cuda blocks: 7191, # CPU blocks: 512`


@pytest.mark.parametrize("prefix", ["", "(EngineCore_0 pid=4021) "])
def test_worker_death_with_exit_code_none_names_the_worker(tmp_path: Path, prefix: str) -> None:
    out = run(tmp_path, f"{prefix}INFO 07-30 18:04:10 [core.py:61] Initializing a V1 LLM engine (v0.9.1) with config: model='m'\n"
                        f"{prefix}ERROR 07-30 18:05:20 [multiproc_executor.py:140] Worker proc VllmWorker-2 died "
                        "unexpectedly (exit code: None), shutting down executor.\n")
    crash = out["crash"]
    assert crash is not None and crash["rank"] == "TP2" and crash["exit_code"] is None


@pytest.mark.parametrize("device", ["CUDA", "HIP", "NPU", "XPU"])
def test_device_oom_in_each_devices_words_is_one_kind(tmp_path: Path, device: str) -> None:
    out = run(tmp_path, (
        "(VllmWorker TP1 pid=1431) INFO 09-03 00:39:32 [default_loader.py:262] Loading weights took 10.5 seconds\n"
        f"(VllmWorker TP1 pid=1431) ERROR 09-03 00:40:01 [multiproc_executor.py:596] torch.OutOfMemoryError: {device} out "
        "of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.02 GiB is free.\n"))
    crash = out["crash"]
    assert crash["kind"] == "cuda_oom" and crash["rank"] == "TP1"
    assert f"{device} out of memory" in crash["message"]  # the device as the log names it


def test_v0_worker_death_names_the_worker_process(tmp_path: Path) -> None:
    """V0's executor: `Worker %s pid %s died, exit code: %s` (vllm/executor/multiproc_worker_utils.py)."""
    out = run(tmp_path, V0_TP2 + "ERROR 07-30 18:07:01 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid "
                                 "690775 died, exit code: -9\n")
    crash = out["crash"]
    assert crash is not None and crash["rank"] == "VllmWorkerProcess pid=690775" and crash["exit_code"] == -9


NCCL_RAISED_HEAD = """\
INFO 06-01 12:00:00 [llm_engine.py:1] Initializing an LLM engine (v0.33.0) with config: model='m'
(Worker_TP3 pid=4242) INFO 06-01 12:00:00 [gpu_model_runner.py:1] Starting to load model m...
(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900] WorkerProc failed to start.
(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900] Traceback (most recent call last):
(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900]   File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl.py", line 239, in __init__
(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900]     raise RuntimeError(
"""


@pytest.mark.parametrize("exc", [
    # vLLM's own raises that say NCCL failed (pynccl.py, eplb_communicator.py, weight_transfer/m2n_common.py)
    "RuntimeError: failed to load the NCCL library for unique-id rendezvous",
    "RuntimeError: Failed to initialize PyNcclEplbCommunicator (NCCL version too old).",
    "RuntimeError: NCCL4Py unique-id generation failed: timeout",
    "RuntimeError: invalid NCCL4Py unique-id error",
])
def test_a_raised_nccl_failure_is_an_nccl_error_of_its_rank(tmp_path: Path, exc: str) -> None:
    text = NCCL_RAISED_HEAD + f"(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900] {exc}\n"
    crash = run(tmp_path, text)["crash"]
    assert crash is not None and (crash["kind"], crash["rank"], crash["phase"]) == ("nccl_error", "TP3", "startup")


def test_nccl_named_in_a_log_line_or_a_non_nccl_raise_is_no_nccl_error(tmp_path: Path) -> None:
    # the library's load failure is logged, and the engine may go on without it (not NVIDIA/AMD)
    logged = ("(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [pynccl_wrapper.py:387] Failed to load NCCL library from "
              "libnccl.so.2. It is expected if you are not running on NVIDIA/AMD GPUs.\n")
    head = NCCL_RAISED_HEAD.split("(Worker_TP3 pid=4242) ERROR")[0]
    assert run(tmp_path, head + logged)["crash"] is None
    raised = NCCL_RAISED_HEAD + "(Worker_TP3 pid=4242) ERROR 06-01 12:00:01 [multiproc_executor.py:900] ValueError: max_model_len failed\n"
    crash = run(tmp_path, raised)["crash"]
    assert crash is not None and crash["kind"] != "nccl_error"
