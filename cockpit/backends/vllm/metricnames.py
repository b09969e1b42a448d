"""vLLM's Prometheus names for the serving figures (cockpit/core/serving.py), prefix `vllm:`.

Newest name first, then the names older releases used (a rename falls back, a figure none of
them exports is "not reported"). Checked against vLLM 0.32's `vllm/v1/metrics/loggers.py` and
`vllm/v1/spec_decode/metrics.py`; prometheus_client appends `_total` to counters:
- `kv_cache_usage_perc` (a fraction despite the name) was `gpu_cache_usage_perc` before v0.10;
- `inter_token_latency_seconds` was `time_per_output_token_seconds` before v0.10;
- the prefix-cache counters were `gpu_prefix_cache_{hits,queries}_total` before v0.10.
"""

from __future__ import annotations

SERVING_METRICS: dict[str, tuple[str, ...]] = {
    "generation_tokens": ("generation_tokens_total",),
    "prompt_tokens": ("prompt_tokens_total",),
    "running": ("num_requests_running",),
    "waiting": ("num_requests_waiting",),
    "kv_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc"),
    "preemptions": ("num_preemptions_total",),
    "requests_finished": ("request_success_total",),
    "ttft": ("time_to_first_token_seconds",),
    "itl": ("inter_token_latency_seconds", "time_per_output_token_seconds"),
    "e2e": ("e2e_request_latency_seconds",),
    # one observation per request, (E2E − TTFT) / (tokens − 1): the time per output token bench compares
    "tpot": ("request_time_per_output_token_seconds",),
    "prefix_cache_hits": ("prefix_cache_hits_total", "gpu_prefix_cache_hits_total"),
    "prefix_cache_queries": ("prefix_cache_queries_total", "gpu_prefix_cache_queries_total"),
    "spec_accepted_tokens": ("spec_decode_num_accepted_tokens_total",),
    "spec_draft_tokens": ("spec_decode_num_draft_tokens_total",),
}
