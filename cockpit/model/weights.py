"""Weight bytes: read exactly from the checkpoint, then split over the ranks the way SGLang shards them.

Where the bytes come from (no tensor data is ever read):
- `model.safetensors.index.json`: `metadata.total_size` (the exact sum) and `weight_map` (names);
- else each `.safetensors` file's header: 8-byte little-endian length, then JSON with each tensor's
  dtype, shape and data offsets — exact bytes per tensor.

How a rank's share is computed (SGLang's parallel linear layers; DP attention shrinks the attention
TP group to tp / dp):
- routed experts: 1/tp of their bytes (EP splits the experts, the rest of TP splits each expert:
  either way 1/tp);
- embeddings and lm_head: vocabulary-parallel, 1/tp;
- q / o / kv_b projections and dense MLPs: 1/attn_tp or 1/tp;
- k / v projections: 1/min(attn_tp, kv_heads) (with fewer KV heads than ranks, heads are copied);
- MLA's q_a / kv_a projections, norms, the router, vision towers: whole on every rank;
- multi-token-prediction layers (index ≥ num_hidden_layers): not loaded unless speculative decoding
  uses them.
A tensor whose name matches none of these is counted whole on every rank (the cautious side) and
reported, never silently split.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cockpit.model.config import ModelConfig, ModelConfigError

GIB = 2**30
HEADER_CAP = 100 * 2**20  # safetensors itself refuses headers above 100 MB

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}


MAX_TENSOR_BYTES = 1 << 45  # 32 TiB: no single tensor of any checkpoint comes near
MAX_TENSORS = 1 << 20


@dataclass(frozen=True)
class Tensor:
    name: str
    nbytes: int
    dtype: str | None = None  # the stored dtype ("BF16", "F32", "I32", …) when known


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_safetensors_header(head: bytes, where: str) -> list[Tensor]:
    """Tensors listed by a safetensors file's first bytes (8-byte length + JSON header). Anything
    that is not a well-formed header (a non-object, offsets that run backwards or are not whole
    numbers, absurd sizes) is a ModelConfigError naming the file and tensor, never a crash."""
    if len(head) < 8:
        raise ModelConfigError(f"{where}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", head[:8])
    if n > HEADER_CAP:
        raise ModelConfigError(f"{where}: header length {n} exceeds safetensors' 100 MB limit; not a safetensors file?")
    if len(head) < 8 + n:
        raise ModelConfigError(f"{where}: header cut short ({len(head) - 8} of {n} bytes)")
    try:
        meta = json.loads(head[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelConfigError(f"{where}: header is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ModelConfigError(f"{where}: header is a JSON {type(meta).__name__}, not an object of tensors")
    if len(meta) > MAX_TENSORS:
        raise ModelConfigError(f"{where}: header lists {len(meta):,} tensors (at most {MAX_TENSORS:,})")
    out = []
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ModelConfigError(f"{where}: tensor {name[:120]!r} is described by a {type(info).__name__}, not an object")
        dtype = info.get("dtype")
        offs = info.get("data_offsets")
        if offs is not None:
            if not (isinstance(offs, list) and len(offs) == 2 and _whole(offs[0]) and _whole(offs[1])):
                raise ModelConfigError(f"{where}: tensor {name[:120]!r} has data_offsets {str(offs)[:80]}, not two whole numbers")
            size = offs[1] - offs[0]
            if offs[0] < 0 or size < 0:
                raise ModelConfigError(f"{where}: tensor {name[:120]!r} has data_offsets {offs} (negative or backwards); a corrupt header")
        else:
            elem = SAFETENSORS_DTYPE_BYTES.get(str(dtype))
            if elem is None:
                raise ModelConfigError(f"{where}: tensor {name[:120]!r} has dtype {str(dtype)[:40]!r} and no data_offsets")
            shape = info.get("shape")
            if not isinstance(shape, list) or not all(_whole(d) and d >= 0 for d in shape) or len(shape) > 16:
                raise ModelConfigError(f"{where}: tensor {name[:120]!r} has shape {str(shape)[:80]}, not a list of sizes")
            count = 1
            for d in shape:
                count = min(count * d, MAX_TENSOR_BYTES + 1)
            size = int(count * elem)
        if size > MAX_TENSOR_BYTES:
            raise ModelConfigError(f"{where}: tensor {name[:120]!r} claims {size:,} bytes; a corrupt header")
        out.append(Tensor(str(name), size, str(dtype) if isinstance(dtype, str) else None))
    return out


@dataclass(frozen=True)
class WeightIndex:
    """What the checkpoint says about its weights: the exact total, and names (with bytes if known)."""

    total_bytes: int
    source: str  # "model.safetensors.index.json total_size" or "safetensors headers (N files)"
    names: tuple[str, ...] = ()
    tensors: tuple[Tensor, ...] = ()  # exact per-tensor bytes (headers); empty for index-only

    @property
    def estimated(self) -> bool:
        """From config.json's shapes (cockpit.model.estimate), not from the checkpoint's files."""
        return self.source.startswith("config.json")

    @property
    def kind(self) -> str:
        """`weights_source` as the plan's JSON says it: "config" or "safetensors"."""
        return "config" if self.estimated else "safetensors"


