"""The phase a traceback frame proves, from the engines' own function and file names (issue 35).

The map (`data/frame_phases.json`) is built by tools/frame_phases.py from the engines' release
wheels: package file -> function -> phase, names only. A frame's file is matched by its path inside
the package (`…/site-packages/sglang/srt/managers/scheduler.py`, a source checkout's
`/workspace/vllm/engine/async_llm_engine.py`, a fork's `…/sglang/python/sglang/srt/…` all end in
one); a frame whose file is not shown (a call read from a source line) is matched by its function
name alone, when every file that defines it agrees.

The map's phases fold into the crash phases the diagnosis reports: the loader, the KV / memory
profile and the warm-up are start-up; the capture is graph capture; the batch loop is serving (the
least telling: any frame with a sharper phase wins, see cockpit/core/crashstory.py); a shutdown
frame proves nothing about where the server died.
"""

from __future__ import annotations

import functools
import json
import os

# os.path, not pathlib: `cockpit diagnose` never imports pathlib (tests/test_startup_imports.py)
_MAP = os.path.join(os.path.dirname(__file__), "data", "frame_phases.json")
_FOLD = {"startup": "startup", "load": "startup", "kv_profile": "startup", "warmup": "startup",
         "capture": "graph_capture", "batch_loop": "serving", "prefill": "prefill", "decode": "decode"}
# names too common to mean one thing without their file
_AMBIGUOUS = frozenset(("__init__", "__call__", "forward", "step", "execute_model", "run", "main", "wrapper",
                        "initialize", "load_weights", "shutdown", "close"))


@functools.cache
def _tables(engine: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """({package file: {function: phase}}, {function: phase} for names every file agrees on)."""
    try:
        with open(_MAP, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {}, {}
    by_file: dict[str, dict[str, str]] = doc.get("phases", {}).get(engine, {})
    seen: dict[str, set[str]] = {}
    for funcs in by_file.values():
        for fn, ph in funcs.items():
            seen.setdefault(fn, set()).add(ph)
    by_name = {fn: next(iter(phs)) for fn, phs in seen.items() if len(phs) == 1 and fn not in _AMBIGUOUS}
    return by_file, by_name


def map_phase(engine: str, file: str | None, func: str) -> str | None:
    """The map's own phase word (startup, load, kv_profile, capture, warmup, batch_loop, prefill,
    decode, shutdown) for a frame of `engine`, or None when the map has no word for it."""
    by_file, by_name = _tables(engine)
    if file:
        parts = file.replace("\\", "/").split("/")
        for i in range(len(parts) - 1, -1, -1):
            if parts[i] == engine:
                funcs = by_file.get("/".join(parts[i:]))
                if funcs is not None:
                    return funcs.get(func)
    return by_name.get(func)


def frame_phase(engine: str, file: str | None, func: str) -> str | None:
    """The crash phase a frame proves (startup, graph_capture, prefill, decode, serving) or None."""
    ph = map_phase(engine, file, func)
    return _FOLD.get(ph) if ph is not None else None


def is_engine_frame(engine: str, file: str | None) -> bool:
    """Whether a frame's file is one of the engine's own (the map's files, or any under its package)."""
    if not file:
        return False
    f = file.replace("\\", "/")
    return f"/{engine}/" in f or f.startswith(engine + "/")
