"""The memory plan from config.json alone against the tight-fit batch (issue 36).

    .venv/bin/python bench/plan_tight.py            (a few seconds; no GPU, no network)
    .venv/bin/python bench/plan_tight.py --terms    (also each term beside what the log measured)
    .venv/bin/python bench/plan_tight.py --batch issue36b   (the second first-sight batch)
    .venv/bin/python bench/plan_tight.py --batch issue36c   (the third: ROCm, SGLang, MoE, FP8, sliding window)

tests/data/real/plan/launches-tight.yaml: fifteen public launches the project had never used,
recorded as found; each is planned before the download — its published config.json only (weights
estimated), the card's CUDA total, the launch's flags and version, no calibration — and compared
with the KV tokens the server printed. The bar (issue 36): at least 80 % within 5 %, and no launch
that ran with a high end of 0 or below. A plan that refuses the launch (a config field it cannot
read) counts as a miss. `--batch issue36b` scores tests/data/real/plan/launches-issue36b.yaml, the
second batch of launches never used before, the same way; `--batch issue36c` the third
(launches-issue36c.yaml: MI300X, SGLang, gpt-oss, FP8 MoE, Gemma 3 on an H200).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import show_table  # noqa: E402
from cockpit.backends.sglang import plan as splan  # noqa: E402
from cockpit.backends.vllm import plan as vplan  # noqa: E402
from cockpit.model.config import ModelConfig, ModelConfigError, parse_config  # noqa: E402
from cockpit.model.estimate import estimate_index  # noqa: E402
from cockpit.model.plan import GpuFacts, MemoryPlan  # noqa: E402
from cockpit.model.weights import WeightIndex  # noqa: E402

PLAN = ROOT / "tests" / "data" / "real" / "plan"
BAND = 0.05
SHARE = 0.80
BATCHES = {"tight": "launches-tight.yaml", "issue36b": "launches-issue36b.yaml", "issue36c": "launches-issue36c.yaml"}


@dataclass
class Tight:
    name: str
    doc: dict[str, Any]

    @property
    def kv_tokens(self) -> int:
        return int(self.doc["kv_tokens"])


def launches(batch: str = "tight") -> list[Tight]:
    docs = yaml.safe_load((PLAN / BATCHES[batch]).read_text(encoding="utf-8"))["launches"]
    return [Tight(d["name"], d) for d in docs]


def model_of(config: str, name: str) -> tuple[ModelConfig, WeightIndex]:
    """A config.json under tests/data/real/plan/ (a path relative to it) and its weights estimated."""
    raw = json.loads((PLAN / config).read_text(encoding="utf-8"))
    cfg = parse_config(raw, config, name=name)
    return cfg, estimate_index(cfg, raw)


def plan_of(la: Tight) -> MemoryPlan:
    d = la.doc
    cfg, weights = model_of(d["config"], d["hf_id"])
    gpu = GpuFacts(float(d["gpu_total_gib"]), name=d.get("gpu"))
    if d.get("engine") == "sglang":
        return splan.plan(cfg, weights, gpu, splan.settings_from_flags(dict(d["flags"]), d["version"]))
    return vplan.plan(cfg, weights, gpu, vplan.settings_from_flags(dict(d["flags"]), d["version"], d.get("env")))


def outcome(la: Tight) -> tuple[MemoryPlan | None, str | None]:
    try:
        return plan_of(la), None
    except ModelConfigError as exc:
        return None, str(exc)


def error(la: Tight) -> float | None:
    mp, _why = outcome(la)
    if mp is None or mp.current is None:
        return None
    return (mp.current.max_total_num_tokens - la.kv_tokens) / la.kv_tokens


def band_of(mp: MemoryPlan) -> tuple[int, int] | None:
    """(low, high) KV tokens of the current row when the plan carries a band (None before issue 36)."""
    cur = mp.current
    lo, hi = getattr(cur, "tokens_low", None), getattr(cur, "tokens_high", None)
    return (int(lo), int(hi)) if lo is not None and hi is not None else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--terms", action="store_true", help="each term beside the log's measured one")
    ap.add_argument("--batch", choices=sorted(BATCHES), default="tight", help="which first-sight batch")
    args = ap.parse_args(argv)
    rows, terms = [], []
    within = zero_high = 0
    ls = launches(args.batch)
    for la in ls:
        mp, why = outcome(la)
        err = error(la)
        ok = err is not None and abs(err) <= BAND
        within += ok
        band = band_of(mp) if mp is not None else None
        if band is not None and band[1] <= 0 and la.doc.get("ran", True):
            zero_high += 1
        shown = "refused: " + (why or "")[:60] if mp is None else f"{100 * err:+.1f} %" if err is not None else "no row"
        rows.append([la.name, f"{la.kv_tokens:,}", f"{mp.current.max_total_num_tokens:,}" if mp and mp.current else "—",
                     f"{band[0]:,} – {band[1]:,}" if band else "—", shown, "yes" if ok else "no"])
        if args.terms and mp is not None:
            m, t = la.doc["measured_gib"], mp.terms
            terms.append([la.name, f"{mp.weights_gib_per_rank:.2f} / {m['weights']:.2f}",
                          f"{t.get('activation_peak_gib', 0):.2f} / {m['activation_peak']:.2f}",
                          f"{t.get('non_torch_gib', 0):.2f} / {m['non_torch']:.2f}",
                          f"{mp.current.kv_gib:.2f} / {m['kv_cache']:.2f}" if mp.current else "—",
                          f"{mp.kv_bytes_per_token:,} / {m['kv_cache'] * 2**30 / la.kv_tokens:,.0f}"])
    show_table(f"{args.batch} batch: KV tokens planned from config.json alone vs printed by the server",
               ["launch", "printed", "planned", "band", "err", f"within {BAND:.0%}"], rows)
    if terms:
        show_table("terms, plan / log (GiB; bytes per token: plan / the log's KV GiB over its tokens)",
                   ["launch", "weights", "activation", "non-torch", "KV GiB", "B per token"], terms)
    print(f"within {BAND:.0%}: {within}/{len(ls)} = {within / len(ls):.0%} (bar: {SHARE:.0%}); "
          f"launches that ran with a high end ≤ 0: {zero_high}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
