"""What a model's `config.json` says about its memory: layers, attention shape, experts, quantization.

Pure: takes the parsed JSON (a dict), returns `ModelConfig`. Field names follow Hugging Face
`transformers` configs as the published checkpoints spell them; where HF documents a default
(`num_key_value_heads` absent = MHA, `head_dim` absent = hidden_size / num_attention_heads) the
default is used and written into `notes`. A field the plan cannot do without is never guessed:
`ModelConfigError` names it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any


class ModelConfigError(ValueError):
    """The model's metadata cannot be planned (config.json lacks a field, a file is unreadable, a
    value is not one the plan knows). The CLI reports it as bad input (exit 2) naming the file and
    field; check, up and the picker as a plan not made. (cockpit.model sits below the backends, so
    it does not use cockpit.errors.)"""


DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2,
    "float32": 4, "float": 4, "fp32": 4,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1,
}


@dataclass(frozen=True)
class Quantization:
    """The weight format the checkpoint stores (quantization_config), as far as the plan needs it."""

    method: str  # "none", "fp8", "compressed-tensors", "mxfp4", "awq", "gptq", "modelopt", …
    bits: float  # bits per quantized weight element (16 when none)
    group_size: int | None = None  # elements per scale (None: per channel / block scales, negligible)
    ignore: tuple[str, ...] = ()  # module patterns kept in the unquantized dtype
    only_experts: bool = False  # the method quantizes the MoE experts and nothing else (mxfp4)

    def bytes_per_param(self) -> float:
        """Stored bytes per quantized parameter, scales included (bf16 scales per group)."""
        b = self.bits / 8
        if self.group_size:
            scale_bytes = 1 if self.method == "mxfp4" else (1 if self.bits == 4 and self.method == "modelopt" else 2)
            b += scale_bytes / self.group_size
        return b

    def covers(self, module: str) -> bool:
        """Is `module` (a representative parameter name) stored quantized?"""
        if self.method == "none":
            return False
        if self.only_experts and ".experts." not in module:
            return False
        for pat in self.ignore:
            if pat.startswith("re:"):
                if _compiled(pat[3:]).search(module):
                    return False
            elif pat and pat in module:
                return False
        return True


NO_QUANT = Quantization("none", 16)

# Bounds on what a config.json may ask of the plan (a hostile or broken file must not hang it):
# counts far beyond any published model, and ignore patterns that run in linear-ish time.
MAX_LAYERS = 4096
MAX_DIM = 1 << 20  # hidden sizes, intermediate sizes, head dims
MAX_VOCAB = 1 << 24
MAX_HEADS = 1 << 16
MAX_EXPERTS = 1 << 16
MAX_CONTEXT = 1 << 31
MAX_IGNORE = 4096  # entries of quantization_config.ignore / modules_to_not_convert
MAX_PATTERN = 512  # characters of one ignore entry
MAX_PATTERN_REPEATS = 3  # unbounded repeats in one `re:` pattern (backtracking grows as n^repeats)


def _compiled(pattern: str) -> re.Pattern[str]:
    """The compiled ignore pattern, checked first when it did not come through parse_config."""
    got = _safe_patterns.get(pattern)
    if got is None:
        _check_pattern(pattern, "quantization_config")
        got = _safe_patterns[pattern]
    return got


_safe_patterns: dict[str, re.Pattern[str]] = {}  # checked patterns; emptied past MAX_IGNORE entries


def _check_pattern(pattern: str, where: str) -> None:
    """Refuse an ignore regex that could backtrack for exponential time: a repeat inside a repeat,
    an alternation inside a repeat, or more than MAX_PATTERN_REPEATS unbounded repeats. Real
    checkpoints' patterns (`re:.*mlp.gate$`, `re:model.layers.\\d+.mlp.(gate|up)_proj`) pass."""
    from re import _parser  # type: ignore[attr-defined]

    try:
        tree = _parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} is not a regular expression ({exc})") from None
    repeats = 0

    def walk(items: Any, inside_repeat: bool) -> None:
        nonlocal repeats
        for op, av in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                _lo, hi, sub = av
                if hi == _parser.MAXREPEAT or hi > 64:
                    repeats += 1
                if inside_repeat:
                    raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} nests a repeat inside a repeat "
                                           "(exponential backtracking); the plan refuses it")
                walk(sub, True)
            elif name == "BRANCH":
                if inside_repeat:
                    raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} repeats an alternation "
                                           "(exponential backtracking); the plan refuses it")
                for b in av[1]:
                    walk(b, inside_repeat)
            elif name == "SUBPATTERN":
                walk(av[-1], inside_repeat)
            elif name in ("ASSERT", "ASSERT_NOT"):
                walk(av[1], inside_repeat)
            elif name == "GROUPREF_EXISTS":
                raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} uses a conditional group; the plan refuses it")
            elif name == "GROUPREF":
                raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} uses a back-reference; the plan refuses it")

    walk(tree, False)
    if repeats > MAX_PATTERN_REPEATS:
        raise ModelConfigError(f"{where}: ignore pattern {pattern[:80]!r} has {repeats} unbounded repeats "
                               f"(at most {MAX_PATTERN_REPEATS}: backtracking grows with each); the plan refuses it")
    if len(_safe_patterns) >= MAX_IGNORE:
        _safe_patterns.clear()
    _safe_patterns[pattern] = re.compile(pattern)


