"""`cockpit plan PROFILE… [--gpu-mem-gb X] [--gpus N] [--set FLAG=VALUE]… [--json]` (several profiles: the
groups of one prefill/decode deployment, each planned with its own budget) and
`cockpit plan --model-config DIR --gpu-mem-gb X --tp N [--dp N] [--ep N] [--backend B] [--set …] [--json]`.

The memory plan before the first launch: the model's facts (config.json and the checkpoint's weight
bytes, read on the GPU host over its transport — metadata only), the GPUs (measured, or the what-if
`--gpu-mem-gb`, GiB as nvidia-smi reports it), the backend's budget, and — when the journal holds a
finished run of the same setup — calibration from what that run measured.

The plan of a profile is made by cockpit/preflight/planning.py, which the gate (`cockpit check`,
`cockpit up`, the picker) calls too.
Exit codes: 0, 1 when the profile's value is predicted below the warn headroom, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

from cockpit.commands._support import load_profile_arg, run_command
from cockpit.face import (
    DEFAULT_BACKEND,
    BadInput,
    CockpitError,
    HostFacts,
    MemoryPlan,
    ModelConfigError,
    PlanUnavailable,
    Profile,
    TransportError,
    apply_what_if,
    backend_names,
    backend_plan,
    calibration_runs,
    clean_text,
    get_backend,
    measured_facts,
    normalise_flag_name,
    parse_profile,
    plan_finding,
    plan_for_profile,
    read_model_dir,
    unavailable,
)

# ---- the command -------------------------------------------------------------------------------


def _setting(value: float) -> str:
    """0.80, not 0.8: the table's column reads as the operator types the flag; an automatic value keeps its digits."""
    return f"{value:.2f}" if abs(value * 100 - round(value * 100)) < 1e-9 else f"{value:g}"




def _what_if_gpu(facts: list[HostFacts], gpu_mem_gb: float | None, gpus: int | None) -> list[HostFacts]:
    return apply_what_if(facts, None, gpu_mem_gb, gpus)


def _overrides(backend_name: str, items: list[str]) -> dict[str, Any]:
    try:
        backend = get_backend(backend_name)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return backend.flags.parse_overrides(items)


def _model_config_plan(args: argparse.Namespace) -> MemoryPlan:
    """The profile-less form: a profile made of the options (local host, the model directory)."""
    if args.gpu_mem_gb is None or args.tp is None:
        raise BadInput("--model-config needs --gpu-mem-gb and --tp")

    overrides = _overrides(args.backend, list(args.overrides or []))
    planner = get_backend(args.backend).planner
    if planner is None:
        raise unavailable(get_backend(args.backend), "planner")
    try:
        server = planner.server_flags(args.model_config, args.tp, args.dp, args.ep)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    profile = parse_profile({
        "name": "plan", "backend": args.backend, "version": args.server_version, "server": server,
        "policy": {"target-headroom-gb": args.target_headroom_gb, "warn-headroom-gb": args.warn_headroom_gb},
    }, "--model-config")
    model = read_model_dir(args.model_config)
    draft_path = planner.draft_model_location(profile, overrides)
    if draft_path:  # --set speculative-draft-model-path=DIR (SGLang) / speculative-config's "model" (vLLM)
        model = dataclasses.replace(model, draft=read_model_dir(draft_path))
    facts = [HostFacts(host="local", gpu_mem_total_gib=args.gpu_mem_gb, gpu_count=args.gpus, source="override")]
    runs = calibration_runs() if args.calibrate_from else []
    return backend_plan(profile, facts, model, overrides, runs=runs, calibrate_from=args.calibrate_from)


def _profile_plans(args: argparse.Namespace, name: str) -> tuple[list[tuple[str, MemoryPlan]], dict[str, Any] | None]:
    """(label, plan) per group — one for a plain profile, prefill and decode for a profile that
    declares `groups:` (each with its own hosts, flags, GPUs and budget) — and its router."""
    profile = load_profile_arg(name)
    if not profile.groups:
        return [(name, _profile_plan(args, profile))], None

    backend = get_backend(profile.backend)
    groups = profile.group_profiles()
    for role, gp in groups:  # every group's role and GPU count before any I/O
        check_group(backend, gp, role, profile.groups[role].gpus)  # type: ignore[index]
    router = router_json(profile)
    return [(gp.name, _profile_plan(args, gp, gpus=profile.groups[role].gpus)) for role, gp in groups], router  # type: ignore[index]


def check_group(backend: Any, group: Profile, role: str, gpus: int | None) -> None:
    """A group's flags must make the server of its role, on no more GPUs per host than the group
    has (exit 2 naming the group's key otherwise)."""
    try:
        flags = backend.flags.effective(group)
        got = backend.launch.pd_role(flags)
    except ValueError as exc:
        raise BadInput(f"groups.{role}.server: {exc}") from None
    if gpus is not None:
        used = backend.launch.gpus([h.label for h in group.hosts], flags, group.env)
        per_host = max((sum(1 for h, _ in used if h == host) for host in {h for h, _ in used}), default=0)
        if per_host > gpus:
            raise BadInput(f"groups.{role}.gpus: {gpus} per host, but the group's flags run {per_host} ranks on a host")
    if got is None or role not in got.split("+"):
        what = f"a {got} server" if got else "a server of no prefill/decode role"
        raise BadInput(f"groups.{role}.server: the flags make {what}", hint=backend.launch.role_hint(role))


