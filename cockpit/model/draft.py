"""A speculative-decoding draft's weights per rank, engine-neutral: the checkpoint's own
multi-token-prediction layers (DeepSeek-style `num_nextn_predict_layers`), or a separate draft
model (EAGLE heads, a standalone small model). Which one an algorithm loads, what it shares with
the target and when it is allocated are each engine's rules (cockpit/backends/*/plan.py).
"""

from __future__ import annotations

import re

from cockpit.model.config import ModelConfig
from cockpit.model.weights import (
    _LAYER,
    Parallel,
    WeightIndex,
    category,
    loaded_bytes,
    share,
    split_weights,
)

# an MTP layer's own embedding and output head: the engines load the target's instead
_OWN_HEAD = re.compile(r"(embed_tokens|shared_head\.head)")


def mtp_layer_bytes(cfg: ModelConfig, index: WeightIndex, par: Parallel, *, load_bytes: int | None = None) -> float:
    """Bytes per rank of the checkpoint's MTP layers (layer numbers ≥ num_hidden_layers), sharded
    as the decoder layers are, without their own embedding and head. 0 when there are none."""
    if not cfg.nextn_layers:
        return 0.0
    if index.tensors:
        total = 0.0
        for t in index.tensors:
            m = _LAYER.search(t.name)
            if not m or int(m.group(1)) < cfg.layers or _OWN_HEAD.search(t.name):
                continue
            cat = category(_LAYER.sub("layers.0.", t.name, count=1), cfg)
            total += loaded_bytes(t, load_bytes) * share(cat, cfg, par)
        return total
    # an index without headers: one MTP layer weighs about one decoder layer of the target
    split = split_weights(cfg, index, par, load_bytes=load_bytes)
    per_layer = sum(b for c, b in split.by_category.items() if c not in ("vocab", "mtp")) / max(1, cfg.layers)
    return per_layer * cfg.nextn_layers


def draft_model_bytes(cfg: ModelConfig, index: WeightIndex, par: Parallel, *, load_bytes: int | None = None,
                      shares: tuple[str, ...] = ("embed_tokens", "lm_head")) -> float:
    """Bytes per rank of a separate draft model, less the tensors it takes from the target
    (`shares`: name fragments, e.g. EAGLE's embedding and head)."""
    if index.tensors:
        kept = tuple(t for t in index.tensors if not any(s in t.name for s in shares))
        return split_weights(cfg, WeightIndex(sum(t.nbytes for t in kept), index.source, tuple(t.name for t in kept), kept),
                             par, load_bytes=load_bytes).per_rank_bytes
    split = split_weights(cfg, index, par, load_bytes=load_bytes)
    vocab = split.by_category.get("vocab", 0.0)
    shared = vocab if "lm_head" in shares else vocab / (1 if cfg.tie_word_embeddings else 2)
    return split.per_rank_bytes - (shared if shares else 0.0)
