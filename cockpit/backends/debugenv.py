"""What a debug relaunch adds to a run, common to both engines: the collective library and
PyTorch's distributed layer made to talk (each engine's `debugging.py` adds its own).

- `NCCL_DEBUG=INFO`: NCCL logs its init, rings/trees and transport per rank (ranks that never
  reach the same collective show up as the ones whose lines stop).
- `TORCH_NCCL_TRACE_BUFFER_SIZE=2000` with `TORCH_NCCL_DUMP_ON_TIMEOUT=1`: PyTorch's NCCL flight
  recorder keeps the last 2,000 collectives per rank and dumps them when a collective times out
  (to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`, /tmp/nccl_trace_rank_<n> by default).
- `TORCH_DISTRIBUTED_DEBUG=DETAIL`: collective consistency checks (a rank calling a different
  collective, or another shape, fails loudly instead of hanging); it costs speed: a debug run only.
- `PYTHONFAULTHANDLER=1`: Python prints every thread's stack on a fatal signal.
"""

from __future__ import annotations

COMMON_DEBUG_ENV: dict[str, str] = {
    "NCCL_DEBUG": "INFO",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "PYTHONFAULTHANDLER": "1",
}
