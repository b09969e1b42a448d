"""SGLang's Prometheus names for the serving figures (cockpit/core/serving.py), prefix `sglang:`.

Exported only with `--enable-metrics`. Newest name first, then older ones (a rename falls back; a
figure none of them exports is "not reported"). From `python/sglang/srt/metrics/collector.py`:
- `inter_token_latency_seconds` was `time_per_output_token_seconds` in releases before 0.4.6;
- retractions are SGLang's preemptions (`num_retracted_requests_total`; older releases only had the
  `num_retracted_reqs` gauge, which is not a counter and is not used for a rate);
- the prefix cache is one gauge, `cache_hit_rate` (a fraction); speculative decoding reports its
  mean accepted length, `spec_accept_length`.
"""

from __future__ import annotations

SERVING_METRICS: dict[str, tuple[str, ...]] = {
    "generation_tokens": ("generation_tokens_total",),
    "prompt_tokens": ("prompt_tokens_total",),
    "running": ("num_running_reqs",),
    "waiting": ("num_queue_reqs",),
    "kv_usage": ("token_usage",),
    "preemptions": ("num_retracted_requests_total",),
    "requests_finished": ("num_requests_total",),
    "ttft": ("time_to_first_token_seconds",),
    "itl": ("inter_token_latency_seconds", "time_per_output_token_seconds"),
    "e2e": ("e2e_request_latency_seconds",),
    "prefix_cache_hit_rate": ("cache_hit_rate",),
    "spec_accept_length": ("spec_accept_length",),
    "max_total_num_tokens": ("max_total_num_tokens",),  # the KV pool's size in tokens (a gauge)
}
