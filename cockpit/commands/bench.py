"""`cockpit bench PROFILE [--requests N] [--concurrency C…] [--input-len L] [--output-len L]
[--dataset synthetic|FILE.jsonl] [--duration S] [--max-error-share F] [--api openai|sglang] [--json]`.

A bounded load test of the profile's live run (through the SSH forward when it is remote): the
load generator is `cockpit/serving/loadgen.py`. The result is stored on the run in the journal
(`runs show`, `runs compare`, the TUI's history). Exit 0 when every request succeeded, 1 when the
run is not ready, or any request failed, or none completed; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from cockpit.commands._support import load_profile_arg, open_journal, run_command
from cockpit.face import BadInput, CockpitError, mask_mapping

if TYPE_CHECKING:
    from cockpit.face import Profile

DEFAULTS: dict[str, Any] = {"concurrency": [8], "input_len": 1024, "output_len": 256}


def spec_from_args(args: argparse.Namespace, backend: str) -> tuple[Any, list[int]]:
    from cockpit.face import DEFAULT_MAX_ERROR_SHARE, BenchSpec, load_dataset

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
        from cockpit.face import engine_name, engine_words, get_backend

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


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    spec, levels = spec_from_args(args, profile.backend)
    return run_command(_bench(profile, spec, levels, bool(args.json)))


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
    from cockpit.face import run_bench, served_model

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
    from cockpit.face import api_key_of

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
    from cockpit.face import read_vocab

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


async def _bench(profile: Profile, spec: Any, levels: list[int], as_json: bool) -> int:
    from cockpit.face import Supervisor, finite_json

    journal = open_journal()
    sup = Supervisor(profile, journal=journal)
    try:
        info = await sup.attach()
        if info is None:
            raise CockpitError(f"{profile.name}: no live run to bench on {', '.join(h.label for h in profile.hosts)}",
                               hint=f"`cockpit up {profile.name} --wait ready` first")
        await sup.refresh_once()
        result = await bench_live(sup, spec, levels, journal=journal, progress=ProgressLine())
    finally:
        await sup.close()
        if journal is not None:
            journal.close()
    if as_json:
        print(json.dumps(finite_json(result), indent=2, allow_nan=False))
    else:
        print(render(profile.name, result))
    failed = result["bench_stopped"] or any(lv["errors"] for lv in result["levels"]) or result["errors"]
    return 0 if not failed and result["requests"] > 0 else 1


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"


def _server_hist(srv: dict[str, Any], key: str) -> str:
    h = srv.get(f"{key}_ms")
    if not isinstance(h, dict):
        return "not exported"
    return f"p50 {_ms(h.get('p50'))} / p99 {_ms(h.get('p99'))} ms over {h.get('count', 0):,} observations"


def render(name: str, r: dict[str, Any]) -> str:
    lines = [f"{name} · run {r.get('run_id')} · {r.get('api')} API"]
    if r.get("input_len") is not None:
        ctx = r.get("context_len")
        lines.append(f"input {r['input_len']} tokens · output {r['output_len']} tokens"
                     + (f" · context length {ctx}" if ctx else ""))
    if r.get("prompts"):
        lines.append(f"prompts: {r['prompts']}")
    for n in r.get("notes") or ():
        lines.append(f"note: {n}")
    for lv in r.get("levels", [r]):
        lines.append("")
        lines.append(f"concurrency {lv['concurrency']}: {lv['requests']} requests, {lv['errors']} errors, "
                     f"{lv['cancelled']} cancelled at the time limit, in {lv['duration_s']:.1f} s")
        if lv.get("stopped"):
            lines.append(f"  STOPPED: {lv['stopped']}")
        tps = lv["output_tok_s"]
        rps = lv["requests_per_s"]
        cpu = lv.get("client_cpu_s")
        lines.append(f"  output {'—' if tps is None else f'{tps:,.0f}'} tok/s · {'—' if rps is None else f'{rps:.2f}'} req/s"
                     + ("" if cpu is None else f" · load generator CPU {cpu:.1f} s"))
        lines.append(f"  {'':10}{'p50':>10}{'p90':>10}{'p99':>10}")
        for key, label in (("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms")):
            p = lv[key]
            lines.append(f"  {label:10}{_ms(p['p50']):>10}{_ms(p['p90']):>10}{_ms(p['p99']):>10}")
        lines.append("  (ITL: decode time per output token of a request, (E2E − TTFT) / (tokens − 1))")
        if lv.get("not_streamed"):
            lines.append(f"  {lv['not_streamed']} answers came whole although streaming was asked for: "
                         "their TTFT is their E2E, ITL not measured")
        for kind, n in lv.get("error_kinds", {}).items():
            lines.append(f"  error ×{n}: {kind}")
        srv = lv["server"]
        if srv.get("available"):
            gen = srv.get("delta_generation_tokens")
            lines.append(
                f"  server: peak running {srv.get('peak_running') or 0:.0f}, peak queue "
                f"{srv.get('peak_waiting') or 0:.0f}, peak KV usage {srv.get('peak_kv_usage') or 0:.2f}; "
                f"generated {'—' if gen is None else f'{gen:,.0f}'} tokens (client counted {lv['output_tokens']:,})")
            lines.append(f"  server TTFT: {_server_hist(srv, 'ttft')}"
                         + (f" (mean {_ms(srv['mean_ttft_ms'])} ms; client mean {_ms(lv.get('mean_ttft_ms'))} ms)"
                            if srv.get("mean_ttft_ms") is not None else ""))
            lines.append(f"  server ITL (per decode step): {_server_hist(srv, 'itl')}")
            if isinstance(srv.get("tpot_ms"), dict):
                lines.append(f"  server time per output token (per request): {_server_hist(srv, 'tpot')}")
        else:
            lines.append(f"  server metrics: not measured — {srv.get('reason')}")
    if r.get("bench_stopped"):
        lines.append("")
        lines.append(f"bench stopped: {r['bench_stopped']}"
                     + (f"; not run: concurrency {' '.join(map(str, r['not_run']))}" if r.get("not_run") else ""))
    elif len(r.get("levels", [])) > 1:
        lines.append("")
        lines.append(f"best: concurrency {r['concurrency']} at {r['output_tok_s']:,.0f} tok/s")
    return "\n".join(lines)
