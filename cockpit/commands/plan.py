"""`cockpit plan PROFILE… [--gpu-mem-gb X] [--gpus N] [--set FLAG=VALUE]… [--json]` (several profiles: the
groups of one prefill/decode deployment, each planned with its own budget) and
`cockpit plan --model-config DIR --gpu-mem-gb X --tp N [--dp N] [--ep N] [--backend B] [--set …] [--json]`.

The memory plan before the first launch: the model's facts (config.json and the checkpoint's weight
bytes, read on the GPU host over its transport — metadata only), the GPUs (measured, or the what-if
`--gpu-mem-gb`, GiB as nvidia-smi reports it), the backend's budget, and — when the journal holds a
finished run of the same setup — calibration from what that run measured.

The plan of a profile is made by cockpit/supervisor/planning.py, which `cockpit check`, `cockpit up`
and the picker call too.
Exit codes: 0, 1 when the profile's value is predicted below the warn headroom, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from cockpit.errors import BadInput
from cockpit.supervisor.planning import backend_plan, measured_facts, plan_finding, plan_for_profile

if TYPE_CHECKING:
    from cockpit.backends.base import HostFacts
    from cockpit.model.plan import MemoryPlan


# ---- the command -------------------------------------------------------------------------------


def _setting(value: float) -> str:
    """0.80, not 0.8: the table's column reads as the operator types the flag; an automatic value keeps its digits."""
    return f"{value:.2f}" if abs(value * 100 - round(value * 100)) < 1e-9 else f"{value:g}"


def journal_runs(profile_name: str | None = None) -> list[Any]:
    """Runs from the journal for calibration (read-only; an unusable journal calibrates nothing)."""
    from cockpit.errors import CockpitError
    from cockpit.journal import Journal

    try:
        j = Journal.open(readonly=True)
    except CockpitError:
        return []
    try:
        return j.list_runs(profile_name)
    finally:
        j.close()


def _what_if_gpu(facts: list[HostFacts], gpu_mem_gb: float | None, gpus: int | None) -> list[HostFacts]:
    from cockpit.telemetry.hostfacts import apply_what_if

    return apply_what_if(facts, None, gpu_mem_gb, gpus)


def _overrides(backend_name: str, items: list[str]) -> dict[str, Any]:
    from cockpit.backends import get_backend

    try:
        backend = get_backend(backend_name)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return backend.parse_overrides(items)


def _model_config_plan(args: argparse.Namespace) -> MemoryPlan:
    """The profile-less form: a profile made of the options (local host, the model directory)."""
    from cockpit.backends.base import HostFacts
    from cockpit.core.profile import parse_profile
    from cockpit.model.read import read_model_dir

    if args.gpu_mem_gb is None or args.tp is None:
        raise BadInput("--model-config needs --gpu-mem-gb and --tp")
    from cockpit.backends import get_backend

    overrides = _overrides(args.backend, list(args.overrides or []))
    try:
        server = get_backend(args.backend).plan_server(args.model_config, args.tp, args.dp, args.ep)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    profile = parse_profile({
        "name": "plan", "backend": args.backend, "version": args.server_version, "server": server,
        "policy": {"target-headroom-gb": args.target_headroom_gb, "warn-headroom-gb": args.warn_headroom_gb},
    }, "--model-config")
    model = read_model_dir(args.model_config)
    draft_path = get_backend(args.backend).draft_model_path(profile, overrides)
    if draft_path:  # --set speculative-draft-model-path=DIR (SGLang) / speculative-config's "model" (vLLM)
        model = dataclasses.replace(model, draft=read_model_dir(draft_path))
    facts = [HostFacts(host="local", gpu_mem_total_gib=args.gpu_mem_gb, gpu_count=args.gpus, source="override")]
    runs = journal_runs() if args.calibrate_from else []
    return backend_plan(profile, facts, model, overrides, runs=runs, calibrate_from=args.calibrate_from)


