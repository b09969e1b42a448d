"""How long a batch takes on a simulated GPU: the throughput model every simulated engine shares.

Pure arithmetic (no I/O, no engine words), so that SGLang's scheduler (`scheduler.py`) and the
vLLM mode run the same physics, and bench/tune.py can ask it what a setting can reach.

- Prefill: one forward pass costs a fixed part (every weight is read once, whatever the batch) plus
  each new token's share of the linear layers, plus attention over the context before it. Chunked
  prefill therefore pays the fixed part once per chunk: small chunks cost more per token.
- Decode: one iteration costs a fixed part, a part per running request, and reading every running
  request's KV cache (memory bandwidth). A batch larger than the biggest captured CUDA graph (or
  with graphs off) runs eagerly, EAGER_FACTOR slower (kernel-launch overhead).
- Concurrency is not decided here: the scheduler admits requests against the KV pool and
  --max-running-requests; the memory a prefill needs (activations) is checked by the ranks.

Constants are documented in docs/SIMULATOR.md ("Throughput model").
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit.sim.presets import GpuPreset, ModelPreset

EAGER_FACTOR = 1.3
# memory bandwidth of a simulated GPU per unit of its `tflops` (H100 = 1.0): bytes/s read by decode
# attention and by the weight sweep of every forward pass
BYTES_PER_S_PER_TFLOPS = 2.0e12
MIN_PREFILL_PASS_S = 0.015
# a new token's attention over the context before it costs this fraction of its linear-layer cost
# per ATTN_CONTEXT_TOKENS of context (prefix and earlier tokens of the same chunk)
ATTN_CONTEXT_TOKENS = 32768.0


@dataclass(frozen=True)
class PerfModel:
    prefill_tok_per_s: float  # linear-layer throughput of prefill, tokens per simulated second
    prefill_pass_s: float  # fixed cost of one prefill forward pass
    decode_step_s: float  # fixed cost of one decode iteration
    decode_per_req_s: float  # per running request
    decode_per_kv_token_s: float  # per KV-cache token read by the batch's attention
    attn_context_tokens: float = ATTN_CONTEXT_TOKENS  # 0: attention cost left out
    eager_factor: float = EAGER_FACTOR

    def prefill_s(self, new_tokens: int, context_before: int = 0) -> float:
        """A prefill pass over `new_tokens` tokens whose context already holds `context_before`
        tokens (summed over the batch's requests: Σ new_i · (prefix_i + new_i / 2) for attention)."""
        linear = new_tokens / self.prefill_tok_per_s
        attn = 0.0
        if self.attn_context_tokens > 0:
            attn = context_before / self.attn_context_tokens / self.prefill_tok_per_s
        return self.prefill_pass_s + linear + attn

    def decode_step(self, running: int, kv_tokens: int, graph: bool) -> float:
        s = self.decode_step_s + self.decode_per_req_s * running + self.decode_per_kv_token_s * kv_tokens
        return s if graph else s * self.eager_factor


def perf_model(model: ModelPreset, gpu: GpuPreset, *, tp: int = 1, pp: int = 1, attn_tp: int | None = None) -> PerfModel:
    """The model's timings on this GPU (presets give H100-class figures; `tflops` scales them)."""
    speed = gpu.tflops
    bw = BYTES_PER_S_PER_TFLOPS * speed
    weights_bytes = model.weights_gib(tp, pp) * 2**30
    return PerfModel(
        prefill_tok_per_s=model.prefill_tok_per_s * speed,
        prefill_pass_s=max(MIN_PREFILL_PASS_S, weights_bytes / bw),
        decode_step_s=model.decode_step_ms / 1000 / speed,
        decode_per_req_s=model.decode_per_req_ms / 1000 / speed,
        decode_per_kv_token_s=model.cell_bytes(attn_tp or tp) / bw,
    )


def attention_context(chunks: list[tuple[int, int]]) -> int:
    """Σ new · (prefix + new / 2) over a batch's (prefix tokens, new tokens) pairs."""
    return int(sum(new * (prefix + new / 2) for prefix, new in chunks))
