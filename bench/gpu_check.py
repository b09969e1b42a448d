"""Reads this machine's GPUs through Cockpit's two paths side by side and says whether they agree.

    bench/gpu_check.sh                 # NVML (the gateway, cockpit/telemetry/nvml.py) vs nvidia-smi
    bench/gpu_check.sh --json          # the same, as JSON
    bench/gpu_check.sh --nvml-from S   # a recorded NVML sample (agent JSON) instead of reading NVML

The NVML path is what Cockpit reads in-process on a local run and in `cockpit check`; the
nvidia-smi path is what the telemetry agent falls back to on a host without nvidia-ml-py. Both
give the agent's JSON shape, so the comparison is of what the operator would see:

    per GPU      memory used and total (MiB, within 1 %), utilisation (within 1 point of 0-100 %)
    per process  memory used on each GPU (MiB, within 1 %); a process seen by one path only differs

NVML is read before and after nvidia-smi: a value that moved between the reads agrees when
nvidia-smi's lies within the two NVML readings (widened by the tolerance). Exit 0 when everything
agrees, 1 when something differs, 2 when a path cannot read the GPUs (with the reason). Needs no
network: the repo's venv (nvidia-ml-py is a dependency) and the driver's nvidia-smi.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MEM_REL_TOLERANCE = 0.01  # 1 % of the larger value
UTIL_ABS_TOLERANCE = 1.0  # 1 percentage point of 0-100 %


@dataclass(frozen=True)
class Row:
    what: str  # "GPU 0 memory used (MiB)", "pid 4242 on GPU 0 (MiB)"
    nvml: float | None
    smi: float | None
    agrees: bool
    note: str = ""


def _within(smi: float, lo: float, hi: float, *, rel: float = 0.0, abs_: float = 0.0) -> bool:
    slack = max(abs_, rel * max(abs(lo), abs(hi), abs(smi)))
    return lo - slack <= smi <= hi + slack


def _row(what: str, a: Any, b: Any, s: Any, *, rel: float = 0.0, abs_: float = 0.0) -> Row:
    """a, b: NVML before and after; s: nvidia-smi. Unknown on either side is a difference."""
    nv = [v for v in (a, b) if isinstance(v, int | float)]
    if not isinstance(s, int | float) or not nv:
        side = "nvidia-smi" if not isinstance(s, int | float) else "NVML"
        return Row(what, nv[0] if nv else None, s if isinstance(s, int | float) else None, False,
                   f"unknown on the {side} path")
    lo, hi = min(nv), max(nv)
    return Row(what, round((lo + hi) / 2, 2), float(s), _within(float(s), lo, hi, rel=rel, abs_=abs_))


def _by_index(sample: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(g["index"]): g for g in sample.get("gpus") or () if isinstance(g.get("index"), int)}


def _procs(sample: dict[str, Any]) -> dict[tuple[int, int | None], float | None]:
    out: dict[tuple[int, int | None], float | None] = {}
    for p in sample.get("procs") or ():
        if isinstance(p.get("pid"), int):
            out[(p["pid"], p.get("gpu_index"))] = p.get("mem_used_mib")
    return out


def compare(nvml_before: dict[str, Any], smi: dict[str, Any], nvml_after: dict[str, Any] | None = None) -> list[Row]:
    """Rows of the two paths' readings (agent JSON shape), one per value compared."""
    after = nvml_after if nvml_after is not None else nvml_before
    b, a, s = _by_index(nvml_before), _by_index(after), _by_index(smi)
    rows: list[Row] = []
    for idx in sorted(set(b) | set(s)):
        gb, ga, gs = b.get(idx, {}), a.get(idx, {}), s.get(idx, {})
        if not gb or not gs:
            rows.append(Row(f"GPU {idx}", None, None, False, "seen by " + ("NVML" if gb else "nvidia-smi") + " only"))
            continue
        rows.append(_row(f"GPU {idx} memory used (MiB)", gb.get("mem_used_mib"), ga.get("mem_used_mib"),
                         gs.get("mem_used_mib"), rel=MEM_REL_TOLERANCE))
        rows.append(_row(f"GPU {idx} memory total (MiB)", gb.get("mem_total_mib"), ga.get("mem_total_mib"),
                         gs.get("mem_total_mib"), rel=MEM_REL_TOLERANCE))
        rows.append(_row(f"GPU {idx} utilisation (%)", gb.get("util_pct"), ga.get("util_pct"),
                         gs.get("util_pct"), abs_=UTIL_ABS_TOLERANCE))
    pb, pa, ps = _procs(nvml_before), _procs(after), _procs(smi)
    for key in sorted(set(pb) | set(pa) | set(ps), key=lambda k: (k[1] if k[1] is not None else -1, k[0])):
        pid, idx = key
        what = f"pid {pid} on GPU {idx if idx is not None else '?'} memory (MiB)"
        in_nvml = [d for d in (pb, pa) if key in d]
        if key in ps and in_nvml:
            rows.append(_row(what, pb.get(key), pa.get(key), ps[key], rel=MEM_REL_TOLERANCE))
        elif key in ps:
            rows.append(Row(what, None, ps[key], False, "seen by nvidia-smi only"))
        elif len(in_nvml) == 2:
            rows.append(Row(what, pb[key], None, False, "seen by NVML only"))
        # in one NVML read only: the process started or ended between the reads, not a difference
    return rows


