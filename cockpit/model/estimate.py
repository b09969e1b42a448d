"""Weight bytes from config.json alone: what an operator has before the download.

`estimate_index(cfg, raw)` lists the checkpoint's tensors the way its family stores them — one entry
per layer and projection (the experts of a layer summed into one), named as the published
checkpoints name them, so that weights.split_weights shards them by the same rules as real
safetensors headers — and sizes each from the shapes in config.json and the storage format in
`quantization_config`:

- dense decoders (Llama, Mistral, Qwen2/2.5/3, Gemma 2/3, Phi-3): embeddings, lm_head unless
  `tie_word_embeddings`, q/k/v/o (biases where the family has them: Qwen2's q/k/v, `attention_bias`,
  gpt-oss), Qwen3/Gemma3 q/k norms, gated MLPs (gate/up/down) or plain ones (fc1/fc2), 2 norms per
  layer (Gemma 2/3: 4);
- MoE (Mixtral, Qwen-MoE, DeepSeek-V2/V3, Kimi, gpt-oss): routed experts, router (+ DeepSeek-V3's
  correction bias), shared experts (`n_shared_experts` × `moe_intermediate_size`, or Qwen's
  `shared_expert_intermediate_size` with its gate), the first `first_k_dense_replace` layers dense;
  MLA's q_a/q_b/kv_a/kv_b projections and their norms; DeepSeek's multi-token-prediction layers
  (`num_nextn_predict_layers`: one more MoE layer with its own embedding, head and eh_proj), listed
  under their layer numbers ≥ num_hidden_layers so the split leaves them out unless speculative
  decoding loads them;
- vision towers from `vision_config` (a ViT of that depth and width, its patch embedding and the
  projector into the language model), whole on every rank;
- storage: unquantized tensors in `torch_dtype`; quantized linear layers as the format stores them
  with its scales (fp8 per tensor or per 128×128 block with fp32 scales, AWQ/GPTQ packed int4 with
  fp16 group scales and packed zeros (+ GPTQ's g_idx), compressed-tensors pack-/float-/nvfp4-pack-
  quantized, modelopt FP8/NVFP4, mxfp4 experts with one scale byte per 32); embeddings, lm_head and
  routers stay unquantized, as every published quantized checkpoint keeps them.

Each tensor carries its stored dtype: an unquantized float tensor ("BF16", "F16", "F32") is what
the launch's `--dtype` recasts (weights.split_weights), a quantized one ("Q") keeps its bytes.
Estimated, not read: docs/PLAN.md gives how far this lands from published checkpoints' sizes.
"""

from __future__ import annotations

import math
import time
from typing import Any

from cockpit.model.config import MAX_EXPERTS, MAX_LAYERS, ModelConfig, ModelConfigError, _int
from cockpit.model.weights import Tensor, WeightIndex

SOURCE = "config.json (estimated)"
MATCH_BUDGET_S = 2.0  # all ignore-list matching of one estimate
_FLOAT_NAME = {2: "BF16", 4: "F32", 1: "F8_E4M3"}
BLOCK_KEY = "weight_block_size"  # quantization_config's block of FP8 scales ([rows, cols]), as checkpoints write it
# families whose MLP is two plain matrices (fc1/fc2), not the gated gate/up/down
_PLAIN_MLP = ("phi", "gpt2", "gpt_bigcode", "starcoder2", "opt", "falcon", "gpt_neox", "bloom")


def _text(raw: dict[str, Any]) -> dict[str, Any]:
    t = raw.get("text_config")
    return {**raw, **t} if isinstance(t, dict) else raw


