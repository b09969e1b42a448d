"""Serving figures from the engines' Prometheus text (cockpit/core/serving.py) and the metric
names of both simulators against each engine's table."""

from __future__ import annotations

from cockpit.backends import get_backend
from cockpit.core.serving import ServingWindow, parse_sample, quantile

TTFT = (0.01, 0.1, 1.0)


def vllm_text(gen: float, prompt: float, ttft: tuple[int, int, int, int], *, running: int = 1,
              old_names: bool = False) -> str:
    """vLLM's exposition: counters with `_total`, label sets per engine, cumulative buckets."""
    kv = "gpu_cache_usage_perc" if old_names else "kv_cache_usage_perc"
    itl = "time_per_output_token_seconds" if old_names else "inter_token_latency_seconds"
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0',
        f"# TYPE vllm:{kv} gauge",
        f'vllm:{kv}{{engine="0",model_name="m"}} 0.25',
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}',
        'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9',
        "# TYPE vllm:prompt_tokens counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}',
        "# TYPE vllm:num_preemptions counter",
        'vllm:num_preemptions_total{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:request_success counter",
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0',
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0',
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    acc = 0
    for le, c in zip((*TTFT, "+Inf"), ttft, strict=True):
        acc += c
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {acc}')
    lines += [f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {acc}',
              'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.0',
              f"# TYPE vllm:{itl} histogram",
              f'vllm:{itl}_bucket{{engine="0",le="0.01",model_name="m"}} 0',
              f'vllm:{itl}_bucket{{engine="0",le="+Inf",model_name="m"}} 0',
              f'vllm:{itl}_count{{engine="0",model_name="m"}} 0',
              f'vllm:{itl}_sum{{engine="0",model_name="m"}} 0']
    return "\n".join(lines) + "\n"


def window(*texts: tuple[float, str]) -> ServingWindow:
    b = get_backend("vllm")
    w = ServingWindow()
    for at, text in texts:
        w.add(parse_sample(text, b.metrics.prefix(), b.metrics.serving(), at))
    return w


def test_rates_gauges_and_sums_over_label_sets() -> None:
    fig = window((0.0, vllm_text(100, 50, (0, 0, 0, 0))), (2.0, vllm_text(140, 60, (0, 0, 0, 0)))).figures()
    assert fig is not None
    assert fig["gen_tok_s"] == 20.0 and fig["prompt_tok_s"] == 5.0
    assert fig["running"] == 1 and fig["waiting"] == 2 and fig["kv_usage_pct"] == 25.0
    assert fig["preemptions_per_min"] == 0.0
    assert fig["counters"]["requests_finished"] == 7.0  # summed over finished reasons
    assert fig["counters"]["generation_tokens"] == 140.0


def test_a_figure_the_engine_does_not_export_is_not_reported_never_zero() -> None:
    fig = window((0.0, vllm_text(1, 1, (0, 0, 0, 0)))).figures()
    assert fig is not None
    assert fig["gen_tok_s"] is None  # one scrape: no interval yet
    assert fig["e2e_ms"] is None and "e2e" in fig["not_reported"]
    assert fig["prefix_cache_hit_pct"] is None and "prefix_cache_hits" in fig["not_reported"]
    assert fig["spec_acceptance_pct"] is None


def test_renamed_metrics_fall_back_to_the_old_names() -> None:
    fig = window((0.0, vllm_text(1, 1, (0, 0, 0, 0), old_names=True))).figures()
    assert fig is not None
    assert fig["kv_usage_pct"] == 25.0 and fig["names"]["kv_usage"] == "gpu_cache_usage_perc"
    assert fig["names"]["itl"] == "time_per_output_token_seconds"


def test_latency_quantiles_come_from_the_bucket_deltas_of_the_window() -> None:
    # before the window: 100 fast requests; in it: 10 requests between 0.1 and 1 s
    fig = window((0.0, vllm_text(1, 1, (100, 0, 0, 0))), (30.0, vllm_text(2, 2, (100, 0, 10, 0)))).figures()
    assert fig is not None
    assert fig["ttft_ms"] == {"p50": 550.0, "p99": 991.0, "count": 10.0}
    assert fig["itl_ms"] == {"p50": None, "p99": None, "count": 0.0}  # exported, nothing observed


def test_scrapes_older_than_the_window_leave() -> None:
    w = window(*((float(t), vllm_text(t, t, (t, 0, 0, 0))) for t in range(0, 200, 10)))
    assert w.samples[-1].at - w.samples[0].at <= 60.0


def test_quantile_interpolates_inside_the_bucket_as_prometheus_does() -> None:
    assert quantile(0.5, [(1.0, 0.0), (2.0, 10.0), (float("inf"), 10.0)]) == 1.5
    assert quantile(0.99, [(1.0, 0.0), (float("inf"), 5.0)]) == 1.0  # top bucket: its lower bound
    assert quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None


def test_the_vllm_simulator_exports_vllm_names_for_every_figure_it_simulates() -> None:
    from cockpit.sim.vllm.http import render_metrics

    class Sim:
        class cfg:
            served_model_name = "m"
            args: dict[str, str] = {}
            util = 0.9

    b = get_backend("vllm")
    s = parse_sample(render_metrics(Sim(), None), b.metrics.prefix(), b.metrics.serving(), 0.0)  # type: ignore[arg-type]
    for figure in ("generation_tokens", "prompt_tokens", "running", "waiting", "kv_usage", "preemptions",
                   "requests_finished", "prefix_cache_hits", "prefix_cache_queries"):
        assert figure in s.values, figure
    assert set(s.hists) == {"ttft", "itl", "e2e"}
    assert s.names["itl"] == "inter_token_latency_seconds"


def test_the_sglang_simulator_exports_sglang_names() -> None:
    from cockpit.sim.sglang.config import load_config
    from cockpit.sim.sglang.metrics import render_metrics

    cfg = load_config(["--model-path", "/models/Kimi-K2.5", "--tp", "8", "--trust-remote-code", "--enable-metrics"])
    b = get_backend("sglang")
    s = parse_sample(render_metrics(cfg, {"generation_tokens_total": 5}, {"token_capacity": 100}, 0.0),
                     b.metrics.prefix(), b.metrics.serving(), 0.0)
    for figure in ("generation_tokens", "prompt_tokens", "running", "waiting", "kv_usage", "preemptions",
                   "requests_finished", "prefix_cache_hit_rate"):
        assert figure in s.values, figure
    assert s.values["generation_tokens"] == 5.0
    assert set(s.hists) == {"ttft", "itl", "e2e"} and s.names["itl"] == "inter_token_latency_seconds"
