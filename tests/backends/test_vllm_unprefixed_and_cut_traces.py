"""Two vLLM readings found by issue 23's second real batch (docs/ACCURACY.md), each general:

- before 0.10 no V1 process printed a process group, so a single-GPU run's weights line
  (`Model loading took %.4f GiB and %.6f seconds`, 0.7's `… GB and …`, the newest `… GiB memory and …`)
  has no prefix at all: that process is rank 0 (TP0), as V0's unprefixed driver already was;
- a traceback cut before a frame's own `File` line still names that frame in the source line above
  it (`self.model_runner.capture_model(self.gpu_cache)`): the call is where it raised.

Lines are vLLM's format strings rendered with typical values; the real excerpts that carry them are
tests/data/real/vllm/vllm-project-vllm-17979, -14574, aivrar-vllm-windows-build-17 and
vllm-project-vllm-7593.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit.commands.diagnose import diagnose_logs, to_json


def run(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "server.log"
    path.write_text(text)
    state, findings, reads = diagnose_logs([str(path)])
    return to_json(state, findings, reads)


@pytest.mark.parametrize(("line", "gib"), [
    ("INFO 05-07 02:13:52 [gpu_model_runner.py:1347] Model loading took 0.2533 GiB and 0.907387 seconds", 0.2533),
    ("INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and 0.977005 seconds", 0.2389),
    ("INFO 09-21 12:50:12 [model_runner.py:404] Model loading took 17.7 GiB memory and 12.003756 seconds", 17.7),
    ("[2025-03-10T15:07:20Z] INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and 0.977005 seconds",
     0.2389),
])
def test_an_unprefixed_weights_line_is_rank_0(tmp_path: Path, line: str, gib: float) -> None:
    text = ("INFO 05-07 02:13:40 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m'\n"
            f"{line}\n")
    out = run(tmp_path, text)
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert ranks["TP0"]["weights_gb"] == pytest.approx(gib)


def test_the_api_servers_lines_stay_rankless(tmp_path: Path) -> None:
    # a process that names itself the API server is no rank, whatever it prints
    text = ("(APIServer pid=11) INFO 09-21 12:29:00 [api_server.py:1896] vLLM API server version 0.10.2\n"
            "(APIServer pid=11) INFO 09-21 12:30:37 [gpu_model_runner.py:2581] Model loading took 2.2845 GiB and 74.270197 seconds\n")
    out = run(tmp_path, text)
    assert all(r.get("weights_gb") is None for r in out["ranks"])


V0_CUT_IN_CAPTURE = """\
(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]   File "/x/vllm/worker/worker.py", line 222, in initialize_cache
(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]     self._warm_up_model()
(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]   File "/x/vllm/worker/worker.py", line 238, in _warm_up_model
(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]     self.model_runner.capture_model(self.gpu_cache)
"""


def test_a_trace_cut_after_the_call_into_capture_is_graph_capture(tmp_path: Path) -> None:
    crash = run(tmp_path, V0_CUT_IN_CAPTURE)["crash"]
    assert crash["kind"] == "unknown"
    assert crash["phase"] == "graph_capture", crash["phase_reason"]
    assert "capture_model" in crash["phase_reason"]


def test_a_call_that_proves_nothing_more_leaves_the_phase_at_startup(tmp_path: Path) -> None:
    # `_warm_up_model` alone is capture or the seed reset: not the capture; but V0's
    # `initialize_cache` (the KV set-up) and the warm-up run only at start-up (the engines' own
    # names, cockpit/backends/data/frame_phases.json; issue 35)
    text = "".join(V0_CUT_IN_CAPTURE.splitlines(keepends=True)[:3])
    assert run(tmp_path, text)["crash"]["phase"] == "startup"


def test_a_call_not_under_a_frame_is_no_frame(tmp_path: Path) -> None:
    # the same words in a record that follows no `File` line (a user's script echoing code) prove nothing
    text = ("(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]   File \"/x/vllm/worker/worker.py\", "
            "line 222, in initialize_cache\n"
            "(VllmWorkerProcess pid=13107) ERROR 08-19 07:51:27 multiproc_worker_utils.py:226]     self._warm_up_model()\n"
            "(VllmWorkerProcess pid=13107) INFO 08-19 07:51:28 multiproc_worker_utils.py:226] note\n"
            "self.model_runner.capture_model(self.gpu_cache)\n")
    # the frame above says start-up (initialize_cache); the unframed call does not make it a capture
    assert run(tmp_path, text)["crash"]["phase"] == "startup"