def _ignore_list(q: dict[str, Any], where: str) -> tuple[str, ...]:
    raw = q.get("ignore") or q.get("modules_to_not_convert") or q.get("exclude_modules") or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ModelConfigError(f"{where}: quantization_config's ignore list is a {type(raw).__name__}, not a list")
    if len(raw) > MAX_IGNORE:
        raise ModelConfigError(f"{where}: quantization_config lists {len(raw):,} modules to ignore (at most {MAX_IGNORE:,})")
    out = []
    for x in raw:
        pat = str(x)
        if len(pat) > MAX_PATTERN:
            raise ModelConfigError(f"{where}: an ignore entry of quantization_config is {len(pat):,} characters (at most {MAX_PATTERN})")
        if pat.startswith("re:"):
            _check_pattern(pat[3:], where)
        out.append(pat)
    return tuple(out)


def _int(value: Any, name: str, where: str, lo: int = 1, hi: int = MAX_DIM) -> int:
    """A whole number from config.json within [lo, hi]; anything else is a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ModelConfigError(f"{where}: {name} is {value!r}, not a whole number")
    try:
        f = float(value)
    except ValueError:
        raise ModelConfigError(f"{where}: {name} is {value!r}, not a whole number") from None
    if not math.isfinite(f) or f != int(f):
        raise ModelConfigError(f"{where}: {name} is {value!r}, not a whole number")
    n = int(f)
    if not lo <= n <= hi:
        raise ModelConfigError(f"{where}: {name} = {n:,} is outside {lo:,}…{hi:,}; not a model the plan can trust")
    return n


@dataclass(frozen=True)
class ModelConfig:
    """Memory-relevant facts of one model (the text model of a multimodal checkpoint)."""

    name: str
    architecture: str
    model_type: str
    layers: int
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention: str  # "mha" (MHA/GQA/MQA) or "mla"
    num_attention_heads: int
    num_kv_heads: int  # MHA/GQA; for MLA the latent is one shared "head"
    head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None  # MLA
    kv_lora_rank: int | None = None  # MLA
    qk_rope_head_dim: int | None = None  # MLA
    qk_nope_head_dim: int | None = None  # MLA
    intermediate_size: int = 0  # dense MLP
    experts: int = 0  # routed experts (0 = dense)
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # total over shared experts
    moe_layers: int = 0  # how many decoder layers carry experts
    sliding_window: int | None = None
    swa_layers: int = 0  # layers with sliding-window attention (hybrid models)
    nextn_layers: int = 0  # multi-token-prediction layers shipped in the checkpoint (not loaded by default)
    index_head_dim: int | None = None  # DeepSeek sparse attention (NSA/DSA): the indexer's key cache
    context_length: int | None = None
    dtype: str = "bfloat16"
    quant: Quantization = NO_QUANT
    has_vision: bool = False
    # vision_config's num_hidden_layers and hidden_size, read under exactly those names (None: absent)
    # as SGLang's adjust_mem_fraction_for_vlm reads them (sglang/terms.vlm_mfs_factor): a Qwen2-VL
    # tower, which says `depth`, counts as SGLang's default 24 layers
    vision_config: bool = False
    vision_layers: int | None = None
    vision_hidden: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def load_dtype(self, flag: Any = None) -> tuple[str, int]:
        """The dtype the engine loads unquantized weights in, and its bytes, for the launch's
        `--dtype` (None / "auto": the checkpoint's torch_dtype, a float32 checkpoint downcast to
        16 bits — both engines' `_get_and_verify_dtype` / `_resolve_auto_dtype`)."""
        f = str(flag or "auto").lower().replace("torch.", "")
        if f == "auto":
            if self.dtype_bytes >= 4:
                return ("bfloat16" if self.model_type.startswith("gemma") else "float16"), 2
            return self.dtype, 2
        if f not in DTYPE_BYTES or DTYPE_BYTES[f] == 1:
            raise ModelConfigError(f"--dtype {f!r}: the plan knows auto, bfloat16, float16 (half) and float32 (float)")
        return f, DTYPE_BYTES[f]

    @property
    def full_attention_layers(self) -> int:
        return self.layers - self.swa_layers

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


# Fields a family's published config.json may omit because its transformers config class sets them
# (transformers `Gemma3TextConfig.__init__` defaults: google/gemma-3-4b-it's text_config names only
# hidden, intermediate and layer sizes; -12b's no head_dim or vocabulary). Only families whose
# published checkpoints rely on them; every other missing field is still refused.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131_072, "sliding_window": 4096, "sliding_window_pattern": 6,
                    "tie_word_embeddings": True},
}


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return None