def _profile_plan(args: argparse.Namespace, name: str) -> MemoryPlan:
    from cockpit.backends.base import HostFacts
    from cockpit.commands._support import load_profile_arg, run_command

    profile = load_profile_arg(name)
    overrides = _overrides(profile.backend, list(args.overrides or []))

    async def go() -> MemoryPlan:
        facts = None
        if args.gpu_mem_gb is not None:
            facts = _what_if_gpu([HostFacts(host=h.label, source="unknown") for h in profile.hosts], args.gpu_mem_gb, args.gpus)
        elif args.gpus is not None:
            facts = _what_if_gpu(await measured_facts(profile), None, args.gpus)
        runs = [] if args.no_calibration and not args.calibrate_from else journal_runs(None if args.calibrate_from else profile.name)
        return await plan_for_profile(profile, overrides, facts=facts, runs=runs, calibrate_from=args.calibrate_from)

    return run_command(go())


def run(args: argparse.Namespace) -> int:
    from cockpit.errors import CockpitError
    from cockpit.model.config import ModelConfigError
    from cockpit.model.plan import PlanUnavailable

    if args.gpu_mem_gb is not None and not (math.isfinite(args.gpu_mem_gb) and 0 < args.gpu_mem_gb < 1e6):
        raise BadInput(f"--gpu-mem-gb {args.gpu_mem_gb:g}: expected a positive number of GiB")
    for name, fval in (("--target-headroom-gb", args.target_headroom_gb), ("--warn-headroom-gb", args.warn_headroom_gb)):
        if not math.isfinite(fval):
            raise BadInput(f"{name} {fval:g}: expected a number of GiB")
    request_tokens = getattr(args, "request_tokens", None)
    for name, ival in (("--gpus", args.gpus), ("--tp", args.tp), ("--dp", args.dp), ("--ep", args.ep),
                       ("--request-tokens", request_tokens)):
        if ival is not None and ival <= 0:
            raise BadInput(f"{name} {ival}: expected a positive whole number")
    if args.model_config and args.profile:
        raise BadInput("give a PROFILE or --model-config DIR, not both")
    profiles = list(args.profile or []) if isinstance(args.profile, list) else [args.profile] if args.profile else []
    try:
        if args.model_config:
            plans = [_model_config_plan(args)]
        elif profiles:
            # several profiles: the groups of one deployment (a prefill group and a decode group),
            # each planned with its own budget, flags and GPUs
            plans = [_profile_plan(args, name) for name in profiles]
        else:
            raise BadInput("cockpit plan needs a PROFILE, or --model-config DIR --gpu-mem-gb X --tp N")
    except ModelConfigError as exc:
        raise BadInput(str(exc)) from None
    except PlanUnavailable as exc:
        raise CockpitError(str(exc), hint=exc.hint) from None
    if request_tokens:
        plans = [dataclasses.replace(mp, request_tokens=request_tokens) for mp in plans]
    if args.json:
        out = plans[0].to_json() if len(plans) == 1 else {"groups": [dict(mp.to_json(), profile=n) for n, mp in zip(profiles, plans, strict=True)]}
        print(json.dumps(out, indent=2))
    else:
        for i, mp in enumerate(plans):
            if len(plans) > 1:
                sys.stdout.write(("\n" if i else "") + f"group {i + 1} of {len(plans)}: {profiles[i]}\n")
            sys.stdout.write(render_plan(mp))
    return 1 if any(mp.severity == "critical" for mp in plans) else 0


