"""Weights from config.json alone against published checkpoint sizes (tests/data/real/plan/sizes.yaml).

    .venv/bin/python bench/plan_sizes.py          (well under a second; no GPU, no network)

For each checkpoint: the bytes cockpit/model/estimate.py gives from its config.json, the
total_size of the model.safetensors.index.json published beside it, and the error. The issue's
goal is within 2 %; the test (tests/model/test_estimate.py) holds every entry to the band it
states here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import show_table  # noqa: E402
from cockpit.model.config import parse_config  # noqa: E402
from cockpit.model.estimate import estimate_index  # noqa: E402

SIZES = ROOT / "tests" / "data" / "real" / "plan" / "sizes.yaml"


def rows() -> list[dict]:
    doc = yaml.safe_load(SIZES.read_text(encoding="utf-8"))
    out = []
    for c in doc["checkpoints"]:
        raw = json.loads((SIZES.parent / c["config"]).resolve().read_text(encoding="utf-8"))
        cfg = parse_config(raw, c["name"], name=c["name"])
        est = estimate_index(cfg, raw).total_bytes
        out.append({**c, "estimate": est, "err": est / c["total_size"] - 1, "arch": cfg.architecture,
                    "quant": cfg.quant.method, "dtype": cfg.dtype})
    return out


def main() -> int:
    rs = rows()
    show_table(
        "config.json alone vs the published checkpoint (bytes of every tensor)",
        ["checkpoint", "architecture", "dtype / quant", "estimate GB", "published GB", "err"],
        [[r["name"], r["arch"], f"{r['dtype']} / {r['quant']}", f"{r['estimate'] / 1e9:,.3f}", f"{r['total_size'] / 1e9:,.3f}",
          f"{100 * r['err']:+.2f} %"] for r in rs],
    )
    within = sum(1 for r in rs if abs(r["err"]) <= 0.02)
    print(f"within 2 %: {within}/{len(rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