def render(rows: list[Row]) -> str:
    lines = [f"{'WHAT':<36} {'NVML':>12} {'NVIDIA-SMI':>12}  AGREE"]
    def fmt(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.1f}"

    for r in rows:
        lines.append(f"{r.what:<36} {fmt(r.nvml):>12} {fmt(r.smi):>12}  {'yes' if r.agrees else 'NO'}"
                     + (f"  ({r.note})" if r.note else ""))
    bad = [r for r in rows if not r.agrees]
    if not rows:
        lines.append("nothing to compare: no GPU seen by either path")
    elif bad:
        lines.append(f"DIFFER: {len(bad)} of {len(rows)} values (memory within 1 %, utilisation within 1 point)")
    else:
        lines.append(f"AGREE: all {len(rows)} values (memory within 1 %, utilisation within 1 point)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--nvml-from", type=Path, help="a recorded NVML sample (agent JSON) instead of reading NVML")
    args = ap.parse_args(argv)

    from cockpit.telemetry import nvml
    from cockpit.telemetry.hostfacts import smi_raw

    def read_nvml() -> dict[str, Any]:
        if args.nvml_from is not None:
            data: dict[str, Any] = json.loads(args.nvml_from.read_text())
            return data
        return nvml.read_raw(())

    if args.nvml_from is None and not nvml.available():
        print(f"gpu_check: NVML path unavailable: {nvml.why_unavailable()}", file=sys.stderr)
        return 2
    before = read_nvml()
    smi = smi_raw()
    after = read_nvml()
    if smi is None:
        print("gpu_check: nvidia-smi path unavailable: nvidia-smi is not on PATH", file=sys.stderr)
        return 2
    for name, sample in (("NVML", before), ("nvidia-smi", smi)):
        if not sample.get("gpus"):
            errs = "; ".join(str(e) for e in sample.get("errors") or ()) or "no GPU listed"
            print(f"gpu_check: the {name} path read no GPU: {errs}", file=sys.stderr)
            return 2
    rows = compare(before, smi, after)
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "agree": all(r.agrees for r in rows),
                          "errors": {"nvml": before.get("errors"), "nvidia-smi": smi.get("errors")}}, indent=2))
    else:
        print(render(rows))
        for name, sample in (("NVML", before), ("nvidia-smi", smi)):
            for e in sample.get("errors") or ():
                print(f"  {name}: {e}")
    return 0 if rows and all(r.agrees for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
