"""A small safetensors writer for tests: a checkpoint's tensor list from a config.json, written as
real safetensors headers (8-byte little-endian length + JSON) over sparse files — no weights exist,
nothing is downloaded, and the files read back exactly as a checkpoint's headers would.

`tensors_for(config)` lists the tensors a Hugging Face checkpoint of that config holds, named and
shaped as the published checkpoints name and shape them (Llama / Qwen2 / Qwen3 / Qwen3-MoE /
DeepSeek-V3 / Kimi-K2.5 / gpt-oss), stored dtypes following `quantization_config`.
`write_checkpoint(dir, config)` writes config.json and N shards; `index_for(config)` gives a
model.safetensors.index.json whose total_size is the exact sum.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

DT = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4, "U8": 1, "I64": 8}
T = tuple[str, str, list[int]]  # name, dtype, shape


def nbytes(t: T) -> int:
    return DT[t[1]] * math.prod(t[2])


def _linear(name: str, out: int, inp: int, q: dict[str, Any] | None, quantized: bool) -> list[T]:
    if not quantized or not q:
        return [(f"{name}.weight", "BF16", [out, inp])]
    method = q.get("quant_method")
    if method == "fp8":
        b = (q.get("weight_block_size") or [128, 128])[0]
        return [(f"{name}.weight", "F8_E4M3", [out, inp]), (f"{name}.weight_scale_inv", "F32", [math.ceil(out / b), math.ceil(inp / b)])]
    if method == "compressed-tensors":  # int4 pack-quantized, symmetric, group-wise bf16 scales
        g = next(iter(q["config_groups"].values()))["weights"]["group_size"]
        return [(f"{name}.weight_packed", "I32", [out, inp // 8]), (f"{name}.weight_scale", "BF16", [out, inp // g]),
                (f"{name}.weight_shape", "I32", [2])]
    raise ValueError(method)


def tensors_for(raw: dict[str, Any]) -> list[T]:
    c = {**raw, **(raw.get("text_config") or {})}
    q = raw.get("quantization_config") or c.get("quantization_config")
    pre = "language_model." if raw.get("text_config") else ""
    H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nh = c["num_attention_heads"]
    out: list[T] = [(f"{pre}model.embed_tokens.weight", "BF16", [V, H]), (f"{pre}model.norm.weight", "BF16", [H])]
    if not c.get("tie_word_embeddings"):
        out.append((f"{pre}lm_head.weight", "BF16", [V, H]))
    ct = q and q.get("quant_method") == "compressed-tensors"
    fp8 = q and q.get("quant_method") == "fp8"
    gptoss = c.get("model_type") == "gpt_oss"
    experts = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0
    n_layers = L + int(c.get("num_nextn_predict_layers") or 0)
    for i in range(n_layers):
        p = f"{pre}model.layers.{i}."
        out += [(p + "input_layernorm.weight", "BF16", [H]), (p + "post_attention_layernorm.weight", "BF16", [H])]
        a = p + "self_attn."
        if c.get("kv_lora_rank"):
            ql, kvl, rope, nope, v = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
            out += _linear(a + "q_a_proj", ql, H, q, bool(fp8))
            out.append((a + "q_a_layernorm.weight", "BF16", [ql]))
            out += _linear(a + "q_b_proj", nh * (nope + rope), ql, q, bool(fp8))
            out += _linear(a + "kv_a_proj_with_mqa", kvl + rope, H, q, bool(fp8))
            out.append((a + "kv_a_layernorm.weight", "BF16", [kvl]))
            out += _linear(a + "kv_b_proj", nh * (nope + v), kvl, q, bool(fp8))
            out += _linear(a + "o_proj", H, nh * v, q, bool(fp8))
        else:
            kv = c.get("num_key_value_heads", nh)
            hd = c.get("head_dim") or H // nh
            for proj, o, i_ in (("q_proj", nh * hd, H), ("k_proj", kv * hd, H), ("v_proj", kv * hd, H), ("o_proj", H, nh * hd)):
                out.append((a + proj + ".weight", "BF16", [o, i_]))
                if c.get("attention_bias") or (c.get("model_type") == "qwen2" and proj != "o_proj") or gptoss:
                    out.append((a + proj + ".bias", "BF16", [o]))
            if c.get("model_type") in ("qwen3", "qwen3_moe"):
                out += [(a + "q_norm.weight", "BF16", [hd]), (a + "k_norm.weight", "BF16", [hd])]
            if gptoss:
                out.append((a + "sinks", "BF16", [nh]))
        m = p + "mlp."
        first_dense = int(c.get("first_k_dense_replace") or 0)
        is_moe = experts and i >= first_dense and i not in (c.get("mlp_only_layers") or [])
        if not is_moe:
            inter = c["intermediate_size"]
            for proj, o, i_ in (("gate_proj", inter, H), ("up_proj", inter, H), ("down_proj", H, inter)):
                out += _linear(m + proj, o, i_, q, bool(fp8))
            continue
        inter_moe = c.get("moe_intermediate_size") or c["intermediate_size"]
        if gptoss:
            E = experts
            out += [(m + "router.weight", "BF16", [E, H]), (m + "router.bias", "BF16", [E]),
                    (m + "experts.gate_up_proj_blocks", "U8", [E, 2 * inter_moe, H // 32, 16]), (m + "experts.gate_up_proj_scales", "U8", [E, 2 * inter_moe, H // 32]),
                    (m + "experts.gate_up_proj_bias", "BF16", [E, 2 * inter_moe]),
                    (m + "experts.down_proj_blocks", "U8", [E, H, inter_moe // 32, 16]), (m + "experts.down_proj_scales", "U8", [E, H, inter_moe // 32]),
                    (m + "experts.down_proj_bias", "BF16", [E, H])]
            continue
        out.append((m + "gate.weight", "BF16", [experts, H]))
        if c.get("topk_method") == "noaux_tc":
            out.append((m + "gate.e_score_correction_bias", "F32", [experts]))
        for e in range(experts):
            for proj, o, i_ in (("gate_proj", inter_moe, H), ("up_proj", inter_moe, H), ("down_proj", H, inter_moe)):
                out += _linear(f"{m}experts.{e}.{proj}", o, i_, q, bool(fp8 or ct))
        ns = int(c.get("n_shared_experts") or 0)
        if ns:
            for proj, o, i_ in (("gate_proj", inter_moe * ns, H), ("up_proj", inter_moe * ns, H), ("down_proj", H, inter_moe * ns)):
                out += _linear(f"{m}shared_experts.{proj}", o, i_, q, bool(fp8))
        if i >= L:  # DeepSeek's multi-token-prediction layer carries its own embedding and head
            out += [(p + "embed_tokens.weight", "BF16", [V, H]), (p + "enorm.weight", "BF16", [H]), (p + "hnorm.weight", "BF16", [H]),
                    (p + "eh_proj.weight", "BF16", [H, 2 * H]), (p + "shared_head.norm.weight", "BF16", [H]),
                    (p + "shared_head.head.weight", "BF16", [V, H])]
    vc = raw.get("vision_config")
    if vc:  # a ViT tower + projector, kept whole on every rank
        vh, vl, vi = vc["hidden_size"], vc["num_hidden_layers"], vc["intermediate_size"]
        for i in range(vl):
            b = f"vision_tower.encoder.blocks.{i}."
            out += [(b + "wqkv.weight", "BF16", [3 * vh, vh]), (b + "wo.weight", "BF16", [vh, vh]),
                    (b + "mlp.fc0.weight", "BF16", [vi, vh]), (b + "mlp.fc1.weight", "BF16", [vh, vi]),
                    (b + "norm0.weight", "BF16", [vh]), (b + "norm1.weight", "BF16", [vh])]
        merged = vh * 4  # 2×2 patch merge
        out += [(("mm_projector.proj.0.weight"), "BF16", [merged, merged]), ("mm_projector.proj.2.weight", "BF16", [H, merged])]
    return out


def header_bytes(tensors: list[T]) -> bytes:
    meta: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, dtype, shape in tensors:
        n = DT[dtype] * math.prod(shape)
        meta[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    js = json.dumps(meta, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js


def write_shard(path: Path, tensors: list[T]) -> int:
    """Header + a sparse data section of the right length (no bytes of it are written)."""
    head = header_bytes(tensors)
    data = sum(nbytes(t) for t in tensors)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data)
    return data


def index_for(raw: dict[str, Any], shards: int = 1) -> dict[str, Any]:
    ts = tensors_for(raw)
    per = math.ceil(len(ts) / shards)
    wm = {t[0]: f"model-{i // per + 1:05d}-of-{shards:05d}.safetensors" for i, t in enumerate(ts)}
    return {"metadata": {"total_size": sum(nbytes(t) for t in ts)}, "weight_map": wm}


def write_checkpoint(d: Path, raw: dict[str, Any], *, shards: int = 2, index: bool = False) -> int:
    """config.json plus `shards` safetensors files (or, with index=True, only the index)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(raw, indent=1))
    if index:
        idx = index_for(raw, shards)
        (d / "model.safetensors.index.json").write_text(json.dumps(idx))
        return int(idx["metadata"]["total_size"])
    ts = tensors_for(raw)
    per = math.ceil(len(ts) / shards)
    total = 0
    for k in range(shards):
        total += write_shard(d / f"model-{k + 1:05d}-of-{shards:05d}.safetensors", ts[k * per:(k + 1) * per])
    return total


def load_config(name: str) -> dict[str, Any]:
    return json.loads((Path(__file__).parent / name / "config.json").read_text())