def index_from_summary(summary: dict, where: str) -> WeightIndex:
    """WeightIndex from probe.summarise_index's answer (total_size, collapsed names, max layer)."""
    total = summary.get("total_size") if isinstance(summary, dict) else None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not 0 < total < MAX_TENSOR_BYTES * 64:
        raise ModelConfigError(f"{where}: metadata.total_size is {str(total)[:40]}, not a size in bytes")
    names = [str(n) for n in summary.get("names") or []]
    max_layer = summary.get("max_layer", -1)
    if not _whole(max_layer) or max_layer > 1 << 20:
        raise ModelConfigError(f"{where}: the index names a layer {str(max_layer)[:40]}")
    if max_layer >= 0:
        names.append(f"model.layers.{int(summary['max_layer'])}.")  # the deepest layer the index names
    return WeightIndex(int(total), "model.safetensors.index.json total_size", tuple(names))


def index_from_headers(tensors: Iterable[Tensor], files: int) -> WeightIndex:
    ts = tuple(tensors)
    return WeightIndex(sum(t.nbytes for t in ts), f"safetensors headers ({files} file{'s' if files != 1 else ''})",
                       tuple(t.name for t in ts), ts)


# ---- sharding ------------------------------------------------------------------------------------

_LAYER = re.compile(r"layers\.(\d+)\.")
_VISION = ("vision_tower", "visual.", "vision_model", "mm_projector", "multi_modal_projector", "vision_embed", "image_newline")


def category(name: str, cfg: ModelConfig) -> str:
    """Which sharding rule a tensor follows (see the module docstring)."""
    m = _LAYER.search(name)
    if any(v in name for v in _VISION):
        return "replicated"
    if m and int(m.group(1)) >= cfg.layers:
        return "mtp"
    if ".experts." in name or name.endswith(".experts") or "block_sparse_moe.experts" in name:
        return "expert"
    if "embed_tokens" in name or "lm_head" in name or name.endswith("wte.weight"):
        return "vocab"
    if re.search(r"(q_a_proj|kv_a_proj_with_mqa|q_a_layernorm|kv_a_layernorm|norm|\.gate\.|\.router\.|sinks|e_score_correction)", name):
        return "replicated"
    if re.search(r"\.(k_proj|v_proj)\.", name):
        return "kv_proj"
    if re.search(r"\.(q_proj|q_b_proj|kv_b_proj|o_proj|qkv_proj|query_key_value|dense)\.", name):
        return "attn"
    if re.search(r"\.(gate_proj|up_proj|down_proj|gate_up_proj|fc1|fc2|w1|w2|w3)\.", name) or "shared_expert" in name:
        return "mlp"
    return "unknown"


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    dp: int = 1  # data-parallel replicas
    ep: int = 1
    pp: int = 1
    dp_attention: bool = False  # attention TP group = tp / dp

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.dp) if self.dp_attention else self.tp


