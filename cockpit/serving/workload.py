"""What `cockpit bench` sends: the spec of a bench, its prompts (a dataset's, or synthetic ones drawn
from the model's own token ids or, when no tokenizer can be read, words) and the model's vocabulary
read on the server's host by `vocab_probe.py`.

Why a module of its own: the load generator (loadgen.py) schedules the levels, answers.py reads
each request's answer, servermetrics.py the server's /metrics; what is sent is the one thing all of
them share, so it sits below them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from cockpit.errors import BadInput
from cockpit.remote import programs
from cockpit.transport.base import Transport, TransportError

if TYPE_CHECKING:
    from cockpit.backends.base import GenerateApi

DEFAULT_MAX_ERROR_SHARE = 0.5
# words for text prompts when the model's tokenizer cannot be read (most are one token each)
_WORD_TEXT = ("the of and to in is was for on that with as by at from his her an which were are this be or had not "
              "but have it they one all their has been its who more new other after first time two also into "
              "over only may when there some would these years city state used three")
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int] | None  # synthetic prompts are token ids: their length is exact
    text: str | None
    output_len: int


@dataclass(frozen=True)
class Vocab:
    """Token ids a synthetic prompt may hold: half-open ranges of the model's own ids."""

    ranges: tuple[tuple[int, int], ...]
    source: str  # where they were read ("tokenizer.json of DIR", "config.json of DIR …")

    @property
    def size(self) -> int:
        return sum(hi - lo for lo, hi in self.ranges)

    def sample(self, rng: random.Random, k: int) -> list[int]:
        out = []
        sizes = [hi - lo for lo, hi in self.ranges]
        for r in rng.choices(range(len(self.ranges)), weights=sizes, k=k):
            lo, hi = self.ranges[r]
            out.append(rng.randrange(lo, hi))
        return out


def vocab_from_probe(answer: Any) -> Vocab | str:
    """vocab_probe.py's answer → Vocab, or the reason there is none (a sentence)."""
    if not isinstance(answer, dict):
        return "unreadable answer from the tokenizer probe"
    if answer.get("error"):
        return str(answer["error"])[:300]
    where = str(answer.get("dir", "?"))[:300]
    if answer.get("source") == "tokenizer.json":
        raw = answer.get("ranges")
        ranges = tuple((int(r[0]), int(r[1])) for r in raw if _is_range(r)) if isinstance(raw, list) else ()
        if ranges:
            return Vocab(ranges, f"tokenizer.json in {where}")
        return f"{where}/tokenizer.json lists no usable token ids"
    n = answer.get("vocab_size")
    if answer.get("source") == "config.json" and isinstance(n, int) and 16 <= n < 10**7:
        # no tokenizer: the ids of special tokens are unknown; they sit at either end in practice
        lo, hi = n // 8, n * 3 // 4
        return Vocab(((lo, hi),), f"config.json in {where} (vocab_size {n}; no tokenizer.json: ids {lo}–{hi - 1})")
    return "the tokenizer probe's answer names no vocabulary"


def _is_range(r: Any) -> bool:
    return (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            and 0 <= r[0] < r[1] <= 10**7)


VOCAB_TIMEOUT_S = 30.0


async def read_vocab(transport: Transport, model: str, python: str | None,
                     env: Mapping[str, str] | None = None) -> tuple[Vocab | None, str]:
    """The model's token ids as its host sees them: vocab_probe.py runs on the host's Python (given
    on stdin; argv holds the path and the HF cache dirs, never a token). (Vocab, "") or (None, why)."""
    import sys

    hf = {k: v for k, v in (env or {}).items() if k in ("HF_HOME", "HF_HUB_CACHE")}
    req = json.dumps({"path": model, "hf": hf}, separators=(",", ":"))
    try:
        done = await transport.run([python or sys.executable, "-", req], stdin=programs.assemble(programs.VOCAB_PROBE_PROGRAM),
                                   timeout=VOCAB_TIMEOUT_S)
    except TransportError as exc:
        return None, f"{transport.label}: {exc}"
    lines = done.stdout[-(1 << 20):].decode("utf-8", "replace").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except (ValueError, RecursionError):
        answer = None
    if answer is None:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"{transport.label}: the tokenizer probe failed ({err[-1][:200] if err else f'exit {done.returncode}'})"
    got = vocab_from_probe(answer)
    return (got, "") if isinstance(got, Vocab) else (None, got)