class _Quant:
    """Bytes of one quantized linear layer (out × in) as its format stores it, scales included."""

    def __init__(self, cfg: ModelConfig, raw: dict[str, Any], where: str):
        q = raw.get("quantization_config") or _text(raw).get("quantization_config") or {}
        self.q: dict[str, Any] = q if isinstance(q, dict) else {}
        self.method = cfg.quant.method
        self.bits = cfg.quant.bits
        self.group = cfg.quant.group_size
        self.where = where
        block = self.q.get(BLOCK_KEY)
        self.block: tuple[int, int] | None = None
        if isinstance(block, list) and len(block) == 2:
            self.block = (_int(block[0], BLOCK_KEY, where), _int(block[1], BLOCK_KEY, where))
        self.ct = self._ct_scheme() if self.method == "compressed-tensors" else {}

    def _ct_scheme(self) -> dict[str, Any]:
        groups = self.q.get("config_groups") or {}
        for g in groups.values() if isinstance(groups, dict) else []:
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict):
                return {**w, "format": str(self.q.get("format") or g.get("format") or "")}
        return {"format": str(self.q.get("format") or "")}

    def nbytes(self, out: int, inp: int) -> float:
        n = out * inp
        m = self.method
        if m == "fp8":
            if self.block:
                return n + math.ceil(out / self.block[0]) * math.ceil(inp / self.block[1]) * 4
            return n + 8  # per-tensor weight and input scales
        if m in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
            g = self.group or inp
            groups = math.ceil(inp / g)
            b = n * self.bits / 8 + groups * out * 2 + groups * out * self.bits / 8  # packed weight, fp16 scales, packed zeros
            if m.startswith("gptq"):
                b += inp * 4  # g_idx
            return b
        if m == "mxfp4":
            return n / 2 + n / 32
        if m == "modelopt":
            return n / 2 + n / 16 + 8 if self.bits == 4 else n + 8
        if m == "compressed-tensors":
            return self._ct_bytes(out, inp)
        if m == "bitsandbytes":
            if self.bits != 4:
                return n + out * 4  # int8 weight, one fp32 scale per row (SCB)
            if self.q.get("bnb_4bit_use_double_quant"):
                return n / 2 + n / 64 + n / 64 / 256 * 4  # packed 4 bit, uint8 absmax per 64, fp32 per 256 of those
            return n / 2 + n / 64 * 4  # packed 4 bit, fp32 absmax per 64
        g = self.group or inp
        return n * self.bits / 8 + math.ceil(inp / g) * out * 2

    def _ct_bytes(self, out: int, inp: int) -> float:
        s = self.ct
        n = out * inp
        fmt = s.get("format", "")
        bits = self.bits
        if "nvfp4" in fmt or (bits == 4 and str(s.get("type")) == "float"):
            return n / 2 + n / 16 + 8  # packed fp4, fp8 scale per 16, two global scales
        strategy = str(s.get("strategy") or ("group" if self.group else "channel"))
        if strategy == "group" and self.group:
            scales = out * math.ceil(inp / self.group)
        elif strategy == "block" and isinstance(s.get("block_structure"), list) and len(s["block_structure"]) == 2:
            bo, bi = (_int(x, "block_structure", self.where) for x in s["block_structure"])
            scales = math.ceil(out / bo) * math.ceil(inp / bi)
        elif strategy == "tensor":
            scales = 1
        else:
            scales = out
        scale_bytes = 4 if strategy in ("block", "tensor") else 2
        b = n * bits / 8 + scales * scale_bytes
        if fmt == "pack-quantized":
            b += 8  # weight_shape
        if s.get("symmetric") is False:
            b += scales * bits / 8  # packed zero points
        return b


def estimate_index(cfg: ModelConfig, raw: dict[str, Any]) -> WeightIndex:
    """The checkpoint's tensors as config.json describes them (see the module docstring)."""
    ts = estimate_tensors(cfg, raw)
    return WeightIndex(round(sum(t.nbytes for t in ts)), SOURCE, tuple(t.name for t in ts), tuple(ts))