def share(cat: str, cfg: ModelConfig, par: Parallel) -> float:
    tp = par.tp
    if cat in ("expert", "vocab", "mlp"):
        return 1 / tp
    if cat == "attn":
        return 1 / par.attn_tp
    if cat == "kv_proj":
        return 1 / max(1, min(par.attn_tp, cfg.num_kv_heads))
    if cat == "mtp":
        return 0.0
    return 1.0  # replicated, unknown


def _param_groups(cfg: ModelConfig) -> dict[str, tuple[float, str]]:
    """Parameter counts per category from config.json, with a representative module name each
    (for quantization ignore lists). Used only to split an index's exact total_size."""
    h, L = cfg.hidden_size, cfg.layers
    groups: dict[str, tuple[float, str]] = {}
    vocab = cfg.vocab_size * h * (1 if cfg.tie_word_embeddings else 2)
    groups["vocab"] = (vocab, "lm_head")
    if cfg.attention == "mla":
        rope, nope = cfg.qk_rope_head_dim or 0, cfg.qk_nope_head_dim or 0
        kvl = cfg.kv_lora_rank or 0
        nh = cfg.num_attention_heads
        repl = h * (kvl + rope) + kvl
        split = kvl * nh * (nope + cfg.v_head_dim) + nh * cfg.v_head_dim * h
        if cfg.q_lora_rank:
            repl += h * cfg.q_lora_rank + cfg.q_lora_rank
            split += cfg.q_lora_rank * nh * (nope + rope)
        else:
            split += h * nh * (nope + rope)
        groups["attn"] = (split * L, "model.layers.0.self_attn.o_proj.weight")
        groups["replicated"] = (repl * L + 2 * h * L, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight")
        groups["kv_proj"] = (0, "model.layers.0.self_attn.k_proj.weight")
    else:
        q = h * cfg.num_attention_heads * cfg.head_dim + cfg.num_attention_heads * cfg.v_head_dim * h
        kv = h * cfg.num_kv_heads * (cfg.head_dim + cfg.v_head_dim)
        groups["attn"] = (q * L, "model.layers.0.self_attn.o_proj.weight")
        groups["kv_proj"] = (kv * L, "model.layers.0.self_attn.k_proj.weight")
        groups["replicated"] = (2 * h * L, "model.layers.0.input_layernorm.weight")
    dense_layers = L - cfg.moe_layers
    mlp = dense_layers * 3 * h * cfg.intermediate_size + cfg.moe_layers * 3 * h * cfg.shared_expert_intermediate_size
    groups["mlp"] = (mlp, "model.layers.0.mlp.down_proj.weight")
    groups["expert"] = (cfg.moe_layers * cfg.experts * 3 * h * cfg.moe_intermediate_size, "model.layers.1.mlp.experts.0.down_proj.weight")
    router = cfg.moe_layers * cfg.experts * h
    groups["replicated"] = (groups["replicated"][0] + router, groups["replicated"][1])
    return groups


@dataclass(frozen=True)
class WeightSplit:
    """Weights one rank loads, with the arithmetic behind it."""

    total_bytes: int  # the checkpoint's exact total
    per_rank_bytes: float
    by_category: dict[str, float]  # bytes per rank per category
    source: str
    unknown_bytes: int = 0  # tensors counted whole because no rule matched them
    exact_split: bool = True  # False: total_size split by config proportions (index without headers)

    @property
    def per_rank_gib(self) -> float:
        return self.per_rank_bytes / GIB


_CAST_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}


