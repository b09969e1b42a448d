"""Simulated GPUs and models: the numbers SGLang's memory lifecycle is built from.

All memory here is GiB (2**30 bytes) unless a name says otherwise, because that is what SGLang's
log calls "GB". The presets are tuned so that the story in DESIGN.md comes out of the formulas,
not out of hard-coded log text: Kimi-K2.5 on 8 x RTX PRO 6000 gives P = 94.6 GiB on the worst
rank (TP3), W = 71.82 GiB (the published checkpoint as SGLang's TP8 sharding holds it, docs/PLAN.md),
~2.05 GiB of attention workspace after the KV pool and 3.75 GiB of CUDA graphs at batch size 512, hence ~0.82 GiB free after capture at mfs 0.93 and ~5.5 at 0.88.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class GpuPreset:
    key: str
    name: str  # what nvidia-smi would print, marked as simulated
    total_mib: float  # memory.total as nvidia-smi reports it
    context_gib: float  # CUDA context + allocator bookkeeping at process start
    init_gib: float  # what `Init torch distributed` adds (NCCL / custom all-reduce buffers)
    tflops: float  # relative speed used for batch timings (H100 = 1.0)

    @property
    def total_gib(self) -> float:
        return self.total_mib / MIB_PER_GIB


GPUS: dict[str, GpuPreset] = {
    p.key: p
    for p in (
        GpuPreset("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)", 97887, 0.45, 0.46, 0.8),
        GpuPreset("h100", "NVIDIA H100 80GB HBM3 (simulated)", 81559, 0.47, 0.97, 1.0),
        GpuPreset("h200", "NVIDIA H200 (simulated)", 143771, 0.50, 0.97, 1.2),
        GpuPreset("a100-80gb", "NVIDIA A100-SXM4-80GB (simulated)", 81920, 0.45, 0.97, 0.4),
        GpuPreset("b200", "NVIDIA B200 (simulated)", 183359, 0.55, 1.05, 2.0),
    )
}

# Extra memory (GiB) the CUDA context / NCCL take on a given GPU index: "small jitter", with GPU 3
# a little heavier than its peers so that TP3 is the worst rank, as in the story.
GPU_INDEX_EXTRA_GIB = (0.00, 0.02, 0.01, 0.08, 0.03, 0.00, 0.02, 0.01)


def gpu_index_extra_gib(index: int) -> float:
    if index < len(GPU_INDEX_EXTRA_GIB):
        return GPU_INDEX_EXTRA_GIB[index]
    return ((index * 37) % 5) / 100.0


@dataclass(frozen=True)
class ModelPreset:
    key: str
    model_type: str  # config.json model_type
    architecture: str  # `type=` in `Load weight end`
    attention: str  # "MLA" or "MHA"
    num_layers: int
    kv_heads: int  # MHA: total KV heads (divided over attention-TP ranks, at least 1 per rank)
    head_dim: int  # MHA: per-head K dim (V has the same)
    kv_lora_rank: int  # MLA
    qk_rope_head_dim: int  # MLA
    kv_bytes: int  # bytes per element in the KV cache (bf16 = 2)
    weights_total_gib: float  # all weights; a rank holds weights_total_gib / (tp * pp)
    hidden_size: int
    context_len: int
    shards: int  # safetensors files, for the tqdm bar
    load_s_per_shard: float  # sim seconds per shard
    quant: str | None  # 0.5.23 `quant=…` text in `Load weight end`, None for bf16
    pool_extra_gib: float  # req_to_token and other small pools, allocated with the KV pool
    workspace_gib: float  # attention/MoE workspaces, taken between `Memory pool end` and capture
    graph_fixed_gib: float  # CUDA graph memory = fixed + per_bs * max_bs
    graph_per_bs_gib: float
    capture_s: float  # decode capture time at bs 512 (sim seconds)
    # transient memory a prefill needs: act_fixed + act_per_token * new_tokens (GiB)
    act_fixed_gib: float
    act_per_token_mib: float
    prefill_tok_per_s: float  # prefill speed, tokens per sim second, on an H100-class GPU
    decode_step_ms: float  # decode iteration: base + per_req * running
    decode_per_req_ms: float

    def cell_bytes(self, attn_tp: int) -> int:
        """KV bytes per token per rank (reference §4)."""
        if self.attention == "MLA":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.num_layers * self.kv_bytes
        heads = max(1, self.kv_heads // max(1, attn_tp))
        return heads * (self.head_dim * 2) * self.num_layers * self.kv_bytes

    def weights_gib(self, tp: int, pp: int) -> float:
        return self.weights_total_gib / max(1, tp * pp)

    def graph_gib(self, max_bs: int) -> float:
        return self.graph_fixed_gib + self.graph_per_bs_gib * max_bs

    def act_gib(self, new_tokens: int) -> float:
        return self.act_fixed_gib + self.act_per_token_mib * new_tokens / MIB_PER_GIB


MODELS: dict[str, ModelPreset] = {
    m.key: m
    for m in (
        ModelPreset(
            key="kimi-k2.5",
            model_type="kimi_k25",
            architecture="DeepseekV3ForCausalLM",
            attention="MLA",
            num_layers=61,
            kv_heads=1,
            head_dim=0,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            kv_bytes=2,
            weights_total_gib=71.82 * 8,
            hidden_size=7168,
            context_len=262144,
            shards=64,
            load_s_per_shard=1.52,
            quant=None,
            pool_extra_gib=0.0,
            workspace_gib=2.05,
            graph_fixed_gib=0.35,
            graph_per_bs_gib=3.40 / 512,
            capture_s=13.98,
            act_fixed_gib=0.10,
            act_per_token_mib=0.20,
            prefill_tok_per_s=9000.0,
            decode_step_ms=16.0,
            decode_per_req_ms=0.10,
        ),
        ModelPreset(
            key="llama-3.1-70b",
            model_type="llama",
            architecture="LlamaForCausalLM",
            attention="MHA",
            num_layers=80,
            kv_heads=8,
            head_dim=128,
            kv_lora_rank=0,
            qk_rope_head_dim=0,
            kv_bytes=2,
            weights_total_gib=16.49 * 8,
            hidden_size=8192,
            context_len=131072,
            shards=30,
            load_s_per_shard=1.37,
            quant=None,
            pool_extra_gib=0.04,
            workspace_gib=0.29,
            graph_fixed_gib=0.11,
            graph_per_bs_gib=1.60 / 512,
            capture_s=18.44,
            act_fixed_gib=0.15,
            act_per_token_mib=0.80,
            prefill_tok_per_s=19000.0,
            decode_step_ms=22.0,
            decode_per_req_ms=0.08,
        ),
        ModelPreset(
            key="qwen3-235b-fp8",
            model_type="qwen3_moe",
            architecture="Qwen3MoeForCausalLM",
            attention="MHA",
            num_layers=94,
            kv_heads=4,
            head_dim=128,
            kv_lora_rank=0,
            qk_rope_head_dim=0,
            kv_bytes=2,
            weights_total_gib=29.6 * 8,
            hidden_size=4096,
            context_len=40960,
            shards=48,
            load_s_per_shard=1.1,
            quant="quant=fp8, fmt=e4m3",
            pool_extra_gib=0.03,
            workspace_gib=0.9,
            graph_fixed_gib=0.20,
            graph_per_bs_gib=2.10 / 512,
            capture_s=16.2,
            act_fixed_gib=0.12,
            act_per_token_mib=0.45,
            prefill_tok_per_s=15000.0,
            decode_step_ms=24.0,
            decode_per_req_ms=0.10,
        ),
        ModelPreset(
            key="llama-3.1-8b",
            model_type="llama",
            architecture="LlamaForCausalLM",
            attention="MHA",
            num_layers=32,
            kv_heads=8,
            head_dim=128,
            kv_lora_rank=0,
            qk_rope_head_dim=0,
            kv_bytes=2,
            weights_total_gib=14.96,
            hidden_size=4096,
            context_len=131072,
            shards=4,
            load_s_per_shard=1.6,
            quant=None,
            pool_extra_gib=0.03,
            workspace_gib=0.25,
            graph_fixed_gib=0.08,
            graph_per_bs_gib=0.45 / 512,
            capture_s=9.5,
            act_fixed_gib=0.10,
            act_per_token_mib=0.25,
            prefill_tok_per_s=45000.0,
            decode_step_ms=7.0,
            decode_per_req_ms=0.03,
        ),
    )
}


def guess_model(model_path: str | None) -> str:
    """The preset a --model-path most likely means, for when --sim-model is not given."""
    name = (model_path or "").lower()
    if "llama" in name and "8b" in name:
        return "llama-3.1-8b"
    if "llama" in name:
        return "llama-3.1-70b"
    if "qwen" in name:
        return "qwen3-235b-fp8"
    return "kimi-k2.5"
