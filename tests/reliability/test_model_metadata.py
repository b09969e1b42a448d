"""Issue 27: hostile model metadata and secrets in the model probe.

- The model-metadata probe that plan, check, up, tune and the picker run carries the profile's
  HF_* variables (HF_TOKEN among them). They must never be in its argv: a real probe is held
  open on a FIFO while `ps` lists every process's arguments.
- A hostile config.json (10^12 layers, an ignore regex with exponential backtracking) must not
  hang `cockpit plan`; malformed safetensors headers and negative tensor offsets are clear errors
  (exit 2, no traceback, no "−931 GiB of weights"); `--set mem-fraction-static=nan|inf` too.
All through the real CLI in a subprocess with a time limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cockpit.preflight.planning import read_model_on_host
from cockpit.transport.local import LocalTransport
from tests.data.models import synth
from tests.model.test_plan import cockpit

TOKEN = "hf_pr0be_t0ken_n0t_in_argv_7731"
LIMIT_S = 20.0  # a hang would run into the subprocess timeout; a refusal takes a second


def _ps() -> list[str]:
    return subprocess.run(["ps", "-eww", "-o", "pid,args", "--no-headers"], capture_output=True, text=True, timeout=10,
                          check=True).stdout.splitlines()


def test_the_model_probe_never_carries_the_token_on_its_command_line(tmp_path: Path) -> None:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(synth.load_config("tinyllama-1.1b")))
    fifo = d / "model.safetensors"
    os.mkfifo(fifo)  # the probe blocks opening it until the test writes a header: time to look at ps
    head = synth.header_bytes(synth.tensors_for(synth.load_config("tinyllama-1.1b"))[:3])
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["facts"] = asyncio.run(read_model_on_host(LocalTransport(), str(d), env={"HF_TOKEN": TOKEN, "PATH": "/x"},
                                                             timeout=30))
        except Exception as exc:  # reported below
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            lines = _ps()
            probe = [ln for ln in lines if sys.executable in ln and ln.rstrip().endswith(" -")]
            seen = [ln for ln in lines if TOKEN in ln or str(d) in ln]
            if probe or seen:
                break
            time.sleep(0.05)
        assert probe or seen, "the probe never showed up in ps"
    finally:
        with open(fifo, "wb") as f:  # let the probe finish either way
            f.write(head)
        t.join(30)
    assert not seen, f"the probe's request is on its command line: {seen}"
    assert "error" not in result, result.get("error")
    facts = result["facts"]
    assert facts.weights is not None and facts.weights.kind == "safetensors"  # type: ignore[attr-defined]


def _model(tmp_path: Path, name: str, base: str = "llama-3.1-8b", index: bool = False, **changes: object) -> Path:
    """config.json alone, or (index=True) beside the published-style index of the unchanged model:
    the index-only path is where the plan matched ignore lists and counted layers before."""
    d = tmp_path / name
    d.mkdir()
    if index:
        idx = synth.index_for(synth.load_config(base), 4)
        (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    (d / "config.json").write_text(json.dumps({**synth.load_config(base), **changes}))
    return d


def _plan(d: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    t0 = time.monotonic()
    res = cockpit("plan", "--model-config", str(d), "--gpu-mem-gb", "80", "--tp", "1", *extra, env_root=tmp_path, timeout=60)
    assert time.monotonic() - t0 < LIMIT_S, "cockpit plan took too long on hostile metadata"
    assert "Traceback" not in res.stderr, res.stderr
    return res


def test_a_config_with_a_trillion_layers_is_refused_quickly(tmp_path: Path) -> None:
    res = _plan(_model(tmp_path, "huge", "qwen3-30b-a3b", index=True, num_hidden_layers=10**12), tmp_path)
    assert res.returncode == 2 and "num_hidden_layers = 1,000,000,000,000 is outside" in res.stderr


@pytest.mark.parametrize("field,value", [("hidden_size", -4096), ("vocab_size", "lots"), ("num_key_value_heads", 1.5),
                                         ("intermediate_size", float("inf")), ("max_position_embeddings", 10**30)])
def test_nonsense_numbers_in_config_json_are_named(tmp_path: Path, field: str, value: object) -> None:
    raw = {**synth.load_config("llama-3.1-8b"), field: value}
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(raw))  # json writes inf as Infinity, which Python's reader takes
    res = _plan(d, tmp_path)
    assert res.returncode == 2 and field in res.stderr, res.stderr


@pytest.mark.parametrize("changes,needle", [
    ({"first_k_dense_replace": "three"}, "first_k_dense_replace"),  # a dense model carrying MoE fields
    ({"n_shared_experts": -2}, "n_shared_experts"),
    ({"vision_config": {"hidden_size": "wide", "depth": 2}}, "vision hidden_size"),
    ({"vision_config": {"hidden_size": 64, "depth": 2, "mlp_ratio": "x"}}, "mlp_ratio"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": ["a", 128]}}, "weight_block_size"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 8, "strategy": "block", "block_structure": ["x", 1]}}}}}, "block_structure"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 0}}, "group_size"),
])
def test_hostile_fields_the_estimate_reads_are_named(tmp_path: Path, changes: dict, needle: str) -> None:
    res = _plan(_model(tmp_path, "est", **changes), tmp_path)
    assert res.returncode == 2 and needle in res.stderr, res.stderr


@pytest.mark.parametrize("pattern,needle", [
    ("re:^([a-z.0-9_]+)+Q", "nests a repeat"),  # 2^n backtracking on every module name: hung before
    ("re:(a|ab)*c", "repeats an alternation"),
    ("re:.*a.*b.*c.*d.*e", "unbounded repeats"),
    ("re:(", "not a regular expression"),
])
def test_a_catastrophic_ignore_regex_is_refused(tmp_path: Path, pattern: str, needle: str) -> None:
    q = {"quant_method": "fp8", "weight_block_size": [128, 128], "ignore": ["lm_head", pattern]}
    res = _plan(_model(tmp_path, "rx", index=True, quantization_config=q), tmp_path)
    assert res.returncode == 2 and needle in res.stderr, res.stderr


def test_real_ignore_patterns_still_work(tmp_path: Path) -> None:
    q = {"quant_method": "fp8", "weight_block_size": [128, 128], "ignore": ["lm_head", "re:.*mlp\\.(gate|up)_proj$", "re:model.layers.\\d+.self_attn.*"]}
    res = _plan(_model(tmp_path, "ok", quantization_config=q), tmp_path, "--json")
    assert res.returncode in (0, 1), res.stderr
    assert json.loads(res.stdout)["weights_source"] == "config"


def _shard(tmp_path: Path, name: str, header: object, raw_header: bytes | None = None) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(synth.load_config("tinyllama-1.1b")))
    js = raw_header if raw_header is not None else json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(js)) + js)
    return d


@pytest.mark.parametrize("name,header,needle", [
    ("list", [1, 2, 3], "not an object of tensors"),
    ("scalar-info", {"model.embed_tokens.weight": 7}, "not an object"),
    ("string-offsets", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2], "data_offsets": ["0", "4"]}}, "not two whole numbers"),
    ("short-offsets", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [0]}}, "not two whole numbers"),
    ("negative", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [1000000000000, 0]}}, "negative or backwards"),
    ("below-zero", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [-1000000000000, -4]}}, "negative or backwards"),
    ("bad-shape", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": ["x"]}}, "not a list of sizes"),
    ("huge", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 10**18]}}, "a corrupt header"),
])
def test_malformed_safetensors_headers_are_clear_errors(tmp_path: Path, name: str, header: object, needle: str) -> None:
    res = _plan(_shard(tmp_path, name, header), tmp_path)
    assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert "GiB" not in res.stdout


def test_a_header_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    res = _plan(_shard(tmp_path, "nojson", None, raw_header=b"[" * 100000), tmp_path)
    assert res.returncode == 2 and "not JSON" in res.stderr, res.stderr


@pytest.mark.parametrize("backend,flag", [("sglang", "mem-fraction-static"), ("vllm", "gpu-memory-utilization")])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1.5"])
def test_a_memory_fraction_that_is_not_a_fraction_exits_2(tmp_path: Path, backend: str, flag: str, value: str) -> None:
    d = _model(tmp_path, "m")
    res = _plan(d, tmp_path, "--backend", backend, "--set", f"{flag}={value}")
    assert res.returncode == 2 and flag in res.stderr, res.stderr


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_gpu_memory_that_is_not_a_number_exits_2(tmp_path: Path, value: str) -> None:
    res = cockpit("plan", "--model-config", str(_model(tmp_path, "m")), "--gpu-mem-gb", value, "--tp", "1", env_root=tmp_path)
    assert res.returncode == 2 and "--gpu-mem-gb" in res.stderr and "Traceback" not in res.stderr