def estimate_tensors(cfg: ModelConfig, raw: dict[str, Any]) -> list[Tensor]:
    where = "config.json"
    c = _text(raw)
    fb = cfg.dtype_bytes
    fdt = _FLOAT_NAME.get(fb, "BF16")
    quant = _Quant(cfg, raw, where) if cfg.quant.method != "none" else None
    out: list[Tensor] = []
    H, V, L = cfg.hidden_size, cfg.vocab_size, cfg.layers
    mt = cfg.model_type.lower()

    def flt(name: str, elems: float) -> None:
        out.append(Tensor(name, round(elems * fb), fdt))

    deadline = time.monotonic() + MATCH_BUDGET_S

    def covered(module: str) -> bool:
        # every match is bounded (config._check_pattern); the deadline bounds their number
        if time.monotonic() > deadline:
            raise ModelConfigError(f"{where}: matching quantization_config's ignore list against the model's modules "
                                   f"took more than {MATCH_BUDGET_S:g} s; not a list the plan can use")
        return cfg.quant.covers(module)

    def lin(name: str, o: int, i: int, bias: bool = False) -> None:
        if quant is not None and covered(name + ".weight"):
            out.append(Tensor(name + ".weight", round(quant.nbytes(o, i)), "Q"))
        else:
            flt(name + ".weight", o * i)
        if bias:
            flt(name + ".bias", o)

    def experts(name: str, n: int, o: int, i: int, bias: bool = False) -> None:
        """n experts' `name` projections (o × i each) as one entry."""
        probe = name.replace(".experts.", ".experts.0.") + ".weight"
        if quant is not None and covered(probe):
            out.append(Tensor(name + ".weight", round(n * quant.nbytes(o, i)), "Q"))
        else:
            flt(name + ".weight", n * o * i)
        if bias:
            flt(name + ".bias", n * o)

    flt("model.embed_tokens.weight", V * H)
    if not cfg.tie_word_embeddings:
        flt("lm_head.weight", V * H)
    flt("model.norm.weight", H)

    gemma = mt.startswith(("gemma2", "gemma3"))  # four norms per layer (Gemma 1 has two)
    qk_norm = "qwen3" in mt or mt.startswith("gemma3") or mt.startswith("olmo2")
    qkv_bias = bool(c.get("attention_bias")) or bool(c.get("qkv_bias")) or mt.startswith("qwen2")
    # Llama-style attention_bias covers o_proj too; Qwen-style (and MiMo) biases only q/k/v
    o_bias = bool(c.get("attention_bias")) and not (mt.startswith("qwen") or mt == "mimo")
    gptoss = mt == "gpt_oss"
    plain_mlp = mt in _PLAIN_MLP
    # MoE layout fields, bounded like parse_config bounds them (a dense config may carry them too)
    first_dense = _int(c.get("first_k_dense_replace") or 0, "first_k_dense_replace", where, 0, MAX_LAYERS)
    freq = _int(c.get("moe_layer_freq") or c.get("decoder_sparse_step") or 1, "moe_layer_freq", where, 1, MAX_LAYERS)
    only = c.get("mlp_only_layers") or []
    dense_only = {x for x in only if isinstance(x, int)} if isinstance(only, list) else set()
    n_shared = _int(c.get("n_shared_experts") or 0, "n_shared_experts", where, 0, MAX_EXPERTS)
    qwen_shared = _int(c.get("shared_expert_intermediate_size") or 0, "shared_expert_intermediate_size", where, 0)
    nh, kvh, hd, vd = cfg.num_attention_heads, cfg.num_kv_heads, cfg.head_dim, cfg.v_head_dim

    def layer(i: int) -> None:
        p = f"model.layers.{i}."
        a = p + "self_attn."
        flt(p + "input_layernorm.weight", H)
        flt(p + "post_attention_layernorm.weight", H)
        if gemma:
            flt(p + "pre_feedforward_layernorm.weight", H)
            flt(p + "post_feedforward_layernorm.weight", H)
        if cfg.attention == "mla":
            rope, nope, kvl = cfg.qk_rope_head_dim or 0, cfg.qk_nope_head_dim or 0, cfg.kv_lora_rank or 0
            if cfg.q_lora_rank:
                lin(a + "q_a_proj", cfg.q_lora_rank, H)
                flt(a + "q_a_layernorm.weight", cfg.q_lora_rank)
                lin(a + "q_b_proj", nh * (nope + rope), cfg.q_lora_rank)
            else:
                lin(a + "q_proj", nh * (nope + rope), H)
            lin(a + "kv_a_proj_with_mqa", kvl + rope, H)
            flt(a + "kv_a_layernorm.weight", kvl)
            lin(a + "kv_b_proj", nh * (nope + vd), kvl)
            lin(a + "o_proj", H, nh * vd)
        else:
            lin(a + "q_proj", nh * hd, H, qkv_bias or gptoss)
            lin(a + "k_proj", kvh * hd, H, qkv_bias or gptoss)
            lin(a + "v_proj", kvh * vd, H, qkv_bias or gptoss)
            lin(a + "o_proj", H, nh * vd, o_bias or gptoss)
            if qk_norm:
                flt(a + "q_norm.weight", hd)
                flt(a + "k_norm.weight", hd)
            if gptoss:
                flt(a + "sinks", nh)
        m = p + "mlp."
        moe = cfg.is_moe and (i >= L or (i >= first_dense and i % max(1, freq) == 0 and i not in dense_only))
        if not moe:
            inter = cfg.intermediate_size or cfg.moe_intermediate_size
            if plain_mlp:
                lin(m + "fc1", inter, H, True)
                lin(m + "fc2", H, inter, True)
            else:
                for proj, o, i_ in (("gate_proj", inter, H), ("up_proj", inter, H), ("down_proj", H, inter)):
                    lin(m + proj, o, i_)
            return
        E, Im = cfg.experts, cfg.moe_intermediate_size
        flt(m + "gate.weight", E * H)
        if gptoss:
            flt(m + "gate.bias", E)
        if c.get("topk_method") == "noaux_tc":
            out.append(Tensor(m + "gate.e_score_correction_bias", E * 4, "F32"))
        if gptoss:
            experts(m + "experts.gate_up_proj", E, 2 * Im, H, True)
            experts(m + "experts.down_proj", E, H, Im, True)
        else:
            for proj, o, i_ in (("gate_proj", Im, H), ("up_proj", Im, H), ("down_proj", H, Im)):
                experts(m + "experts." + proj, E, o, i_)
        shared = n_shared * Im or qwen_shared
        if shared:
            sp = m + ("shared_experts." if n_shared else "shared_expert.")
            for proj, o, i_ in (("gate_proj", shared, H), ("up_proj", shared, H), ("down_proj", H, shared)):
                lin(sp + proj, o, i_)
            if qwen_shared and not n_shared:
                flt(m + "shared_expert_gate.weight", H)

    for i in range(L):
        layer(i)
    own_head = mt.startswith(("deepseek", "kimi", "glm4_moe"))  # DeepSeek-style MTP layers carry their own embedding and head
    for k in range(cfg.nextn_layers):
        i = L + k
        layer(i)
        p = f"model.layers.{i}."
        if own_head:
            flt(p + "embed_tokens.weight", V * H)
            flt(p + "shared_head.head.weight", V * H)
        flt(p + "shared_head.norm.weight", H)
        flt(p + "enorm.weight", H)
        flt(p + "hnorm.weight", H)
        lin(p + "eh_proj", H, 2 * H)
    out += _vision(raw, cfg, fb, fdt, where)
    return out


