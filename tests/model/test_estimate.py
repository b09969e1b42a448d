"""Weights from config.json alone (cockpit/model/estimate.py), the launch's dtype, and the
concurrency figures: against published checkpoints' sizes (tests/data/real/plan/sizes.yaml),
against tests/data/models/synth.py's independent tensor lists, per quantization format by the
format's own layout, and through `cockpit plan --model-config DIR` run as a real subprocess on a
directory that holds only config.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from cockpit.backends.sglang import plan as splan
from cockpit.backends.vllm import plan as vplan
from cockpit.model.config import ModelConfigError, parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.plan import GpuFacts
from cockpit.model.read import read_model_dir
from cockpit.model.weights import GIB, Parallel, Tensor, index_from_headers, split_weights
from tests.data.models import synth
from tests.model.test_plan import cockpit

DATA = Path(__file__).resolve().parent.parent / "data"
SIZES = DATA / "real" / "plan" / "sizes.yaml"
CHECKPOINTS = yaml.safe_load(SIZES.read_text(encoding="utf-8"))["checkpoints"]


def _raw(entry: dict) -> dict:
    return json.loads((SIZES.parent / entry["config"]).resolve().read_text(encoding="utf-8"))


def test_at_least_twenty_published_checkpoints_with_sources() -> None:
    assert len(CHECKPOINTS) >= 20
    for c in CHECKPOINTS:
        assert c["config_url"].startswith("https://") and c["index_url"].startswith("https://"), c["name"]
        assert c["total_size"] > 0


@pytest.mark.parametrize("entry", CHECKPOINTS, ids=[c["name"] for c in CHECKPOINTS])
def test_config_alone_lands_within_2_percent_of_the_published_checkpoint(entry: dict) -> None:
    raw = _raw(entry)
    est = estimate_index(parse_config(raw, entry["name"]), raw)
    assert est.estimated and est.kind == "config"
    assert est.total_bytes == pytest.approx(entry["total_size"], rel=0.02), entry["name"]


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "models").iterdir() if (p / "config.json").is_file()))
def test_config_alone_matches_synths_tensor_list(name: str) -> None:
    """synth.py lists each test model's tensors by name (as its checkpoint stores them); the
    estimate sizes the same model from its config alone — per rank as well as in total."""
    raw = synth.load_config(name)
    cfg = parse_config(raw, name)
    est = estimate_index(cfg, raw)
    exact = index_from_headers([Tensor(t[0], synth.nbytes(t), t[1]) for t in synth.tensors_for(raw)], 1)
    assert est.total_bytes == pytest.approx(exact.total_bytes, rel=0.002)
    for par in (Parallel(1), Parallel(8), Parallel(8, 8, 8, 1, True)):
        a = split_weights(cfg, est, par).per_rank_bytes
        b = split_weights(cfg, exact, par).per_rank_bytes
        assert a == pytest.approx(b, rel=0.01), (name, par)


def _llama(quant: dict | None = None, **kw: object) -> dict:
    raw = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
           "max_position_embeddings": 8192, "torch_dtype": "bfloat16", **kw}
    if quant:
        raw["quantization_config"] = quant
    return raw


def _linear_bytes(raw: dict) -> float:
    """Bytes of the first layer's down_proj (4096 out × 14336 in) in the estimate."""
    est = estimate_index(parse_config(raw), raw)
    return next(t.nbytes for t in est.tensors if t.name == "model.layers.0.mlp.down_proj.weight")


