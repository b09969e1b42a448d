"""The bench that `cockpit bench` and `cockpit tune` share: the spec from the command line (lengths,
levels, dataset, generate API), the lengths fitted to the run's context, the progress line, and
the load test of a live run recorded on it (the load generator is `cockpit/serving/loadgen.py`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

from cockpit.face import (
    DEFAULT_MAX_ERROR_SHARE,
    BadInput,
    BenchSpec,
    CockpitError,
    api_key_of,
    engine_name,
    engine_words,
    get_backend,
    load_dataset,
    mask_mapping,
    read_vocab,
    run_bench,
    served_model,
)

DEFAULTS: dict[str, Any] = {"concurrency": [8], "input_len": 1024, "output_len": 256}


def spec_from_args(args: argparse.Namespace, backend: str) -> tuple[Any, list[int]]:
    lengths = {}
    for name in ("requests", "input_len", "output_len"):
        v = getattr(args, name, None)
        v = DEFAULTS[name] if v is None else v
        if v < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1 (got {v})")
        lengths[name] = v
    levels = list(args.concurrency or DEFAULTS["concurrency"])
    if any(c < 1 for c in levels):
        raise BadInput(f"--concurrency values must be at least 1 (got {' '.join(map(str, levels))})")
    if not args.duration > 0 or not math.isfinite(args.duration):
        raise BadInput(f"--duration must be a number of seconds above 0 (got {args.duration:g})")
    share = getattr(args, "max_error_share", None)
    share = DEFAULT_MAX_ERROR_SHARE if share is None else share
    if not 0 < share <= 1:
        raise BadInput(f"--max-error-share must be above 0 and at most 1 (got {share:g})",
                       hint="0.5 stops a level once half its requests failed; 1 only when all of them did")
    native = None
    if args.api != "openai":
        own = engine_words(backend).native_api
        if own == args.api:
            metrics = get_backend(backend).metrics
            native = metrics.native_api() if metrics is not None else None
        if native is None:
            raise BadInput(f"--api {args.api}: {engine_name(backend)} (this profile's backend) has no generate API "
                           "of that name", hint="use --api openai" + (f" or --api {own}" if own else ""))
    dataset = None if args.dataset == "synthetic" else load_dataset(args.dataset, lengths["output_len"])
    spec = BenchSpec(requests=lengths["requests"], concurrency=levels[0], input_len=lengths["input_len"],
                     output_len=lengths["output_len"], duration_s=args.duration, api=args.api, native=native,
                     dataset=dataset,
                     max_error_share=share,
                     # which lengths the operator chose: a default the run cannot hold is cut, a choice refused
                     explicit=frozenset(n for n in ("input_len", "output_len") if getattr(args, n, None) is not None))
    return spec, levels


def fit_lengths(input_len: int, output_len: int, max_len: int, explicit: set[str] | frozenset[str] = frozenset(),
                where: str = "") -> tuple[int, int, str | None]:
    """(input_len, output_len, what was cut) so that a prompt and its output fit the run's
    max-model-len (vLLM refuses prompt + max_tokens above it with HTTP 400). A default is cut to fit,
    saying so; a length the operator chose is never changed: BadInput names the limit instead."""
    if input_len + output_len <= max_len:
        return input_len, output_len, None
    i, o = input_len, output_len
    if "input_len" not in explicit:
        if "output_len" not in explicit and o > max_len // 2:
            o = max(1, max_len // 4)
        i = max_len - o
    elif "output_len" not in explicit:
        o = max_len - i
    if i >= 1 and o >= 1 and i + o <= max_len:
        cut = [f"--{n} {old} → {new}" for n, old, new in (("input-len", input_len, i), ("output-len", output_len, o))
               if old != new]
        return i, o, f"cut to fit the run's context length {max_len}{where}: {', '.join(cut)}"
    y = max(1, min(output_len, max_len // 2))
    raise BadInput(
        f"--input-len {input_len} + --output-len {output_len} = {input_len + output_len} tokens do not fit "
        f"the run's context length {max_len}{where}: every request would be refused (HTTP 400)",
        hint=f"at most {max_len} tokens in all, for example --input-len {max(1, max_len - y)} --output-len {y}")


class ProgressLine:
    """A live progress line on stderr: redrawn in place on a terminal, a line every 5 s otherwise."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.width = 0

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        text = p.line()
        if self.tty:
            pad = max(0, self.width - len(text))
            sys.stderr.write("\r" + text + " " * pad)
            self.width = len(text)
            sys.stderr.flush()
        elif time.monotonic() - self.last >= 5.0:
            self.last = time.monotonic()
            print(text, file=sys.stderr)

    def end(self) -> None:
        if self.enabled and self.tty and self.width:
            sys.stderr.write("\n")
            self.width = 0