def loaded_bytes(t: Tensor, load_bytes: int | None) -> float:
    """A tensor's bytes once loaded: an unquantized float weight is cast to the launch's dtype
    (`--dtype`), quantized tensors and their scales keep what they store."""
    per = _CAST_DTYPES.get(t.dtype or "")
    if load_bytes is None or per is None or per == load_bytes or "scale" in t.name or "correction" in t.name:
        return float(t.nbytes)
    return t.nbytes / per * load_bytes


def split_weights(cfg: ModelConfig, index: WeightIndex, par: Parallel, *, load_mtp: bool = False,
                  load_bytes: int | None = None) -> WeightSplit:
    """Bytes of weights one rank holds under `par` (the rank with the most: pipeline stages are
    taken as even, so PP divides the per-layer bytes). `load_bytes`: bytes per element of the
    launch's dtype (config.ModelConfig.load_dtype), which unquantized float weights are cast to."""
    by_cat: dict[str, float] = {}
    unknown = 0
    if index.tensors:
        for t in index.tensors:
            cat = category(t.name, cfg)
            if cat == "mtp" and load_mtp:
                cat = "expert" if ".experts." in t.name else "replicated"
            if cat == "unknown":
                unknown += t.nbytes
            by_cat[cat] = by_cat.get(cat, 0.0) + loaded_bytes(t, load_bytes) * share(cat, cfg, par)
        exact = True
    else:
        groups = _param_groups(cfg)
        base = 2 if cfg.dtype_bytes == 2 else cfg.dtype_bytes
        est = {}
        cast = {}  # the share of each category's bytes the launch's dtype recasts
        for cat, (params, module) in groups.items():
            quantized = cat != "vocab" and cfg.quant.covers(module)
            per = cfg.quant.bytes_per_param() if quantized else base
            est[cat] = params * per
            cast[cat] = 0.0 if quantized else 1.0
        has_mtp = any((m := _LAYER.search(n)) and int(m.group(1)) >= cfg.layers for n in index.names)
        if has_mtp and cfg.nextn_layers:
            # a DeepSeek-style MTP layer: one MoE layer plus its own embedding, head and projection
            layer_bytes = sum(est.get(c, 0.0) for c in ("attn", "replicated", "expert", "mlp", "kv_proj")) / max(1, cfg.layers)
            est["mtp"] = cfg.nextn_layers * (layer_bytes + (2 * cfg.vocab_size * cfg.hidden_size + 2 * cfg.hidden_size**2) * base)
        scale = index.total_bytes / max(1.0, sum(est.values()))
        extra = index.total_bytes - sum(est.values())
        if extra > 0 and any(v in n for n in index.names for v in _VISION):
            # config.json's text model does not count the vision tower the names show: it is the
            # rest of total_size, and SGLang keeps it whole on every rank
            est["replicated"] = est.get("replicated", 0.0) + extra
            scale = 1.0
        elif scale > 1.03:
            # the config explains the checkpoint to within a few percent; a larger gap (tensors the
            # counting misses) is counted whole on every rank, the cautious side
            est["unknown"] = extra
            unknown = int(extra)
            scale = 1.0
        ratio = (load_bytes / base) if load_bytes else 1.0
        for cat, b in est.items():
            sh = 0.0 if cat == "mtp" and not load_mtp else share(cat, cfg, par) if cat != "mtp" else 1 / par.tp
            f = cast.get(cat, 1.0 if cat in ("mtp", "replicated", "unknown") else 0.0)
            by_cat[cat] = b * scale * sh * (1 - f + f * ratio)
        exact = False
    if par.pp > 1:
        # layers split over stages; embeddings sit on the first stage, lm_head on the last
        by_cat = {c: (b if c == "vocab" else b / par.pp) for c, b in by_cat.items()}
    return WeightSplit(index.total_bytes, sum(by_cat.values()), by_cat, index.source, unknown, exact)
