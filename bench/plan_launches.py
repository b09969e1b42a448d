"""The memory plan from config.json alone against every real launch the project holds.

    .venv/bin/python bench/plan_launches.py          (a few seconds; no GPU, no network)

The issue's bar: planned before the download — the model's config.json and nothing else of the
checkpoint (weights estimated by cockpit/model/estimate.py), the card's total memory, the launch's
flags and server version — at least 80 % of real launches land within 5 % of the KV tokens the
server printed. The launches: the SGLang and vLLM start-up logs of tests/data/real/plan/{sglang,vllm}/
(their yaml gives model, card and flags) and tests/data/real/plan/launches.yaml (vLLM 0.19.0 runs
with their logs' addresses and the lines that prove them). A yaml's named miss (`known_token_miss`)
is counted as a miss like any other.
"""

from __future__ import annotations

import dataclasses
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
from cockpit.model.config import ModelConfigError, parse_config  # noqa: E402
from cockpit.model.estimate import estimate_index  # noqa: E402
from cockpit.model.plan import GpuFacts  # noqa: E402
from tests.data.models import synth  # noqa: E402

PLAN = ROOT / "tests" / "data" / "real" / "plan"
BAND = 0.05  # within 5 % of the printed KV tokens
SHARE = 0.80  # of the launches


@dataclass
class Launch:
    name: str
    engine: str
    version: str | None
    model: str
    gpu: str | None
    gpu_total_gib: float
    flags: dict[str, Any]
    kv_tokens: int
    source: str
    context_length: int | None = None
    note: str = ""


def launches() -> list[Launch]:
    import bench.plan_real_sglang as rs

    out: list[Launch] = []
    for c in rs.cases():
        tok = rs.tokens_of(c)
        if not tok:
            continue
        p = c.p
        out.append(Launch(c.name, "sglang", rs.version_of(c), p["model"], p.get("gpu"), float(p["gpu_total_gib"]), dict(p["flags"]),
                          int(tok), str(c.doc["url"]), p.get("context_length"), str(c.doc.get("known_token_miss") or "")))
    for yml in sorted((PLAN / "vllm").glob("*.yaml")):
        doc = yaml.safe_load(yml.read_text(encoding="utf-8"))
        p = doc["plan"]
        out.append(Launch(yml.stem, "vllm", str(doc.get("version") or "") or None, p["model"], p.get("gpu"), float(p["gpu_total_gib"]),
                          dict(p["flags"]), int(doc["expect"]["max_total_num_tokens"]), str(doc["url"]), None,
                          str(doc.get("known_token_miss") or "")))
    for d in yaml.safe_load((PLAN / "launches.yaml").read_text(encoding="utf-8"))["launches"]:
        out.append(Launch(d["name"], d["engine"], d.get("version"), d["model"], d.get("gpu"), float(d["gpu_total_gib"]), dict(d["flags"]),
                          int(d["kv_tokens"]), d["url"], d.get("context_length"), str(d.get("known_token_miss") or "")))
    return out


def plan_from_config(la: Launch) -> Any:
    """The plan an operator gets before the download: config.json alone."""
    raw = synth.load_config(la.model)
    cfg = parse_config(raw, la.model, name=la.model)
    if la.context_length:
        cfg = dataclasses.replace(cfg, context_length=int(la.context_length))
    weights = estimate_index(cfg, raw)
    gpu = GpuFacts(la.gpu_total_gib, name=la.gpu)
    if la.engine == "sglang":
        return splan.plan(cfg, weights, gpu, splan.settings_from_flags(la.flags, la.version))
    return vplan.plan(cfg, weights, gpu, vplan.settings_from_flags(la.flags, la.version))


def error(la: Launch) -> float | None:
    """(planned − printed) / printed KV tokens; None when the plan refuses the launch."""
    try:
        mp = plan_from_config(la)
    except ModelConfigError:
        return None
    assert mp.weights_source == "config"
    cur = mp.current
    return (cur.max_total_num_tokens - la.kv_tokens) / la.kv_tokens if cur is not None else None


def main() -> int:
    rows = []
    within = 0
    ls = launches()
    for la in ls:
        err = error(la)
        ok = err is not None and abs(err) <= BAND
        within += ok
        f = la.flags
        setting = f.get("mem_fraction_static", f.get("gpu_memory_utilization", "auto"))
        par = f"tp{f.get('tp_size', f.get('tensor_parallel_size', 1))}" + (f" pp{f['pipeline_parallel_size']}" if f.get("pipeline_parallel_size") else "")
        extra = " ".join(f"{k}={f[k]}" for k in ("dtype", "kv_cache_dtype") if k in f)
        rows.append([la.name[:52], la.engine, la.version or "?", la.model, f"{par} {setting} {extra}".strip(), f"{la.kv_tokens:,}",
                     "refused" if err is None else f"{100 * err:+.1f} %", "yes" if ok else ("named: " + la.note[:40] if la.note else "no")])
    show_table("KV tokens planned from config.json alone vs printed by the server",
               ["launch", "engine", "version", "model", "setup", "printed", "err", f"within {BAND:.0%}"], rows)
    print(f"within {BAND:.0%}: {within}/{len(ls)} = {within / len(ls):.0%} (bar: {SHARE:.0%} of at least 15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
