"""An error whose own words say a CUDA stream was capturing a graph is a graph-capture failure, even
when a chained traceback after it shows only the scheduler's start-up frames (issue 23's third real
batch: tests/data/real/sglang/sgl-project-sglang-6342). The messages are torch's and CUDA's
(`Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture`, `operation not permitted
when stream is capturing`), rendered the way SGLang's scheduler prints a chained trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit.commands.diagnose import diagnose_logs, to_json

CHAINED = """\
{error}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 2255, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)
  File "/x/sglang/srt/managers/scheduler.py", line 273, in __init__
    self.tp_worker = TpWorkerClass(
  File "/x/sglang/srt/model_executor/model_runner.py", line 192, in __init__
    self.initialize(min_per_gpu_memory)
"""


def run(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "server.log"
    path.write_text(text)
    state, findings, reads = diagnose_logs([str(path)])
    return to_json(state, findings, reads)


@pytest.mark.parametrize("error", [
    "torch._dynamo.exc.InternalTorchDynamoError: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during "
    "CUDA graph capture. If you need this call to be captured, please file an issue. Current cudaStreamCaptureStatus: "
    "cudaStreamCaptureStatusActive",
    "RuntimeError: CUDA error: operation not permitted when stream is capturing",
])
def test_a_capture_error_before_a_chained_startup_trace_is_graph_capture(tmp_path: Path, error: str) -> None:
    crash = run(tmp_path, CHAINED.format(error=error))["crash"]
    assert crash["phase"] == "graph_capture", crash["phase_reason"]
    assert crash["kind"] == "unknown"  # not memory: the capture failed for another reason
    assert crash["message"] == error  # the operator reads the error, not a made-up frame
    assert all(not d.startswith('File "None"') for d in crash["decisive_lines"])


def test_the_same_chained_trace_without_it_stays_startup(tmp_path: Path) -> None:
    crash = run(tmp_path, CHAINED.format(error="ValueError: bad weights"))["crash"]
    assert crash["phase"] == "startup"