async def bench_live(sup: Any, spec: Any, levels: list[int], *, journal: Any = None,
                     progress: ProgressLine | None = None) -> dict[str, Any]:
    """Bench the supervisor's current run, which must be READY; the result is recorded on the run.
    Before any load: the served model and its max-model-len (`/v1/models`), the model's tokenizer on
    node 0 (synthetic prompts are its own token ids), the lengths fitted to the run."""
    info = sup.run_info
    if info is None:
        raise CockpitError(f"{sup.profile.name}: no live run to bench",
                           hint=f"`cockpit up {sup.profile.name} --wait ready` first")
    snap = sup.snapshot()
    if snap.state.phase != "ready" or snap.health != "200":
        raise CockpitError(
            f"{sup.profile.name}: run {info.id} is not ready (phase {snap.state.phase}, health {snap.health or 'not probed'})",
            hint=f"`cockpit up {sup.profile.name} --wait ready`, or wait for READY",
        )

    base = await sup.api_base_url()
    metrics = sup.backend.metrics
    if metrics is None:  # the load runs all the same; the server's side is said unavailable, not zero
        spec.metrics_absent = f"serving metrics unavailable for this engine ({sup.backend.words().display})"
    else:
        spec.metrics_path, spec.metrics_prefix, spec.metric_names = metrics.path(), metrics.prefix(), metrics.serving()
    spec.metrics_switch = sup.backend.words().metrics_switch
    spec.api_key = api_key_of(sup.profile, info.flags)  # a server started with --api-key refuses requests without it
    served = await served_model(base, spec.api_key)
    notes: list[str] = []
    if spec.dataset is None:
        spec.vocab, why = await _vocab(sup, info)
        if spec.vocab is None:
            notes.append(f"prompts are text, their lengths the server's count: the model's tokenizer was not read ({why})")
        if served.context_len is not None:
            spec.input_len, spec.output_len, cut = fit_lengths(
                spec.input_len, spec.output_len, served.context_len, spec.explicit, " (from /v1/models)")
            if cut:
                notes.append(cut)
        else:
            notes.append("input + output lengths not checked against the run's context length: the server's "
                         "/v1/models does not say it")
    node0 = sup.profile.hosts[0]
    if node0.is_local:
        notes.append(f"the load generator runs on the engine's own machine ({os.cpu_count()} CPUs): its CPU time "
                     "(client_cpu_s) is taken from the server's; bench from another machine for figures without it")
    for n in notes:
        print(f"cockpit bench: {n}", file=sys.stderr)
    try:
        result = await run_bench(base, spec, levels, on_progress=progress, served=served)
    finally:
        if progress is not None:
            progress.end()
    result["notes"] = notes
    result["context_len"] = served.context_len  # the /v1/models card's context length
    result["max_model_len"] = served.context_len  # the same under its key before issue 26 (an alias)
    result["run_id"] = info.id
    result["flags"] = mask_mapping(info.flags)  # printed by --json and kept in the journal: never the key
    if journal is not None:
        try:
            journal.record_bench(info.id, result)
        except CockpitError as exc:
            print(f"cockpit: the bench was not recorded in the journal: {exc}", file=sys.stderr)
    return result


async def _vocab(sup: Any, info: Any) -> tuple[Any, str]:
    """The token ids of the run's model, read on node 0 over its transport (vocab_probe.py on the
    host's Python): (Vocab, "") or (None, why not)."""
    try:
        planner = sup.backend.planner
        if planner is None:
            return None, f"plan unavailable for this engine ({sup.backend.words().display}): no model named"
        path = planner.model_location(sup.profile, info.flags)
    except ValueError as exc:
        return None, str(exc)
    if not path:
        return None, "the run's flags name no model"
    host = sup.profile.hosts[0]
    return await read_vocab(sup.nodes[0].transport, str(path), None if host.is_local else sup.profile.python,
                            sup.profile.env)
