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
from typing import Any

from cockpit.commands._benching import ProgressLine, bench_live, spec_from_args
from cockpit.commands._support import load_profile_arg, open_journal, run_command
from cockpit.face import CockpitError, Profile, Supervisor, finite_json


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    spec, levels = spec_from_args(args, profile.backend)
    return run_command(_bench(profile, spec, levels, bool(args.json)))


async def _bench(profile: Profile, spec: Any, levels: list[int], as_json: bool) -> int:
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
