"""The memory plan before launch against real SGLang start-up logs (tests/data/real/plan/sglang/).

    .venv/bin/python bench/plan_real_sglang.py          (a second or two; no GPU, no network)

Each case is made as bench/plan_accuracy.py's table 2 makes its plan: the model from its published
config (tests/data/models, safetensors headers synthesized by synth.py), the GPU's total memory,
and the flags the log's server args show, no calibration. Nothing else from the log reaches the plan.

Table 1 compares weights per rank, KV tokens and the headroom after graph capture (worst rank).
Table 2 splits the miss per term (GiB): P (free before weights), W, A = P − W, the KV pool, what
sits between the pool and `Memory pool end` (req_to_token + workspaces; the log shows only their
sum), graph memory, and the headroom. Table 3 is SGLang's arithmetic with the log's own P, A and
mfs, which isolates the formula from the estimates. Targets (issue 14): tokens within 3 %,
headroom within 1 GiB before calibration.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import show_table  # noqa: E402
from cockpit.backends import get_backend  # noqa: E402
from cockpit.backends.sglang.memory import default_mfs  # noqa: E402
from cockpit.backends.sglang.plan import cell_bytes, plan, req_to_token_gib, settings_from_flags  # noqa: E402
from cockpit.model.config import ModelConfigError, parse_config  # noqa: E402
from cockpit.model.plan import GpuFacts  # noqa: E402
from cockpit.model.weights import GIB, Tensor, index_from_headers  # noqa: E402
from tests.data.models import synth  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "real" / "plan" / "sglang"
# The plan needs a version to pick SGLang's defaults: the one the report states, else the one the
# yaml's plan block gives with its reason (a log dated before a release), else the project's first.
FALLBACK_VERSION = "0.5.9"


@dataclass
class Case:
    name: str
    doc: dict[str, Any]
    st: Any  # the RunState the backend's reader made of the log

    @property
    def p(self) -> dict[str, Any]:
        return dict(self.doc["plan"])

    def ranks(self) -> list[Any]:
        return list(self.st.ranks.values())

    def least(self, attr: str) -> float | None:
        vals = [getattr(r, attr) for r in self.ranks() if getattr(r, attr) is not None]
        return min(vals) if vals else None


def cases() -> list[Case]:
    out = []
    for yml in sorted(CORPUS.glob("*.yaml")):
        doc = yaml.safe_load(yml.read_text(encoding="utf-8"))
        out.append(Case(yml.stem, doc, get_backend("sglang").logs.read(yml.with_suffix(".log"))))
    return out


def tokens_of(c: Case) -> int | None:
    """The pool the log proves: max_total_num_tokens, else the KV line's #tokens (an excerpt cut
    before the scheduler's line; both print the same pool for a plain full-attention model)."""
    return c.st.max_total_num_tokens or next((r.kv_tokens for r in c.ranks() if r.kv_tokens), None)


def headroom_of(c: Case) -> float | None:
    """The free memory after capture the log proves: the worst rank's `Capture cuda graph end … avail mem`,
    else the `available_gpu_mem=` of TP0's `max_total_num_tokens` line (the same figure, one rank's; an
    abridged excerpt may keep only that line)."""
    least = c.least("avail_after_capture_gb")
    return least if least is not None else c.st.available_gpu_mem_gb


def version_of(c: Case) -> str:
    return str(c.doc.get("version") or c.p.get("version") or FALLBACK_VERSION)


def model_facts(c: Case) -> tuple[Any, Any]:
    name = c.p["model"]
    raw = synth.load_config(name)
    cfg = parse_config(raw, name, name=name)
    if c.p.get("context_length"):  # the checkpoint's config.json as the run had it (the yaml says why)
        cfg = dataclasses.replace(cfg, context_length=int(c.p["context_length"]))
    idx = index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)
    return cfg, idx


def make_plan(c: Case) -> tuple[Any, Any, Any]:
    cfg, idx = model_facts(c)
    s = settings_from_flags(c.p["flags"], version_of(c))
    return plan(cfg, idx, GpuFacts(float(c.p["gpu_total_gib"])), s), cfg, s


