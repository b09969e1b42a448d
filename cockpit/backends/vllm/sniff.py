"""Whether a log's opening could be vLLM's at all, from its bytes, without the log grammar.

`cockpit diagnose` asks every backend for a `log_score` before it reads anything. Scoring an
opening as vLLM's needs the grammar (`logparse`, ~40 regexes compiled at import); an SGLang log
seldom holds any of what that score counts, so this test runs first and the grammar is imported
only when it says "maybe". It must never say "no" to an opening that
`logparse.log_score` would score above 0: it looks for a superset of what that score counts, so
the score, and so which backend reads the log, is exactly what it would be without it.

What `logparse.log_score` counts in a line (after `clean_text`), and the test for it here:
- a process group `(NAME pid=N)`: `(`, then ` pid=` before any other parenthesis;
- the word vllm in any case: `vllm` in the ASCII-lowered bytes (no non-ASCII letter lowers to
  `v`, `l` or `m`, and undecodable bytes decode to U+FFFD, never to ASCII);
- one of vLLM's own messages (`MESSAGES`, shared with the grammar): the message's bytes;
- vLLM's record head `LEVEL MM-DD HH:MM:SS`: that head's bytes (its digits any Unicode digit,
  as the grammar's are).
A line `clean_text` would change (escape sequences, control characters) could hide a marker that
cleaning joins up (`vl<ESC>[0mlm`); an opening with any such byte is left to the full score.
"""

from __future__ import annotations

import re

# Words only vLLM prints (start-up, memory profiling, throughput), read by the grammar too.
MESSAGES = ("Loading model weights took", "Model loading took", "Memory profiling results", "# GPU blocks:",
            "Maximum concurrency for", "KV cache size:", "gpu_memory_utilization", "max_model_len",
            "Avg prompt throughput", "EngineCore", "Available KV cache memory")

_MARKERS = tuple(m.encode() for m in MESSAGES)
# `(NAME pid=N)`: an opening parenthesis, no other before ` pid=` (it may span lines here: a superset)
_GROUP = re.compile(rb"\([^()]* pid=")
# The grammar's `\d` is any Unicode digit: here an ASCII digit or any one multi-byte character.
_D = rb"(?:[0-9]|[\xc2-\xf4][\x80-\xbf]{1,3})"
# (`{2}`, not the digit written out twice: the same pattern, compiled in ~0.3 ms of start-up, not ~0.5)
_HEAD = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) " + _D + b"{2}-" + _D + b"{2} "
                   + _D + b"{2}:" + _D + b"{2}:" + _D + b"{2}")
# What `clean_text` removes from a line: C0 controls but tab (and LF, VT, FF, CR: `splitlines`
# cuts there, so no line holds one), DEL, and C1 controls (U+0080–U+009F, UTF-8 C2 80–C2 9F).
# (A `translate` that deletes them finds them ~5× faster than a regex character class on 64 KiB.)
_C0_DEL = bytes([*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20), 0x7f])
_C1 = re.compile(rb"\xc2[\x80-\x9f]")


def may_be_vllm(sample: bytes) -> bool:
    """False only when no line of `sample` can count toward vLLM's `log_score`."""
    if len(sample.translate(None, _C0_DEL)) != len(sample) or (b"\xc2" in sample and _C1.search(sample)):
        return True
    if b"vllm" in sample.lower() or any(m in sample for m in _MARKERS):
        return True
    return _GROUP.search(sample) is not None or _HEAD.search(sample) is not None
