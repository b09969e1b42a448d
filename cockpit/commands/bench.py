"""`cockpit bench PROFILE [--requests N] [--concurrency C…] [--input-len L] [--output-len L]
[--dataset synthetic|FILE.jsonl] [--duration S] [--api openai|sglang] [--json]`.

A bounded load test of the profile's live run (through the SSH forward when it is remote): the
load generator is `cockpit/telemetry/loadgen.py`. The result is stored on the run in the journal
(`runs show`, `runs compare`, the TUI's history). Exit 0 when every request succeeded, 1 when the
run is not ready, or any request failed, or none completed; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from cockpit.commands._support import load_profile_arg, open_journal, run_command
from cockpit.core.secrets import mask_mapping
from cockpit.errors import BadInput, CockpitError

if TYPE_CHECKING:
    from cockpit.core.profile import Profile

DEFAULTS: dict[str, Any] = {"concurrency": [8]}


def spec_from_args(args: argparse.Namespace, backend: str) -> tuple[Any, list[int]]:
    from cockpit.telemetry.loadgen import BenchSpec, load_dataset

    for name in ("requests", "input_len", "output_len"):
        v = getattr(args, name)
        if v < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1 (got {v})")
    levels = list(args.concurrency or DEFAULTS["concurrency"])
    if any(c < 1 for c in levels):
        raise BadInput(f"--concurrency values must be at least 1 (got {' '.join(map(str, levels))})")
    if not args.duration > 0:
        raise BadInput(f"--duration must be more than 0 seconds (got {args.duration:g})")
    if args.api == "sglang" and backend != "sglang":
        raise BadInput(f"--api sglang needs an SGLang server; this profile's backend is {backend}",
                       hint="use --api openai")
    dataset = None if args.dataset == "synthetic" else load_dataset(args.dataset, args.output_len)
    spec = BenchSpec(requests=args.requests, concurrency=levels[0], input_len=args.input_len,
                     output_len=args.output_len, duration_s=args.duration, api=args.api, dataset=dataset)
    return spec, levels


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
    """Bench the supervisor's current run, which must be READY; the result is recorded on the run."""
    from cockpit.telemetry.loadgen import run_bench

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
    spec.metrics_prefix = sup.backend.metrics_prefix()
    try:
        result = await run_bench(base, spec, levels, on_progress=progress)
    finally:
        if progress is not None:
            progress.end()
    result["run_id"] = info.id
    result["flags"] = mask_mapping(info.flags)  # printed by --json and kept in the journal: never the key
    if journal is not None:
        try:
            journal.record_bench(info.id, result)
        except CockpitError as exc:
            print(f"cockpit: the bench was not recorded in the journal: {exc}", file=sys.stderr)
    return result


async def _bench(profile: Profile, spec: Any, levels: list[int], as_json: bool) -> int:
    from cockpit.supervisor.supervisor import Supervisor

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
        print(json.dumps(result, indent=2))
    else:
        print(render(profile.name, result))
    return 0 if result["errors"] == 0 and result["requests"] > 0 else 1


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"


def render(name: str, r: dict[str, Any]) -> str:
    lines = [f"{name} · run {r.get('run_id')} · {r.get('api')} API"]
    for lv in r.get("levels", [r]):
        lines.append("")
        lines.append(f"concurrency {lv['concurrency']}: {lv['requests']} requests, {lv['errors']} errors, "
                     f"{lv['cancelled']} cancelled at the time limit, in {lv['duration_s']:.1f} s")
        tps = lv["output_tok_s"]
        rps = lv["requests_per_s"]
        lines.append(f"  output {'—' if tps is None else f'{tps:,.0f}'} tok/s · {'—' if rps is None else f'{rps:.2f}'} req/s")
        lines.append(f"  {'':10}{'p50':>10}{'p90':>10}{'p99':>10}")
        for key, label in (("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms")):
            p = lv[key]
            lines.append(f"  {label:10}{_ms(p['p50']):>10}{_ms(p['p90']):>10}{_ms(p['p99']):>10}")
        if lv.get("not_streamed"):
            lines.append(f"  {lv['not_streamed']} answers came whole although streaming was asked for: "
                         "their TTFT is their E2E, ITL not measured")
        for kind, n in lv.get("error_kinds", {}).items():
            lines.append(f"  error ×{n}: {kind}")
        srv = lv["server"]
        if srv.get("available"):
            gen = srv.get("delta_generation_tokens_total")
            lines.append(
                f"  server: peak running {srv.get('peak_num_running_reqs') or 0:.0f}, peak queue "
                f"{srv.get('peak_num_queue_reqs') or 0:.0f}, peak KV usage {srv.get('peak_token_usage') or 0:.2f}; "
                f"generated {'—' if gen is None else f'{gen:,.0f}'} tokens (client counted {lv['output_tokens']:,})")
        else:
            lines.append(f"  server metrics: not measured — {srv.get('reason')}")
    if len(r.get("levels", [])) > 1:
        lines.append("")
        lines.append(f"best: concurrency {r['concurrency']} at {r['output_tok_s']:,.0f} tok/s")
    return "\n".join(lines)