def router_json(profile: Profile) -> dict[str, Any] | None:
    """The router of a prefill/decode profile: where, which port, its argv (no GPU memory: not planned)."""
    if profile.router is None:
        return None

    try:
        argv = get_backend(profile.backend).launch.router_argv(profile)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return {"host": profile.router.host.label, "port": profile.router.port, "argv": argv}


def _profile_plan(args: argparse.Namespace, profile: Profile, gpus: int | None = None) -> MemoryPlan:

    overrides = _overrides(profile.backend, list(args.overrides or []))
    gpus = args.gpus if args.gpus is not None else gpus

    async def go() -> MemoryPlan:
        facts = None
        if args.gpu_mem_gb is not None:
            facts = _what_if_gpu([HostFacts(host=h.label, source="unknown") for h in profile.hosts], args.gpu_mem_gb, gpus)
        elif gpus is not None:
            facts = _what_if_gpu(await measured_facts(profile), None, gpus)
        runs = [] if args.no_calibration and not args.calibrate_from else calibration_runs(None if args.calibrate_from else profile.name)
        try:
            return await plan_for_profile(profile, overrides, facts=facts, runs=runs, calibrate_from=args.calibrate_from)
        except TransportError as exc:
            raise TransportError(str(exc), _offline_hint(exc.hint, profile, overrides, args.gpu_mem_gb)) from None


    return run_command(go())


def _offline_hint(hint: str | None, profile: Any, overrides: dict[str, Any], gpu_mem_gb: float | None) -> str:
    """The host could not be reached: say the command that plans without it (the model's
    config.json and safetensors index copied here, the GPU memory given), with what the profile
    already knows filled in."""
    backend = get_backend(profile.backend)
    try:
        tp = backend.flags.value(backend.flags.effective(profile, overrides), "tp")
    except Exception:  # a flag the server refuses was said before any I/O; here it only loses N
        tp = None
    model = backend.planner.model_location(profile, overrides) if backend.planner is not None else None
    gib = f"{gpu_mem_gb:g}" if gpu_mem_gb is not None else "GiB"
    line = (f"to plan without the host: cockpit plan --model-config DIR --gpu-mem-gb {gib} --tp {tp or 'N'}"
            + (f" --backend {profile.backend}" if profile.backend != DEFAULT_BACKEND else "")
            + " (DIR: a local copy of the model's config.json and its safetensors index or headers"
            + (f", from {model} on the host" if model else "") + ")")
    return f"{hint}\n  hint: {line}" if hint else line


def run(args: argparse.Namespace) -> int:
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
    routers: list[dict[str, Any]] = []
    try:
        if args.model_config:
            labelled = [("", _model_config_plan(args))]
        elif profiles:
            # several profiles, or one that declares groups: the groups of one deployment (a
            # prefill group and a decode group), each planned with its own budget, flags and GPUs
            labelled = []
            for name in profiles:
                got, router = _profile_plans(args, name)
                labelled += got
                routers += [router] if router else []
        else:
            raise BadInput("cockpit plan needs a PROFILE, or --model-config DIR --gpu-mem-gb X --tp N")
    except ModelConfigError as exc:
        raise BadInput(str(exc)) from None
    except PlanUnavailable as exc:
        raise CockpitError(str(exc), hint=exc.hint) from None
    labels = [n for n, _ in labelled]
    plans = [mp for _, mp in labelled]
    if request_tokens:
        plans = [dataclasses.replace(mp, request_tokens=request_tokens) for mp in plans]
    if args.json:
        out: dict[str, Any] = plans[0].to_json() if len(plans) == 1 else {
            "groups": [dict(mp.to_json(), profile=n, group=mp.role) for n, mp in zip(labels, plans, strict=True)]}
        if routers:
            out["router"] = routers[0] if len(routers) == 1 else routers
        print(json.dumps(out, indent=2))
    else:
        for i, mp in enumerate(plans):
            if len(plans) > 1:
                sys.stdout.write(("\n" if i else "") + f"group {i + 1} of {len(plans)}: {labels[i]}\n")
            sys.stdout.write(render_plan(mp, current_from=_current_from(mp, list(args.overrides or []))))
        for r in routers:
            sys.stdout.write(f"\nrouter on {r['host']} port {r['port']} (no GPU memory: not planned): "
                             + clean_text(" ".join(r["argv"])) + "\n")
    return 1 if any(mp.severity == "critical" for mp in plans) else 0