@pytest.mark.parametrize("quant,expect", [
    # AutoAWQ GEMM: qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 [in/g, out]
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
     14336 * 4096 / 2 + 112 * 4096 / 2 + 112 * 4096 * 2),
    # AutoGPTQ: the same three plus g_idx int32 [in]
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
     14336 * 4096 / 2 + 112 * 4096 / 2 + 112 * 4096 * 2 + 14336 * 4),
    # fp8 with 128×128 blocks: 1 byte per weight + an fp32 scale_inv per block
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 14336 * 4096 + 32 * 112 * 4),
    # compressed-tensors pack-quantized int4, group 32: packed int32, bf16 scales, weight_shape
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 32, "strategy": "group", "symmetric": True, "type": "int"}}}},
     14336 * 4096 / 2 + 4096 * 448 * 2 + 8),
    # compressed-tensors nvfp4: packed fp4, an fp8 scale per 16, two fp32 global scales
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 16, "strategy": "tensor_group", "type": "float"}}}},
     14336 * 4096 / 2 + 14336 * 4096 / 16 + 8),
    # modelopt NVFP4 the same layout
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, 14336 * 4096 / 2 + 14336 * 4096 / 16 + 8),
])
def test_each_quantized_format_stores_its_own_layout(quant: dict, expect: float) -> None:
    assert _linear_bytes(_llama(quant)) == pytest.approx(expect, abs=1)


def test_embeddings_head_and_ignored_modules_stay_unquantized() -> None:
    q = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["down_proj"]}
    raw = _llama(q)
    assert _linear_bytes(raw) == 14336 * 4096 * 2  # ignored: bf16
    est = estimate_index(parse_config(raw), raw)
    by = {t.name: t for t in est.tensors}
    assert by["lm_head.weight"].nbytes == 128256 * 4096 * 2 and by["lm_head.weight"].dtype == "BF16"
    assert by["model.layers.0.mlp.gate_proj.weight"].dtype == "Q"


def test_mtp_layers_are_counted_in_the_checkpoint_but_not_loaded_without_speculation() -> None:
    raw = synth.load_config("deepseek-v3")
    cfg = parse_config(raw)
    est = estimate_index(cfg, raw)
    mtp = [t for t in est.tensors if t.name.startswith("model.layers.61.")]
    assert mtp and any("embed_tokens" in t.name for t in mtp)
    off = split_weights(cfg, est, Parallel(8)).per_rank_bytes
    on = split_weights(cfg, est, Parallel(8), load_mtp=True).per_rank_bytes
    assert on - off > 1.0 * GIB  # one MoE layer and its own embedding and head


def test_tied_embeddings_follow_the_familys_default() -> None:
    gemma = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
             "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
             "vocab_size": 256000, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    assert parse_config(gemma).tie_word_embeddings
    assert not parse_config(_llama()).tie_word_embeddings
    assert parse_config({**gemma, "tie_word_embeddings": False}).tie_word_embeddings is False


# ---- the launch's dtype ---------------------------------------------------------------------


def _f32(tmp_path: Path, headers: bool) -> Path:
    """A float32 checkpoint (Llama-3.2-1B's shape): config alone, or with real F32 safetensors headers."""
    raw = {**_llama(), "torch_dtype": "float32", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True}
    d = tmp_path / ("f32-headers" if headers else "f32-config")
    if headers:
        ts = [(n, "F32", shape) for n, _dt, shape in synth.tensors_for(raw)]
        d.mkdir()
        (d / "config.json").write_text(json.dumps(raw))
        synth.write_shard(d / "model.safetensors", ts)
    else:
        d.mkdir()
        (d / "config.json").write_text(json.dumps(raw))
    return d


@pytest.mark.parametrize("headers", [False, True], ids=["config", "safetensors"])
def test_a_16_bit_launch_of_a_float32_checkpoint_holds_2_bytes_per_weight_and_kv_element(tmp_path: Path, headers: bool) -> None:
    facts = read_model_dir(_f32(tmp_path, headers))
    cfg, w = facts.config, facts.weights
    assert w is not None and w.kind == ("safetensors" if headers else "config")
    gpu = GpuFacts(80.0)
    for backend, settings in (("sglang", splan.settings_from_flags), ("vllm", vplan.settings_from_flags)):
        mod = splan if backend == "sglang" else vplan
        auto = mod.plan(cfg, w, gpu, settings({}, None))
        bf16 = mod.plan(cfg, w, gpu, settings({"dtype": "bfloat16"}, None))
        f32 = mod.plan(cfg, w, gpu, settings({"dtype": "float32"}, None))
        # auto downcasts a float32 checkpoint to 16 bits (both engines' _get_and_verify_dtype)
        assert auto.weights_gib_per_rank == pytest.approx(w.total_bytes / 2 / GIB, rel=1e-6), backend
        assert bf16.weights_gib_per_rank == pytest.approx(auto.weights_gib_per_rank), backend
        assert f32.weights_gib_per_rank == pytest.approx(w.total_bytes / GIB, rel=1e-6), backend
        # KV cache "auto" follows the launch's dtype: 8 KV heads × 64 × 2 (K and V) × 16 layers
        assert auto.kv_bytes_per_token == 8 * 64 * 2 * 16 * 2, backend
        assert f32.kv_bytes_per_token == 8 * 64 * 2 * 16 * 4, backend
        assert any("not the checkpoint's float32" in n for n in bf16.notes), backend
        assert auto.weights_source == w.kind