def _quantization(cfg: dict[str, Any], outer: dict[str, Any], where: str = "config.json") -> Quantization:
    q = outer.get("quantization_config") or cfg.get("quantization_config")
    if not isinstance(q, dict):
        return NO_QUANT
    method = str(q.get("quant_method") or q.get("quant_algo") or "unknown").lower()[:64]
    ignore = _ignore_list(q, where)

    def bits(v: Any) -> float:
        return float(_int(v, "quantization_config bits", where, 1, 32))

    def group(v: Any) -> int | None:
        if v is None or v == -1:
            return None  # GPTQ's -1: per channel
        return _int(v, "quantization_config group_size", where, 1, MAX_DIM)

    if method == "fp8":
        return Quantization("fp8", 8, None, ignore)
    if method == "mxfp4":
        return Quantization("mxfp4", 4, 32, ignore, only_experts=True)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        gs = _first(q, "group_size", "q_group_size")  # absent: AutoAWQ's and AutoGPTQ's 128
        return Quantization(method, bits(q.get("bits") or q.get("w_bit") or 4), group(128 if gs is None else gs), ignore)
    if method == "bitsandbytes":
        four = bool(q.get("load_in_4bit") or q.get("_load_in_4bit"))
        skip = q.get("llm_int8_skip_modules")
        if isinstance(skip, list) and not ignore:
            ignore = _ignore_list({"ignore": skip}, where)
        return Quantization("bitsandbytes", 4 if four else 8, 64 if four else None, ignore)
    if method == "modelopt":
        algo = str(q.get("quant_algo") or "").upper()
        if "FP4" in algo:
            return Quantization("modelopt", 4, 16, ignore)
        return Quantization("modelopt", 8, None, ignore)
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        for g in groups.values() if isinstance(groups, dict) else []:
            w = (g or {}).get("weights") if isinstance(g, dict) else None
            nb = w.get("num_bits") if isinstance(w, dict) else None
            if nb:
                return Quantization("compressed-tensors", bits(nb), group(w.get("group_size")), ignore)  # type: ignore[union-attr]
        return Quantization("compressed-tensors", 8, None, ignore)
    nb = q.get("bits") or q.get("num_bits")
    if nb:
        return Quantization(method, bits(nb), group(q.get("group_size")), ignore)
    raise ModelConfigError(
        f"quantization_config.quant_method {method!r} is not one the plan knows "
        "(fp8, mxfp4, compressed-tensors, awq, gptq, modelopt, or bits + group_size)"
    )


