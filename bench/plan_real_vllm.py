"""The vLLM memory plan before launch against real start-up logs (tests/data/real/plan/vllm/).

    .venv/bin/python bench/plan_real_vllm.py          (a second or two; no GPU, no network)

For every case the plan is made as bench/plan_accuracy.py table 4 makes it: the model's published
config (tests/data/models), the GPU's total and the flags the log's server args show, the server
version — nothing measured, no calibration. Then, beside what the log printed:

1. weights per rank, KV cache GiB, KV tokens (err %), free memory after start-up (err GiB) — the
   free memory exists only where the log prints vLLM's per-rank summary (`Free memory on device
   (F₀/T) … Current kv cache memory in use …`, 0.11+); older logs show KV, weights and graph size.
2. where a miss comes from, term by term: the log's non-KV budget `⌈u·T⌉ − W − KV` (what vLLM took
   for non-torch memory, the profile run's activation peak and, from 0.20, the graph estimate) beside
   the plan's N + A (+ Ĝ), the plan's batch (the activation peak's size) beside the batch the log
   names, the graph pool, and the log's own KV GiB through the plan's bytes per token (the model half
   alone: does the plan turn the same GiB into the same tokens?), and — a diagnosis only, never a plan
   before launch — the token error had the plan been told the batch size the log names.

Targets (issue 14): tokens within 3 %, free memory within 1 GiB, before calibration.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import show_table  # noqa: E402
from cockpit.backends import get_backend  # noqa: E402
from cockpit.backends.vllm import plan as vplan  # noqa: E402
from cockpit.model.config import ModelConfigError, parse_config  # noqa: E402
from cockpit.model.plan import GpuFacts  # noqa: E402
from cockpit.model.weights import GIB, Tensor, index_from_headers  # noqa: E402
from tests.data.models import synth  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "real" / "plan" / "vllm"
_RX_BATCH = re.compile(r"max_num_batched_tokens=(\d+)")


@dataclass(frozen=True)
class Case:
    name: str
    log: Path
    doc: dict[str, Any]


@dataclass
class Outcome:
    """One case: the plan's figures and the log's, None where one side has none."""

    case: Case
    refused: str | None = None  # why the plan could not be made
    w_plan: float | None = None
    w_log: float | None = None
    kv_plan: float | None = None
    kv_log: float | None = None
    tok_plan: int | None = None
    tok_log: int | None = None
    free_plan: float | None = None
    free_log: float | None = None
    graph_plan: float | None = None
    graph_log: float | None = None
    non_kv_plan: float | None = None  # N + A (+ Ĝ): what the plan takes from ⌈u·T⌉ besides W and KV
    non_kv_log: float | None = None  # ⌈u·T⌉ − W − KV from the log's own W and KV
    act_plan: float | None = None
    batch_plan: int | None = None
    batch_log: int | None = None
    tok_from_log_kv: int | None = None  # the log's KV GiB through the plan's bytes per token
    tok_batch_from_log: int | None = None  # a diagnosis, not a plan: the same plan told the log's batch size
    # the per-rank summary's own terms (worst rank), where the log prints it: weights + non-torch, the
    # profile run's activation peak, the graph pool; the plan's W + N, A and G beside them
    consumed_log: float | None = None
    act_log: float | None = None
    consumed_plan: float | None = None

    @property
    def tok_err_pct(self) -> float | None:
        if self.tok_plan is None or not self.tok_log:
            return None
        return 100.0 * (self.tok_plan - self.tok_log) / self.tok_log

    @property
    def free_err(self) -> float | None:
        if self.free_plan is None or self.free_log is None:
            return None
        return self.free_plan - self.free_log


def cases() -> list[Case]:
    out = []
    for yml in sorted(CORPUS.glob("*.yaml")):
        out.append(Case(yml.stem, yml.with_suffix(".log"), yaml.safe_load(yml.read_text(encoding="utf-8"))))
    return out


def model_facts(name: str) -> tuple[Any, Any]:
    raw = synth.load_config(name)
    cfg = parse_config(raw, name, name=name)
    idx = index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)
    return cfg, idx


def _log_figure(st: Any, doc: dict[str, Any], key: str) -> float | None:
    """The worst (smallest) rank's figure as the reader got it, else the yaml's `printed` figure
    (logs whose prefixes name no rank, e.g. Ray workers)."""
    vals = []
    for r in st.ranks.values():
        v = getattr(r, key, None)
        if v is None:
            v = r.figures.get(key)
        if v is not None:
            vals.append(float(v))
    if vals:
        return min(vals)
    printed = doc.get("printed") or {}
    return float(printed[key]) if key in printed else None


def measure(case: Case) -> Outcome:
    doc, plan_doc = case.doc, case.doc["plan"]
    st = get_backend("vllm").logs.read(case.log)
    o = Outcome(case)
    o.w_log = _log_figure(st, doc, "weights_gb")
    o.kv_log = _log_figure(st, doc, "kv_gb")
    o.graph_log = _log_figure(st, doc, "graph_gb")
    o.tok_log = st.max_total_num_tokens
    o.free_log = st.min_headroom_gb
    worst = st.worst_rank
    if worst is not None:
        figs = st.ranks[worst].figures
        o.consumed_log = figs.get("consumed_gb")
        o.act_log = figs.get("peak_activation_gb")
        if figs.get("cudagraph_gb") is not None:
            o.graph_log = float(figs["cudagraph_gb"])
    text = case.log.read_text(encoding="utf-8", errors="replace")
    batches = _RX_BATCH.findall(text)
    o.batch_log = int(batches[-1]) if batches else None
    t = float(plan_doc["gpu_total_gib"])
    flags = dict(plan_doc["flags"])
    try:
        cfg, idx = model_facts(plan_doc["model"])
        s = vplan.settings_from_flags(flags, str(doc.get("version") or "") or None)
        mp = vplan.plan(cfg, idx, GpuFacts(t, name=plan_doc.get("gpu")), s)
    except ModelConfigError as e:
        o.refused = str(e)
        return o
    cur = mp.current
    assert cur is not None
    o.w_plan = mp.weights_gib_per_rank
    o.kv_plan = cur.kv_gib
    o.tok_plan = cur.max_total_num_tokens if cur.starts else 0
    o.free_plan = cur.headroom_after_capture_gib
    terms = mp.terms
    o.graph_plan = terms.get("graph_gib")
    o.act_plan = terms.get("activation_peak_gib")
    o.batch_plan = int(terms["max_num_batched_tokens"]) if "max_num_batched_tokens" in terms else None
    o.non_kv_plan = terms.get("non_torch_gib", 0.0) + (o.act_plan or 0.0) + terms.get("graph_estimate_gib", 0.0)
    o.consumed_plan = mp.weights_gib_per_rank + terms.get("non_torch_gib", 0.0)
    u = float(flags["gpu_memory_utilization"]) if "gpu_memory_utilization" in flags else None
    if u is not None and o.w_log is not None and o.kv_log is not None:
        o.non_kv_log = math.ceil(u * t * GIB) / GIB - o.w_log - o.kv_log
    if o.batch_log is not None and o.batch_log != o.batch_plan:
        told = vplan.plan(cfg, idx, GpuFacts(t, name=plan_doc.get("gpu")), vplan.settings_from_flags({**flags, "max_num_batched_tokens": o.batch_log},
                                                                          str(doc.get("version") or "") or None)).current
        assert told is not None
        o.tok_batch_from_log = told.max_total_num_tokens
    if o.kv_log is not None:
        o.tok_from_log_kv = vplan.kv_tokens(o.kv_log, vplan.cell_bytes(cfg, s), int(s.block_size or vplan.DEFAULT_BLOCK))
    return o


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def _label(c: Case) -> str:
    p = c.doc["plan"]
    f = p["flags"]
    return f"{c.name.removeprefix('dennislee22-vLLM-benchmarking-')} ({p['model']} tp{f.get('tensor_parallel_size', 1)} " \
           f"u={f.get('gpu_memory_utilization', 'default')}, {c.doc.get('version', '?')})"


def table1(outs: list[Outcome]) -> list[list[str]]:
    rows = []
    for o in outs:
        if o.refused:
            rows.append([_label(o.case), f"plan refused: {o.refused}", *["—"] * 8])
            continue
        rows.append([
            _label(o.case), f"{_f(o.w_plan)}/{_f(o.w_log, '{:.4g}')}", f"{_f(o.kv_plan)}/{_f(o.kv_log)}",
            _f(o.tok_plan, "{:,}"), _f(o.tok_log, "{:,}"), _f(o.tok_err_pct, "{:+.1f} %"),
            _f(o.free_plan), "(not in log)" if o.free_log is None else _f(o.free_log), _f(o.free_err, "{:+.2f}"),
        ])
    return rows


def table2(outs: list[Outcome]) -> list[list[str]]:
    rows = []
    for o in outs:
        if o.refused:
            continue
        w_err = None if o.w_plan is None or o.w_log is None else o.w_plan - o.w_log
        nk_err = None if o.non_kv_plan is None or o.non_kv_log is None else o.non_kv_plan - o.non_kv_log
        model_err = None
        if o.tok_from_log_kv is not None and o.tok_log:
            model_err = 100.0 * (o.tok_from_log_kv - o.tok_log) / o.tok_log
        told = o.tok_batch_from_log if o.tok_batch_from_log is not None else o.tok_plan
        told_err = None if told is None or not o.tok_log else 100.0 * (told - o.tok_log) / o.tok_log
        rows.append([
            _label(o.case), _f(w_err, "{:+.2f}"), f"{_f(o.non_kv_plan)}/{_f(o.non_kv_log)}", _f(nk_err, "{:+.2f}"),
            f"{_f(o.batch_plan, '{:,}')}/{_f(o.batch_log, '{:,}')}", _f(o.act_plan),
            f"{_f(o.graph_plan)}/{_f(o.graph_log)}", f"{_f(o.tok_from_log_kv, '{:,}')} ({_f(model_err, '{:+.2f} %')})",
            _f(told_err, "{:+.1f} %"),
        ])
    return rows


def table3(outs: list[Outcome]) -> list[list[str]]:
    """Only the cases whose log prints the per-rank summary: free after start-up = F₀ − (W + N) − KV − G,
    term by term (worst rank), so a headroom miss is traced to the term that made it."""
    rows = []
    for o in outs:
        if o.refused or o.free_log is None:
            continue
        d_wn = None if o.consumed_plan is None or o.consumed_log is None else o.consumed_plan - o.consumed_log
        d_kv = None if o.kv_plan is None or o.kv_log is None else o.kv_plan - o.kv_log
        d_g = None if o.graph_plan is None or o.graph_log is None else o.graph_plan - o.graph_log
        note = o.case.doc.get("known_headroom_miss")
        verdict = "—" if o.free_err is None else ("within 1 GiB" if abs(o.free_err) <= 1.0 else "MISS") + (f" (named: {note})" if note else "")
        rows.append([
            _label(o.case), f"{_f(o.consumed_plan)}/{_f(o.consumed_log)}", _f(d_wn, "{:+.2f}"),
            f"{_f(o.act_plan)}/{_f(o.act_log)}", f"{_f(o.kv_plan)}/{_f(o.kv_log)}", _f(d_kv, "{:+.2f}"),
            f"{_f(o.graph_plan)}/{_f(o.graph_log)}", _f(d_g, "{:+.2f}"), _f(o.free_err, "{:+.2f}"), verdict,
        ])
    return rows


show = show_table


def main() -> int:
    outs = [measure(c) for c in cases()]
    show("1. the plan before launch (model config + GPU total + the log's flags, no calibration) beside the real log",
         ["case", "W GiB plan/log", "KV GiB plan/log", "tokens", "log", "err", "free after start-up", "log (worst)", "err GiB"],
         table1(outs))
    show("2. where the misses come from: ΔW, the non-KV budget ⌈u·T⌉ − W − KV (plan N + A [+ Ĝ] / log), the batch the "
         "activation peak is sized for (plan/log), the plan's A, the graph pool (plan/log), the log's KV GiB through the "
         "plan's bytes per token, and the tokens' error had the plan known the log's batch size (a diagnosis, not a plan)",
         ["case", "ΔW", "non-KV plan/log", "Δ non-KV", "batch plan/log", "A plan", "graph plan/log", "tokens from log KV (err)",
          "tok err, log's batch"],
         table2(outs))
    rows3 = table3(outs)
    if rows3:
        show("3. free memory after start-up, term by term (logs that print vLLM's per-rank summary; worst rank): "
             "W + N plan/log, the activation peak plan/log (handed back, so it moves the KV, not the headroom, once "
             "the budget is full), KV GiB plan/log, the graph pool plan/log, and the headroom's error",
             ["case", "W+N plan/log", "Δ W+N", "A plan/log", "KV plan/log", "Δ KV", "graph plan/log", "Δ graph",
              "Δ free", "verdict (1 GiB)"], rows3)
    tok = [o.tok_err_pct for o in outs if o.tok_err_pct is not None]
    free = [o.free_err for o in outs if o.free_err is not None]
    within = sum(1 for e in tok if abs(e) <= 3.0)
    free_within = sum(1 for e in free if abs(e) <= 1.0)
    print(f"tokens within 3 %: {within}/{len(tok)}; free memory after start-up within 1 GiB: {free_within}/{len(free)}"
          + ("" if free else " (no log in this corpus prints vLLM's per-rank free-memory summary)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