def render_plan(mp: MemoryPlan) -> str:
    """The plan as text: facts, the table, the profile's value and the recommendation."""
    from cockpit.core.sanitize import clean_text

    t = mp.terms
    lines = [
        f"memory plan · {clean_text(mp.model)} · {mp.backend} {mp.version} · TP{mp.tp}"
        + (f" DP{mp.dp}" if mp.dp > 1 else "") + (f" EP{mp.ep}" if mp.ep > 1 else "")
        + (f" · {mp.role} role" if mp.role else "")
        + f" · {mp.gpu_mem_gib:.2f} GiB per GPU",
        f"  weights per rank        {mp.weights_gib_per_rank:8.2f} GiB"
        + (" (weights estimated from config.json)" if mp.weights_source == "config" else ""),
        f"  KV bytes per token      {mp.kv_bytes_per_token:8,} B (per rank)",
        f"  free before weights (P) {t.get('pre_load_avail_gib', 0):8.2f} GiB (estimated)",
    ]
    if "non_torch_gib" in t:
        lines.append(f"  non-torch memory        {t['non_torch_gib']:8.2f} GiB (estimated)")
    if "activation_peak_gib" in t:
        lines.append(f"  activation peak         {t['activation_peak_gib']:8.2f} GiB (estimated, {t.get('max_num_batched_tokens', 0):,.0f}"
                     f" batched tokens, {t.get('max_num_seqs', 0):,.0f} seqs)")
    if "graph_gib" in t:
        bs = f", max bs {t['cuda_graph_max_bs']:.0f}" if "cuda_graph_max_bs" in t else ""
        lines.append(f"  CUDA graphs             {t['graph_gib']:8.2f} GiB (estimated{bs})")
    if "req_to_token_gib" in t:
        lines.append(f"  req_to_token pool       {t['req_to_token_gib']:8.2f} GiB (context {t.get('context_length', 0):,.0f})")
    if mp.calibrated_from:
        err = mp.calibration_error
        lines.append(
            f"  calibrated from run {mp.calibrated_from}: the estimate was off by {err.get('max_total_num_tokens', 0):+,.0f} KV tokens "
            f"({err.get('max_total_num_tokens_pct', 0):+.1f} %) and {err.get('headroom_after_capture_gib', 0):+.2f} GiB headroom"
        )
    lines.append("")
    cur_v = mp.current.value if mp.current else None
    rec_v = mp.recommended.value if mp.recommended else None
    n_req = mp.request_length
    req_head = f"reqs × {n_req:,}" if n_req > 0 else ""
    lines.append(f"  {mp.flag:<24} {'KV tokens':>12} {'KV GiB':>8} {'headroom after capture':>24} {req_head:>14}".rstrip())
    rows = list(mp.rows)
    pinned = [r for r in (mp.current, mp.recommended) if r is not None and r.flag != mp.flag]
    if mp.current is not None and not pinned and all(abs(r.value - mp.current.value) > 1e-9 for r in rows):
        rows.append(mp.current)
        rows.sort(key=lambda r: r.value)
    for r in rows:
        mark = []
        if cur_v is not None and abs(r.value - cur_v) < 1e-9:
            mark.append("← default" if mp.current_is_default else "← profile")
        if rec_v is not None and abs(r.value - rec_v) < 1e-9:
            mark.append("← recommended")
        h = r.headroom_after_capture_gib
        if not r.starts:
            lines.append(f"  {_setting(r.value):<24} {0:>12,} {'—':>8} {'no KV pool: no start':>24}  ! {' '.join(mark)}".rstrip())
            continue
        flag = "  !" if h < mp.warn_headroom_gib else ("  ·" if h < mp.target_headroom_gib else "   ")
        conc = mp.concurrency(r)
        reqs = f"{conc:>11,}" if conc is not None else ""
        lines.append(f"  {_setting(r.value):<24} {r.max_total_num_tokens:>12,} {r.kv_gib:>8.2f} {h:>20.2f} GiB{flag} {reqs} {' '.join(mark)}".rstrip())
    for r in dict.fromkeys(pinned):  # a pinned KV size (vLLM's --kv-cache-memory-bytes) is no row of the table
        which = "profile" if r is mp.current else "recommended"
        lines.append(f"  {which}: {r.label}: {r.max_total_num_tokens:,} KV tokens, {r.headroom_after_capture_gib:.2f} GiB after capture")
    lines.append("")
    lines.append("  " + plan_finding(mp).message)
    if mp.recommended is None:
        lines.append(f"  no value meets the {mp.target_headroom_gib:g} GiB target headroom")
    for n in mp.notes:
        lines.append(f"  note: {clean_text(n)}")
    return "\n".join(lines) + "\n"