@dataclass
class BenchSpec:
    requests: int = 200
    concurrency: int = 8
    input_len: int = 1024
    output_len: int = 256
    duration_s: float = 120.0
    api: str = "openai"
    dataset: list[Prompt] | None = None  # None: synthetic
    seed: int = 0
    model: str | None = None  # the OpenAI `model` field; None asks /v1/models
    # the engine's metrics (`Backend.metrics`: its endpoint, prefix and table of names), set by the
    # caller; metrics_path None: the engine has none (`metrics_absent` says so in the result)
    metrics_path: str | None = None
    metrics_prefix: str = ""
    metric_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    metrics_absent: str | None = None
    metrics_switch: str | None = None  # the flag that turns /metrics on (`EngineWords.metrics_switch`), set by the caller
    # the engine's own generate API when `api` names it (`Backend.metrics.native_api`); None: OpenAI's
    native: GenerateApi | None = field(default=None, repr=False)
    vocab: Vocab | None = None  # None: synthetic prompts are text
    max_error_share: float = DEFAULT_MAX_ERROR_SHARE  # stop a level once this share of it failed
    explicit: frozenset[str] = frozenset()  # the lengths the operator chose ("input_len", "output_len")
    api_key: str | None = field(default=None, repr=False)  # the server's --api-key: a header, never output

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def prompts(self) -> Sequence[Prompt]:
        if self.dataset:
            return [self.dataset[i % len(self.dataset)] for i in range(self.requests)]
        return SyntheticPrompts(self)


class SyntheticPrompts(Sequence[Prompt]):
    """A spec's synthetic prompts, each drawn when first asked for, in order from one generator seeded
    with `spec.seed` (the same prompts as drawing them all up front). Drawn up front, `--requests 1000
    --input-len 16000` cost 16M token ids (~8 s of CPU) before the check request, and again before
    every level, although a time-limited level sends a few of them."""

    def __init__(self, spec: BenchSpec):
        self._spec = spec
        self._rng = random.Random(spec.seed)
        self._drawn: list[Prompt] = []

    def __len__(self) -> int:
        return self._spec.requests

    def _draw(self) -> Prompt:
        s = self._spec
        if s.vocab is None:
            return Prompt(None, " ".join(self._rng.choices(WORDS, k=s.input_len)), s.output_len)
        return Prompt(s.vocab.sample(self._rng, s.input_len), None, s.output_len)

    @overload
    def __getitem__(self, i: int) -> Prompt: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Prompt]: ...

    def __getitem__(self, i: int | slice) -> Prompt | Sequence[Prompt]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        while len(self._drawn) <= i:
            self._drawn.append(self._draw())
        return self._drawn[i]


def load_dataset(path: str, default_output_len: int) -> list[Prompt]:
    """JSONL, one request a line: {"prompt": "…"} or {"input_ids": […]}, optionally "output_len"
    (or "max_tokens")."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--dataset {path}: cannot read it ({exc})") from None
    out: list[Prompt] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BadInput(f"--dataset {path}:{i}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise BadInput(f"--dataset {path}:{i}: not a JSON object")
        out_len = obj.get("output_len", obj.get("max_tokens", default_output_len))
        if not isinstance(out_len, int) or out_len < 1:
            raise BadInput(f"--dataset {path}:{i}: output_len must be a positive integer")
        ids = obj.get("input_ids")
        if isinstance(ids, list) and ids and all(isinstance(x, int) and x >= 0 for x in ids):
            out.append(Prompt(list(ids), None, out_len))
        elif isinstance(obj.get("prompt"), str) and obj["prompt"]:
            out.append(Prompt(None, obj["prompt"], out_len))
        else:
            raise BadInput(f"--dataset {path}:{i}: needs a non-empty \"prompt\" string or \"input_ids\" list")
    if not out:
        raise BadInput(f"--dataset {path}: no requests in it")
    return out
