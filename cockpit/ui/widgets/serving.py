"""The engine's own serving figures (its /metrics, windowed by cockpit/core/serving.py) on one line
above the throughput and KV plots; hidden until the supervisor has read them."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static


def _fig(v: Any, unit: str = "") -> str:
    return "not reported" if v is None else f"{v:,.1f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def _lat(d: Any) -> str:
    if not d:
        return "not reported"
    if d.get("p50") is None:
        return "none in the window"
    return f"{d['p50']:,.0f}/{d['p99']:,.0f} ms"


def serving_line(sv: dict[str, Any]) -> str:
    return (f"/metrics: gen {_fig(sv.get('gen_tok_s'), ' tok/s')} · prompt {_fig(sv.get('prompt_tok_s'), ' tok/s')}"
            f" · run {_fig(sv.get('running'))} wait {_fig(sv.get('waiting'))} · KV {_fig(sv.get('kv_usage_pct'), ' %')}"
            f" · preempt {_fig(sv.get('preemptions_per_min'), '/min')} · TTFT p50/p99 {_lat(sv.get('ttft_ms'))}"
            f" · ITL {_lat(sv.get('itl_ms'))}")


class ServingFigures(Static):
    DEFAULT_CSS = "ServingFigures { height: 1; text-wrap: nowrap; text-overflow: ellipsis; display: none; }"

    def show(self, serving: dict[str, Any] | None) -> None:
        self.display = serving is not None
        if serving is not None:
            self.update(serving_line(serving))