def f2(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def d2(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else f"{a - b:+.2f}"


def pct(a: float, b: float | None) -> str:
    return "—" if not b else f"{100 * (a - b) / b:+.1f} %"


def label(c: Case) -> str:
    p = c.p
    mfs = p["flags"].get("mem_fraction_static")
    return f"{p['model']} tp{p['flags'].get('tp_size', 1)} {p['gpu'].replace('NVIDIA ', '')} {mfs if mfs is not None else 'auto'}"


def table1(cs: list[Case]) -> tuple[list[list[str]], list[str]]:
    rows, refused = [], []
    for c in cs:
        try:
            mp, _cfg, _s = make_plan(c)
        except ModelConfigError as exc:
            refused.append(f"{c.name}: the plan refuses: {exc}")
            continue
        cur = mp.current
        w_log = c.least("weights_gb")
        head_log = headroom_of(c)
        tok_log = tokens_of(c)
        rows.append([c.name, label(c), f"{f2(mp.weights_gib_per_rank)}/{f2(w_log)}",
                     f"{cur.max_total_num_tokens:,}", f"{tok_log:,}" if tok_log else "—", pct(cur.max_total_num_tokens, tok_log),
                     f2(cur.headroom_after_capture_gib), f2(head_log), d2(cur.headroom_after_capture_gib, head_log)])
    return rows, refused


def table2(cs: list[Case]) -> list[list[str]]:
    rows = []
    for c in cs:
        try:
            mp, _cfg, _s = make_plan(c)
        except ModelConfigError:
            continue
        t = mp.terms
        cur = mp.current
        p_log, w_log = c.least("pre_load_avail_gb"), c.least("weights_gb")
        a_log, kv_log = c.least("after_weights_avail_gb"), c.least("kv_gb")
        pool_end_log, g_log = c.least("avail_before_capture_gb"), max((r.graph_gb for r in c.ranks() if r.graph_gb), default=None)
        # what sits between the pool and `Memory pool end`: plan's req_to_token only (workspaces come after it)
        between_plan = t["req_to_token_gib"]
        between_log = a_log - kv_log - pool_end_log if None not in (a_log, kv_log, pool_end_log) else None  # type: ignore[operator]
        graph_plan = t.get("graph_gib")
        rows.append([c.name, f"{f2(t['pre_load_avail_gib'])}/{f2(p_log)}", f"{f2(mp.weights_gib_per_rank)}/{f2(w_log)}",
                     f"{f2(t['after_weights_avail_gib'])}/{f2(a_log)}", f"{f2(cur.kv_gib)}/{f2(kv_log)}",
                     f"{f2(between_plan)}/{f2(between_log)}",
                     f"{f2(graph_plan)}/{f2(g_log)}", f"{int(t['cuda_graph_max_bs'])}", f"{int(t['context_length'])}"])
    return rows


def table3(cs: list[Case]) -> list[list[str]]:
    """SGLang's arithmetic with the log's own P, A and mfs: tokens and the free memory at `Memory pool end`."""
    rows = []
    for c in cs:
        p_log, a_log = c.least("pre_load_avail_gb"), c.least("after_weights_avail_gb")
        tok_log = tokens_of(c)
        if p_log is None or a_log is None or not tok_log:
            continue
        try:
            cfg, _ = model_facts(c)
        except ModelConfigError:
            continue
        s = settings_from_flags(c.p["flags"], version_of(c))
        mfs = s.mfs
        mfs_note = ""
        if mfs is None:
            mfs = default_mfs(c.p["gpu_total_gib"] * 1024, version=s.version, tp=s.tp, chunked_prefill_size=s.chunked_prefill_size,
                              cuda_graph_max_bs=s.cuda_graph_max_bs).mfs
            mfs_note = " (auto, plan's)"
        cell = cell_bytes(cfg, s)
        kv = a_log - p_log * (1 - mfs)
        tok = math.floor(kv * GIB / cell)
        ctx = int(c.st.context_len or s.context_length or cfg.context_length)
        pool_end = p_log * (1 - mfs) - req_to_token_gib(tok, ctx, s)
        seen = c.least("avail_before_capture_gb")
        rows.append([c.name, f"{mfs:g}{mfs_note}", f"{tok:,}", f"{tok_log:,}", pct(tok, tok_log), f2(pool_end), f2(seen), d2(pool_end, seen)])
    return rows


show = show_table


def main() -> int:
    cs = cases()
    rows, refused = table1(cs)
    show("1. the plan before launch (model config + GPU total + the log's flags, no calibration) vs the real log",
         ["case", "setup", "W plan/log", "tokens", "log", "err", "headroom", "log (worst)", "err GiB"], rows)
    for line in refused:
        print("  " + line)
    show("2. per term, plan/log in GiB (least over ranks; graph: the largest); between = A − KV − `Memory pool end`",
         ["case", "P", "W", "A", "KV", "between (req_to_token)", "graph", "graph bs", "context"], table2(cs))
    show("3. SGLang's arithmetic with the log's own P, A and mfs (the formula alone)",
         ["case", "mfs", "tokens", "log", "err", "pool end", "log", "err"], table3(cs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