def _vision(raw: dict[str, Any], cfg: ModelConfig, fb: int, fdt: str, where: str) -> list[Tensor]:
    """A vision tower of vision_config's shape: ViT blocks, patch (and position) embeddings and the
    projector into the language model (all unquantized, whole on every rank)."""
    vc = raw.get("vision_config")
    if not isinstance(vc, dict) or not vc:
        return []
    w = f"{where} vision_config"

    def get(*keys: str, default: Any = None) -> Any:
        for k in keys:
            if vc.get(k) is not None:
                return vc[k]
        return default

    h = get("embed_dim", "hidden_size", "width")  # Qwen2-VL: embed_dim is the ViT's, hidden_size the merger's output
    depth = get("num_hidden_layers", "depth", "layers")
    if h is None or depth is None:
        raise ModelConfigError(f"{w}: no hidden_size / depth: the vision tower's size cannot be estimated")
    h = _int(h, "vision hidden_size", w)
    depth = _int(depth, "vision depth", w, 1, 1024)
    inter = get("intermediate_size")
    if inter is not None:
        inter = _int(inter, "vision intermediate_size", w)
    else:
        ratio = get("mlp_ratio", default=4)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
            raise ModelConfigError(f"{w}: mlp_ratio {str(ratio)[:40]} is not a ratio")
        inter = int(h * ratio)
    patch = _int(get("patch_size", default=14), "vision patch_size", w, 1, 1024)
    chans = _int(get("in_channels", "in_chans", "num_channels", default=3), "vision in_channels", w, 1, 64)
    temporal = _int(get("temporal_patch_size", default=1), "vision temporal_patch_size", w, 1, 64)
    act = str(get("hidden_act", "hidden_activation", default="gelu"))
    gated = "silu" in act or "swiglu" in act
    per_block = 4 * h * h + 4 * h  # qkv + proj with biases
    per_block += (3 * h * inter + 2 * inter + h) if gated else (2 * h * inter + inter + h)
    per_block += 4 * h  # two norms with biases
    params = depth * per_block + chans * temporal * patch * patch * h
    image = get("image_size")
    if isinstance(image, int) and 0 < image <= 1 << 16:
        params += (image // patch) ** 2 * h  # learned position embedding (SigLIP, CLIP)
    merge = get("spatial_merge_size")
    out_h = get("out_hidden_size") or (vc.get("hidden_size") if vc.get("embed_dim") else None) or cfg.hidden_size
    out_h = _int(out_h, "vision out_hidden_size", w)
    if isinstance(merge, int) and 0 < merge <= 16:
        m = merge * merge * h  # Qwen-VL merger: norm, m→m, m→text hidden
        params += h + m * m + m + m * out_h + out_h
    else:
        params += h * cfg.hidden_size + cfg.hidden_size * cfg.hidden_size  # a two-layer projector
    return [Tensor("vision_tower.blocks.weight", round(params * fb), fdt)]