def test_an_unknown_dtype_is_refused(tmp_path: Path) -> None:
    facts = read_model_dir(_f32(tmp_path, False))
    with pytest.raises(ModelConfigError, match="--dtype"):
        splan.plan(facts.config, facts.weights, GpuFacts(80.0), splan.settings_from_flags({"dtype": "int3"}, None))


# ---- `cockpit plan --model-config DIR` with config.json alone -----------------------------------


@pytest.fixture()
def config_only(tmp_path: Path) -> Path:
    d = tmp_path / "Qwen3-32B"
    d.mkdir()
    (d / "config.json").write_text((DATA / "models" / "qwen3-32b" / "config.json").read_text())
    return d


@pytest.mark.parametrize("backend,flag", [("sglang", "mem-fraction-static=0.88"), ("vllm", "gpu-memory-utilization=0.9")])
def test_plan_answers_from_a_directory_holding_only_config_json(config_only: Path, tmp_path: Path, backend: str, flag: str) -> None:
    res = cockpit("plan", "--model-config", str(config_only), "--gpu-mem-gb", "79.6", "--tp", "2", "--backend", backend,
                  "--set", flag, "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    assert out["weights_source"] == "config"
    # Qwen3-32B's published checkpoint is 65,524,246,528 B; TP2 splits all of it (no replicated tower)
    assert out["weights_gib_per_rank"] == pytest.approx(65_524_246_528 / 2 / GIB, rel=0.01)
    cur = out["current"]
    assert cur["concurrent_requests"] == cur["max_total_num_tokens"] // out["request_tokens"]
    assert out["request_tokens"] == 40960  # the model's context when no --request-tokens
    text = cockpit("plan", "--model-config", str(config_only), "--gpu-mem-gb", "79.6", "--tp", "2", "--backend", backend,
                   "--set", flag, "--request-tokens", "8192", env_root=tmp_path)
    assert "weights estimated from config.json" in text.stdout
    assert "reqs: how many requests of 8,192 tokens fit at once" in " ".join(text.stdout.split())


def test_safetensors_headers_win_over_the_config(tmp_path: Path) -> None:
    d = tmp_path / "llama"
    synth.write_checkpoint(d, synth.load_config("llama-3.1-8b"), shards=2)
    res = cockpit("plan", "--model-config", str(d), "--gpu-mem-gb", "80", "--tp", "1", "--json", env_root=tmp_path)
    out = json.loads(res.stdout)
    assert out["weights_source"] == "safetensors"
    text = cockpit("plan", "--model-config", str(d), "--gpu-mem-gb", "80", "--tp", "1", env_root=tmp_path).stdout
    assert "weights estimated" not in text


def test_concurrency_counts_whole_requests_per_setting(config_only: Path, tmp_path: Path) -> None:
    res = cockpit("plan", "--model-config", str(config_only), "--gpu-mem-gb", "79.6", "--tp", "2", "--request-tokens", "4096",
                  "--json", env_root=tmp_path)
    out = json.loads(res.stdout)
    assert out["request_tokens"] == 4096
    for r in out["rows"]:
        assert r["concurrent_requests"] == r["max_total_num_tokens"] // 4096
    assert out["recommended"]["concurrent_requests"] == out["recommended"]["max_total_num_tokens"] // 4096
    assert math.isfinite(out["weights_gib_per_rank"])
