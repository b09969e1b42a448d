"""vLLM's process titles (setproctitle): what each process of a run is, for `cockpit stacks`.

vLLM 0.32 names its processes `VLLM::EngineCore` (`VLLM::EngineCore_DP<n>` with data parallel) and
`VLLM::Worker` (one worker) or `VLLM::Worker_TP<n>` / `VLLM::Worker_PP<p>_TP<n>`; the API server
keeps its command line (`vllm serve …`).
"""

from __future__ import annotations

import re

_WORKER = re.compile(r"^VLLM::Worker(?:_(?P<parts>(?:[A-Z]+\d+_?)+))?$")


def role(name: str, is_server: bool) -> tuple[str, str | None]:
    """(role, rank) of a process named `name`; rank as the log prints it ("TP1", "PP1 TP0")."""
    if is_server:
        return "api_server", None
    if name.startswith("VLLM::EngineCore"):
        dp = name.removeprefix("VLLM::EngineCore").lstrip("_")
        return "engine_core", dp or None
    m = _WORKER.match(name)
    if m:
        parts = m.group("parts")
        return "worker", " ".join(p for p in parts.split("_") if p) if parts else "TP0"
    if "resource_tracker" in name or "multiprocessing" in name:
        return "helper", None
    return "other", None
