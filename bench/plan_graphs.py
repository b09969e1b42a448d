"""vLLM's CUDA-graph term against the graph lines of the 26 sweep launches (issue 36).

    .venv/bin/python bench/plan_graphs.py          (a few seconds; no GPU, no network)

tests/data/real/plan/vllm-graphs.yaml holds each launch's own graph lines (vLLM 0.19.0's estimate,
its first-capture and per-graph parts per mode, and the captured pool). Each launch is planned from
config.json alone as bench/plan_tight.py and bench/plan_launches.py plan it, and the plan's graph
term (cockpit/backends/vllm/terms.py `graph_term`) is set beside the log's estimate and pool, with
the term as it stood before issue 36 (0.25 GiB + 0.01 GiB per layer) for comparison.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import plan_launches, plan_tight  # noqa: E402
from bench._common import show_table  # noqa: E402

PLAN = ROOT / "tests" / "data" / "real" / "plan"


def entries() -> list[dict[str, Any]]:
    return list(yaml.safe_load((PLAN / "vllm-graphs.yaml").read_text(encoding="utf-8"))["launches"])


def plans() -> dict[str, Any]:
    """Each sweep launch's plan from config.json alone, by name."""
    out: dict[str, Any] = {la.name: plan_tight.plan_of(la) for la in plan_tight.launches()}
    for la in plan_launches.launches():
        if la.source.startswith("https://github.com/llm-d-incubation/"):
            out[la.name] = plan_launches.plan_from_config(la)
    return out


def residuals() -> list[dict[str, Any]]:
    ps = plans()
    rows = []
    for e in entries():
        mp = ps[e["name"]]
        t = mp.terms
        rows.append({"name": e["name"], "plan": t["graph_gib"], "estimated": e["estimated_gib"], "actual": e["actual_gib"],
                     "spread": t.get("graph_spread_gib", math.nan),
                     "graphs": f"{t.get('cuda_graphs_full', 0):.0f}+{t.get('cuda_graphs_piecewise', 0):.0f}",
                     "log_graphs": f"{e['full_graphs']}+{e['piecewise_graphs']}"})
    return rows


def main() -> int:
    rows = residuals()
    table = [[r["name"], r["graphs"], r["log_graphs"], f"{r['plan']:.2f}", f"{r['estimated']:.2f}", f"{r['plan'] - r['estimated']:+.2f}",
              f"{r['actual']:.2f}", f"{r['plan'] - r['actual']:+.2f}",
              "yes" if abs(r["plan"] - r["estimated"]) <= r["spread"] else "no"] for r in rows]
    show_table("vLLM CUDA graphs, plan from config.json vs the log (GiB; graphs FULL+PIECEWISE)",
               ["launch", "graphs", "log", "plan Ĝ", "log Ĝ", "Ĝ err", "log pool", "pool err", "in band"], table)
    d_est = [r["plan"] - r["estimated"] for r in rows]
    d_act = [r["plan"] - r["actual"] for r in rows]
    inside = sum(abs(d) <= r["spread"] for d, r in zip(d_est, rows, strict=True))
    print(f"plan − log estimate: {min(d_est):+.2f} … {max(d_est):+.2f} GiB (mean |err| {sum(map(abs, d_est)) / len(rows):.2f}); "
          f"plan − captured pool: {min(d_act):+.2f} … {max(d_act):+.2f}; estimate inside the band: {inside}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
