"""SGLang's process titles: what each process of a run is, for `cockpit stacks`.

SGLang names its children `sglang::scheduler` / `sglang::scheduler_TP<n>` (`_DP<d>_TP<n>`,
`_PP<p>_TP<n>`, with `_EP<e>` on MoE runs) and `sglang::detokenizer`; the main process is the
HTTP server with the tokenizer manager and keeps its command line.
"""

from __future__ import annotations

import re

_SCHED = re.compile(r"^sglang::scheduler(?:_(?P<parts>(?:[A-Z]+\d+_?)+))?$")


def role(name: str, is_server: bool) -> tuple[str, str | None]:
    """(role, rank) of a process named `name`; rank as the log prints it ("TP3", "DP1 TP3")."""
    if is_server:
        return "api_server", None
    m = _SCHED.match(name)
    if m:
        parts = m.group("parts")
        return "scheduler", " ".join(p for p in parts.split("_") if p and not p.startswith("EP")) if parts else "TP0"
    if name.startswith("sglang::schedul"):  # the kernel's comm keeps 15 characters of the title
        return "scheduler", None
    if name.startswith("sglang::detok"):
        return "detokenizer", None
    if "resource_tracker" in name or "multiprocessing" in name:
        return "helper", None
    return "other", None