def parse_config(raw: dict[str, Any], where: str = "config.json", name: str | None = None) -> ModelConfig:
    """ModelConfig from a parsed config.json. Raises ModelConfigError naming the missing field."""
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{where}: expected a JSON object")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else None
    cfg = {**raw, **text} if text else raw  # the language model's fields live in text_config
    notes: list[str] = []
    family = str((text or {}).get("model_type") or raw.get("model_type") or "")
    defaults = FAMILY_DEFAULTS.get(family, {})
    filled = sorted(k for k in defaults if cfg.get(k) is None)
    if filled:
        # the published file leaves these to the family's config class: what transformers (and so
        # vLLM and SGLang, which load it) fill in, not a guess
        cfg = {**cfg, **{k: defaults[k] for k in filled}}
        notes.append(f"{family} config.json omits {', '.join(filled)}: transformers' defaults for {family} taken")
    archs = raw.get("architectures") or cfg.get("architectures") or []
    arch = str(archs[0]) if archs else str(raw.get("model_type") or "unknown")
    prefix = f"{where}{' text_config' if text else ''}"

    def need(*keys: str) -> Any:
        v = _first(cfg, *keys)
        if v is None:
            raise ModelConfigError(
                f"{prefix}: {arch} has no {' / '.join(keys)}; the memory plan needs it and will not guess"
            )
        return v

    # hybrid linear-attention / Mamba layers keep a per-request state pool SGLang sizes apart from
    # the KV pool (handle_max_mamba_cache); the plan does not model it, so it says so
    for key in ("linear_num_value_heads", "linear_conv_kernel_dim", "mamba_d_state", "ssm_state_size",
                "hybrid_override_pattern", "mamba_n_heads"):
        if cfg.get(key) is not None:
            raise ModelConfigError(
                f"{prefix}: {arch} has {key}: hybrid linear-attention/Mamba layers keep a state pool the "
                "memory plan does not model yet"
            )
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and any(("linear" in str(t) or "mamba" in str(t)) for t in lt):
        raise ModelConfigError(
            f"{prefix}: {arch} has layer_types with linear-attention/Mamba layers: a state pool the memory plan does not model yet"
        )
    layers = _int(need("num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers", prefix, 1, MAX_LAYERS)
    hidden = _int(need("hidden_size", "n_embd", "d_model"), "hidden_size", prefix)
    vocab = _int(need("vocab_size"), "vocab_size", prefix, 1, MAX_VOCAB)
    heads = _int(need("num_attention_heads", "n_head"), "num_attention_heads", prefix, 1, MAX_HEADS)
    kv_lora = cfg.get("kv_lora_rank")
    if kv_lora is not None:
        attention = "mla"
        kv_lora = _int(kv_lora, "kv_lora_rank", prefix)
        rope = _int(need("qk_rope_head_dim"), "qk_rope_head_dim", prefix, 0)
        nope = _int(need("qk_nope_head_dim"), "qk_nope_head_dim", prefix, 0)
        v_head = _int(need("v_head_dim"), "v_head_dim", prefix)
        kv_heads = 1
        head_dim = nope + rope
    else:
        attention = "mha"
        rope = nope = None  # type: ignore[assignment]
        kv = cfg.get("num_key_value_heads")
        if kv is None:
            kv = heads
            notes.append("num_key_value_heads absent: MHA (one KV head per attention head, the HF default)")
        kv_heads = _int(kv, "num_key_value_heads", prefix, 1, MAX_HEADS)
        hd = cfg.get("head_dim")
        if hd is None:
            if hidden % heads:
                raise ModelConfigError(f"{prefix}: {arch} has no head_dim and hidden_size is not a multiple of num_attention_heads")
            hd = hidden // heads
        head_dim = _int(hd, "head_dim", prefix)
        v_head = _int(cfg.get("v_head_dim") or head_dim, "v_head_dim", prefix)

    experts = _int(_first(cfg, "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts") or 0, "num_experts", prefix, 0, MAX_EXPERTS)
    per_tok = _int(_first(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk") or 0, "num_experts_per_tok", prefix, 0, MAX_EXPERTS)
    inter = _int(cfg.get("intermediate_size") or 0, "intermediate_size", prefix, 0)
    moe_inter = 0
    shared = 0
    moe_layers = 0
    if experts:
        if not per_tok:
            raise ModelConfigError(f"{prefix}: {arch} has {experts} experts but no num_experts_per_tok")
        moe_inter = _int(_first(cfg, "moe_intermediate_size") or inter, "moe_intermediate_size", prefix, 0)
        if not moe_inter:
            raise ModelConfigError(f"{prefix}: {arch} has experts but no moe_intermediate_size / intermediate_size")
        n_shared = _int(cfg.get("n_shared_experts") or 0, "n_shared_experts", prefix, 0, MAX_EXPERTS)
        shared = n_shared * moe_inter + _int(cfg.get("shared_expert_intermediate_size") or 0, "shared_expert_intermediate_size", prefix, 0)
        first_dense = _int(cfg.get("first_k_dense_replace") or 0, "first_k_dense_replace", prefix, 0, MAX_LAYERS)
        freq = _int(_first(cfg, "moe_layer_freq", "decoder_sparse_step") or 1, "moe_layer_freq", prefix, 1, MAX_LAYERS)
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or len(only) > MAX_LAYERS:
            raise ModelConfigError(f"{prefix}: mlp_only_layers is not a list of at most {MAX_LAYERS} layer numbers")
        dense_only = set(_int(x, "mlp_only_layers[]", prefix, 0, MAX_LAYERS) for x in only)
        moe_layers = sum(1 for i in range(layers) if i >= first_dense and i % max(1, freq) == 0 and i not in dense_only)
    elif not inter:
        raise ModelConfigError(f"{prefix}: {arch} has no intermediate_size")

    window = cfg.get("sliding_window")
    if window is not None:
        window = _int(window, "sliding_window", prefix, 1, MAX_CONTEXT)
    swa_layers = 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        swa_layers = sum(1 for t in layer_types[:layers] if "sliding" in str(t)[:64])
    elif window and cfg.get("use_sliding_window") is not False and cfg.get("sliding_window_pattern"):
        # Gemma-style: every p-th layer is full attention, the others slide
        p = _int(cfg["sliding_window_pattern"], "sliding_window_pattern", prefix, 1, MAX_LAYERS)
        swa_layers = sum(1 for i in range(layers) if (i + 1) % p)
    if swa_layers and not window:
        raise ModelConfigError(f"{prefix}: {arch} has sliding-attention layers but no sliding_window")

    dtype = str(_first(cfg, "torch_dtype", "dtype") or "bfloat16").replace("torch.", "")[:32]
    if dtype not in DTYPE_BYTES:
        notes.append(f"torch_dtype {dtype!r} unknown: 2 bytes per unquantized parameter assumed")
    ctx = _first(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
    has_vision = bool(raw.get("vision_config")) or "vision" in arch.lower() or "ConditionalGeneration" in arch
    vision_raw = raw.get("vision_config")
    vision: dict[str, Any] = vision_raw if isinstance(vision_raw, dict) else {}
    v_layers, v_hidden = vision.get("num_hidden_layers"), vision.get("hidden_size")
    return ModelConfig(
        name=name or str(raw.get("_name_or_path") or arch),
        architecture=arch,
        model_type=str(cfg.get("model_type") or raw.get("model_type") or "unknown"),
        layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        # absent: transformers' per-family default (Gemma's configs tie, Llama's, Qwen's and Mistral's do not)
        tie_word_embeddings=bool(cfg["tie_word_embeddings"]) if cfg.get("tie_word_embeddings") is not None
        else str(cfg.get("model_type") or raw.get("model_type") or "").startswith("gemma"),
        attention=attention,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head,
        q_lora_rank=_int(cfg["q_lora_rank"], "q_lora_rank", prefix) if cfg.get("q_lora_rank") else None,
        kv_lora_rank=int(kv_lora) if kv_lora is not None else None,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        intermediate_size=inter,
        experts=experts,
        experts_per_token=per_tok,
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared,
        moe_layers=moe_layers,
        sliding_window=int(window) if window and swa_layers else None,
        swa_layers=swa_layers,
        nextn_layers=_int(cfg.get("num_nextn_predict_layers") or 0, "num_nextn_predict_layers", prefix, 0, 64),
        index_head_dim=_int(cfg["index_head_dim"], "index_head_dim", prefix) if attention == "mla" and cfg.get("index_head_dim") else None,
        context_length=_int(ctx, "max_position_embeddings", prefix, 1, MAX_CONTEXT) if ctx else None,
        dtype=dtype,
        quant=_quantization(cfg, raw, prefix),
        has_vision=has_vision,
        vision_config=bool(vision),
        vision_layers=_int(v_layers, "vision num_hidden_layers", f"{prefix} vision_config", 1, MAX_LAYERS) if v_layers else None,
        vision_hidden=_int(v_hidden, "vision hidden_size", f"{prefix} vision_config") if v_hidden else None,
        notes=tuple(notes),
    )
