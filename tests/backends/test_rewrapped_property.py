"""A decisive message re-wrapped over several lines reads as the unwrapped one (issue 35, item 5).

Terminals and pastes hard-wrap long lines at their width (no hyphen, the cut anywhere, mid-word or
mid-number): `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a
total capacity of 79.10 GiB of which 1.2` / `5 GiB is free. …`. Every decisive message of the
catalogue (tests/data/catalogue/messages.json, the ones diagnose classifies: test_wrapper_property's
DECISIVE) is rendered as its newest release prints it (bench/catalogue_coverage.py's short log),
then every line but the traceback's frames is hard-wrapped at a width of 60 to 200 columns — bare,
or inside one of test_wrapper_property's outer formats: put on every piece (a collector that saw
the pieces) or only on the first (a terminal that wrapped the collector's line). The crash's kind,
phase and rank must be the unwrapped log's.

Frame lines (`  File "…", line N, in f`) are kept whole: a frame cut inside its function name is
not rejoined (docs/DECISIONS.md, "Re-wrapped lines and the engines' other log formats").
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.test_wrapper_property import DECISIVE, _bare, _read, _wrappers

# Known gap: a collector's prefix on every piece that vLLM's parser does not learn (it learns a fixed
# list of wrappers; SGLang's learns any) is taken off a piece only when the join then decides (a
# record's message); an exception's text cut into such pieces keeps only its first piece.
_PIECES_NOT_READ = {("vllm", "kubectl --prefix"), ("vllm", "markdown quote"), ("vllm", "pasted line numbers"),
                    ("vllm", "ray actor"), ("vllm", "ray actor, coloured")}


def hard_wrap(line: str, width: int) -> list[str]:
    """A terminal's wrap: pieces of exactly `width` characters, the last one shorter."""
    return [line[i : i + width] for i in range(0, len(line), width)] or [""]


def _is_frame(line: str) -> bool:
    return '  File "' in line and '", line ' in line


def rewrap(lines: list[str], width: int) -> list[str]:
    out: list[str] = []
    for s in lines:
        out.extend([s] if _is_frame(s) else hard_wrap(s, width))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DECISIVE), st.integers(60, 200))
def test_a_rewrapped_message_reads_as_the_unwrapped_one(entry: dict[str, Any], width: int) -> None:
    bare = _bare(entry)
    wrapped = rewrap(bare.splitlines(), width)
    want, got = _read(bare), _read("\n".join(wrapped) + "\n")
    assert want[0] not in (None, "refused"), (entry["text"], want)
    assert got == want, (width, entry["engine"], entry["text"][:90], "\n".join(wrapped))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DECISIVE), st.integers(60, 200), st.booleans(), st.data())
def test_a_rewrapped_message_inside_a_wrapper(entry: dict[str, Any], width: int, pieces_wrapped: bool,
                                              data: st.DataObject) -> None:
    bare = _bare(entry)
    name, wrap = data.draw(st.sampled_from(_wrappers(data.draw, entry["engine"])))
    lines = bare.splitlines()
    # a collector that prefixes lines (docker, kubectl, journald, srun, …) may have got them cut by
    # the program; a Python logger that re-logs a program's lines gets whole ones (each piece its
    # own record would be a record, not a piece)
    pieces_wrapped = pieces_wrapped and not name.startswith("python logging") \
        and (entry["engine"], name) not in _PIECES_NOT_READ
    if pieces_wrapped:  # the program's lines were cut before a collector prefixed each piece
        cut = rewrap(lines, width)
        wrapped = [wrap(s, i) for i, s in enumerate(cut)]
    else:  # the collector's lines cut by a terminal: the prefix only on the first piece
        wrapped = rewrap([wrap(s, i) for i, s in enumerate(lines)], width + len(wrap("", 0)))
    want, got = _read(bare), _read("\n".join(wrapped) + "\n")
    assert got == want, (name, pieces_wrapped, width, entry["engine"], entry["text"][:90], "\n".join(wrapped))


def test_the_oom_of_the_brief_split_mid_number() -> None:
    """The issue's own example: a device OOM cut inside `1.25 GiB` under SGLang's header."""
    log = ("[2025-06-01 12:00:00 TP0] Load weight begin. avail mem=70.00 GB\n"
           "[2025-06-01 12:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2577, in run_scheduler_process\n'
           "    scheduler.event_loop_overlap()\n"
           '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1712, in forward\n'
           "    return self.forward_decode(forward_batch)\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
           "of which 1.25 GiB is free. Process 1234 has 77.80 GiB memory in use.\n")
    lines = log.splitlines()
    for width in (80, 100, 120, 160):
        assert _read("\n".join(rewrap(lines, width)) + "\n") == _read(log), width