def _current_from(mp: MemoryPlan, items: list[str]) -> str:
    """Where the plan's current value comes from, as its row is marked: `--set` when the operator
    gave it on the command line (always so with --model-config), else the profile (or the default)."""
    try:
        given = {normalise_flag_name(k) for k in _overrides(mp.backend, items)} if items else set()
    except Exception:  # the plan was made from these items: a failure here only loses the label
        given = set()
    return "--set" if normalise_flag_name(mp.flag) in given else "profile"


def _engine_term_lines(mp: MemoryPlan) -> list[str]:
    """The lines of the terms only the plan's engine has, as its backend words them."""
    planner = get_backend(mp.backend).planner if mp.backend in backend_names() else None
    return planner.term_lines(mp.terms) if planner is not None else []


def render_plan(mp: MemoryPlan, current_from: str = "profile") -> str:
    """The plan as text: facts, the table, the current value (the profile's, or `--set`'s) and the
    recommendation."""
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
    lines += _engine_term_lines(mp)
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
    # 80 columns, marks included: the flag and what the columns mean are said above the table, the
    # columns keep only their numbers (it was 98 wide, and an 80-column terminal folded every row)
    legend = (f"{mp.flag} settings. headroom: free GiB per GPU after CUDA graph capture (· below the "
              f"{mp.target_headroom_gib:g} GiB target, ! below the {mp.warn_headroom_gib:g} GiB warn level, ? the band's "
              "low end may not start)."
              + (f" reqs: how many requests of {n_req:,} tokens fit at once." if n_req > 0 else ""))
    lines += _wrap(legend)
    lines.append(f"  {'setting':<7}  {'KV tokens':>10}  {'KV GiB':>6}  {'headroom':>11}  {'reqs' if n_req > 0 else '':>7}".rstrip())
    rows = list(mp.rows)
    pinned = [r for r in (mp.current, mp.recommended) if r is not None and r.flag != mp.flag]
    if mp.current is not None and not pinned and all(abs(r.value - mp.current.value) > 1e-9 for r in rows):
        rows.append(mp.current)
        rows.sort(key=lambda r: r.value)
    for r in rows:
        mark = []
        if cur_v is not None and abs(r.value - cur_v) < 1e-9:
            mark.append("← default" if mp.current_is_default else f"← {current_from}")
        if rec_v is not None and abs(r.value - rec_v) < 1e-9:
            mark.append("← recommended")
        h = r.headroom_after_capture_gib
        if not r.starts:
            lines.append(f"  {_setting(r.value):<7}  {0:>10,}  {'—':>6}  {'no start':>11}  !  {' '.join(mark)}".rstrip())
            continue
        if r.tight and r.max_total_num_tokens <= 0:
            # the point does not start, the band's high end does: "tight: may not start", never a confident 0
            lines.append(f"  {_setting(r.value):<7}  {'≤ ' + f'{r.high:,}':>10}  {'—':>6}  {'may not start':>11}  ?  {' '.join(mark)}".rstrip())
            continue
        flag = " !" if h < mp.warn_headroom_gib else (" ·" if h < mp.target_headroom_gib else "  ")
        if r.tight:
            flag = " ?"
        conc = mp.concurrency(r)
        reqs = f"{conc:>7,}" if conc is not None else " " * 7
        lines.append(f"  {_setting(r.value):<7}  {r.max_total_num_tokens:>10,}  {r.kv_gib:>6.2f}  {h:>7.2f} GiB{flag}"
                     f"{reqs} {' '.join(mark)}".rstrip())
    for r in dict.fromkeys(pinned):  # a pinned KV size (vLLM's --kv-cache-memory-bytes) is no row of the table
        which = current_from if r is mp.current else "recommended"
        lines.append(f"  {which}: {r.label}: {r.max_total_num_tokens:,} KV tokens, {r.headroom_after_capture_gib:.2f} GiB after capture")
    lines.append("")
    banded: list[tuple[Any, str]] = [(mp.current, current_from), (mp.recommended, "recommended")]
    for b, which in banded:
        if b is not None and b.low != b.high and (b is mp.current or b.value != getattr(mp.current, "value", None)):
            lines += _wrap(f"KV tokens at {b.label} ({which}): {b.band_text()} — the point, then the band every "
                           "estimated term's uncertainty spans (docs/PLAN.md)" if which != "recommended" else
                           f"KV tokens at {b.label} ({which}): {b.band_text()}")
    lines += _wrap(plan_finding(mp).message)
    if mp.recommended is None:
        lines.append(f"  no value meets the {mp.target_headroom_gib:g} GiB target headroom")
    for n in mp.notes:
        lines += _wrap(f"note: {clean_text(n)}", hang=8)
    return "\n".join(lines) + "\n"


def _wrap(text: str, hang: int = 2) -> list[str]:
    """A sentence of the plan folded at 80 columns (the table's own width), indented like the table."""
    import textwrap

    return textwrap.wrap(text, width=80, initial_indent="  ", subsequent_indent=" " * hang,
                         break_on_hyphens=False, break_long_words=False) or [""]
