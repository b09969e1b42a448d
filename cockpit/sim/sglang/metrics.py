"""`/metrics` in Prometheus text format with SGLang's metric names (needs --enable-metrics)."""

from __future__ import annotations

from typing import Any

from cockpit.sim.histogram import exposition
from cockpit.sim.sglang.config import SimConfig
from cockpit.sim.sglang.scheduler import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS

GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("token_usage", "The token usage."),
    ("num_used_tokens", "The number of used tokens."),
    ("num_retracted_reqs", "The number of retracted requests."),
    ("num_paused_reqs", "The number of paused requests by async weight sync."),
    ("utilization", "The utilization."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
)
COUNTERS = (
    ("prompt_tokens_total", "Number of prefill tokens processed."),
    ("generation_tokens_total", "Number of generation tokens processed."),
    ("cached_tokens_total", "Number of cached prompt tokens."),
    ("num_requests_total", "Number of requests processed."),
    ("num_aborted_requests_total", "Number of requests aborted."),
    ("num_retracted_requests_total", "Number of retracted requests."),
    ("cuda_graph_passes_total", "Number of forward passes using CUDA graph."),
)


# counters 0.5.23 creates with labels only at their first event (aborts, retractions)
LAZY_COUNTERS = ("num_aborted_requests_total", "num_retracted_requests_total")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _hist(name: str, help_: str, hist: dict[str, Any] | None, buckets: tuple[float, ...], labels: dict[str, str]) -> list[str]:
    hist = hist or {}
    return exposition(f"sglang:{name}", help_, buckets, hist.get("counts"), float(hist.get("sum") or 0.0), _labels(labels)[1:-1])


def render_metrics(cfg: SimConfig, stats: dict[str, Any], startup: dict[str, Any], started_wall: float) -> str:
    sched = {"engine_type": "unified", "model_name": cfg.served_model_name, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    tok = {"engine_type": "unified", "model_name": cfg.served_model_name}
    lines: list[str] = []
    used = float(stats.get("prompt_tokens_total", 0) or 0)
    cached = float(stats.get("cached_tokens_total", 0) or 0)
    values = dict(stats)
    values["cache_hit_rate"] = cached / used if used else 0.0
    values["utilization"] = values.get("token_usage", 0.0)
    values.setdefault("max_total_num_tokens", startup.get("token_capacity", 0))
    for name, help_ in GAUGES:
        lines += [f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} gauge"]
        lines.append(f"sglang:{name}{_labels(sched)} {float(values.get(name, 0) or 0)}")
    if cfg.new_format:
        extra = (
            ("kv_used_tokens", values.get("num_used_tokens", 0)),
            ("kv_available_tokens", max(0, int(startup.get("token_capacity", 0) or 0) - int(values.get("num_used_tokens", 0) or 0))),
            ("kv_evictable_tokens", 0),
            ("full_token_usage", values.get("token_usage", 0.0)),
            ("weight_memory_usage_gb", startup.get("weight", 0.0)),
            ("kv_cache_memory_usage_gb", startup.get("kvcache", 0.0)),
            ("startup_available_gpu_memory_gb", startup.get("startup_available", 0.0)),
            ("context_len", cfg.context_len),
            ("page_size", cfg.page_size),
            ("startup_time_seconds", startup.get("startup_time", 0.0)),
            ("spec_accept_length", 0.0),  # 0.5.23 exports it, 0.0, without speculative decoding too
        )
        for name, v in extra:
            lines += [f"# HELP sglang:{name} {name.replace('_', ' ')}", f"# TYPE sglang:{name} gauge"]
            lines.append(f"sglang:{name}{_labels(sched)} {float(v or 0)}")
        lines += ["# HELP sglang:graph_memory_usage_gb CUDA graph memory per phase", "# TYPE sglang:graph_memory_usage_gb gauge"]
        for phase in ("prefill", "decode"):
            lines.append(f"sglang:graph_memory_usage_gb{_labels({**sched, 'phase': phase})} {float(startup.get('graph_' + phase, 0.0) or 0)}")
    else:
        lines += ["# HELP sglang:engine_startup_time The time taken for the engine to start up.",
                  "# TYPE sglang:engine_startup_time gauge",
                  f"sglang:engine_startup_time{_labels(sched)} {float(startup.get('startup_time', 0.0) or 0)}"]
    for name, help_ in COUNTERS:
        base = name[: -len("_total")]
        lines += [f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} counter"]
        if cfg.new_format and name in LAZY_COUNTERS and not values.get(name):
            continue  # 0.5.23: a labelled counter has no sample before its first event (prometheus_client)
        lines.append(f"sglang:{name}{_labels(tok if base in ('prompt_tokens', 'generation_tokens', 'num_requests') else sched)} "
                     f"{float(values.get(name, 0) or 0)}")
        lines.append(f"sglang:{base}_created{_labels(tok if base in ('prompt_tokens', 'generation_tokens', 'num_requests') else sched)} {started_wall:.3f}")
    lines += _hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                   values.get("ttft"), TTFT_BUCKETS, tok)
    itl = values.get("itl") or {}
    if cfg.new_format and not itl.get("count"):
        # 0.5.23 observes it from a request's second output on (tokenizer_manager.py): none yet, no sample
        lines += ["# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.",
                  "# TYPE sglang:inter_token_latency_seconds histogram"]
    else:
        lines += _hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl,
                       ITL_BUCKETS, tok)
    lines += _hist("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                   values.get("e2e"), E2E_BUCKETS, tok)
    return "\n".join(lines) + "\n"
