"""`sgl_kernel.mamba`: imported by SGLang's linear-attention backends (Qwen3-Next, Kimi linear …)."""

from sgl_kernel._missing import linear_attention_only

causal_conv1d_fn_cpu = linear_attention_only("mamba.causal_conv1d_fn_cpu")
causal_conv1d_update_cpu = linear_attention_only("mamba.causal_conv1d_update_cpu")
chunk_gated_delta_rule_cpu = linear_attention_only("mamba.chunk_gated_delta_rule_cpu")
