"""The flag table and SGLang-faithful argv parsing, per version."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.backends.base import FlagError
from cockpit.backends.sglang.flags import (
    DEFAULT_VERSION,
    VERSIONS,
    canonical,
    flag_table,
    graph_max_bs_flag,
    parse_server_args,
)

REQUIRED = [
    "--host", "--port", "--model-path", "--tp-size", "--dp-size", "--pp-size", "--ep-size", "--nnodes",
    "--node-rank", "--dist-init-addr", "--mem-fraction-static", "--chunked-prefill-size",
    "--max-running-requests", "--max-total-tokens", "--context-length", "--enable-metrics",
    "--enable-hierarchical-cache", "--hicache-size", "--hicache-ratio", "--hicache-write-policy",
    "--hicache-io-backend", "--hicache-mem-layout", "--hicache-storage-backend", "--trust-remote-code",
    "--log-level", "--skip-server-warmup", "--decode-log-interval", "--kv-cache-dtype",
    "--served-model-name", "--enable-dp-attention", "--disable-cuda-graph", "--speculative-algorithm",
    "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--config", "--max-prefill-tokens", "--page-size", "--watchdog-timeout",
    "--enable-metrics-for-all-schedulers", "--dist-timeout", "--base-gpu-id", "--gpu-id-step",
]


def test_versions_and_default() -> None:
    assert VERSIONS == ("0.5.9", "0.5.23")
    assert DEFAULT_VERSION == "0.5.9"


@pytest.mark.parametrize("version", VERSIONS)
def test_table_has_every_flag_the_reference_lists(version: str) -> None:
    names = {o for spec in flag_table(version).values() for o in spec.option_strings}
    missing = [f for f in REQUIRED if f not in names]
    assert missing == []


def test_per_version_differences() -> None:
    old, new = flag_table("0.5.9"), flag_table("0.5.23")
    assert "cuda_graph_max_bs" in old and "cuda_graph_max_bs" not in new
    assert "cuda_graph_max_bs_decode" in new and "cuda_graph_max_bs_decode" not in old
    assert "attn_dp_size" in new and "attn_dp_size" not in old
    assert "hicache_host_memory_fraction" in new
    assert "--enable-hicache" in new["enable_hierarchical_cache"].aliases
    assert "--expert-parallel-size" in new["ep_size"].aliases
    assert old["hicache_mem_layout"].default == "layer_first" and new["hicache_mem_layout"].default == "page_first"
    assert new["disable_cuda_graph"].deprecated and old["disable_cuda_graph"].deprecated is None
    assert old["hicache_size"].per_rank and old["mem_fraction_static"].per_rank
    assert "Use a smaller value if you see out-of-memory errors." in old["mem_fraction_static"].help


@pytest.mark.parametrize("version", VERSIONS)
def test_abbreviations_and_forms(version: str) -> None:
    got = parse_server_args(
        ["--tp", "8", "--dp=2", "--model", "/m", "--mem-fraction-static=0.93", "--enable-metrics",
         "--chunked-prefill-size", "-1", "--tensor-parallel-size", "4"],
        version,
    )
    assert got == {"tp_size": 4, "dp_size": 2, "model_path": "/m", "mem_fraction_static": 0.93,
                   "enable_metrics": True, "chunked_prefill_size": -1}


def test_defaults_are_not_filled() -> None:
    assert parse_server_args([], "0.5.9") == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_pp_is_ambiguous(version: str) -> None:
    with pytest.raises(FlagError) as e:
        parse_server_args(["--pp", "2"], version)
    assert str(e.value).startswith("ambiguous option: --pp could match --pp-size, ")
    assert e.value.flag == "--pp"


def test_graph_max_bs_removed_in_0523() -> None:
    assert parse_server_args(["--cuda-graph-max-bs", "160"], "0.5.9") == {"cuda_graph_max_bs": 160}
    with pytest.raises(FlagError) as e:
        parse_server_args(["--cuda-graph-max-bs", "160"], "0.5.23")
    assert str(e.value) == (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    assert parse_server_args(["--cuda-graph-max-bs-decode", "160"], "0.5.23") == {"cuda_graph_max_bs_decode": 160}


def test_intermediate_version_keeps_old_spelling_and_has_new() -> None:
    got = parse_server_args(["--cuda-graph-max-bs", "8", "--cuda-graph-max-bs-decode", "4"], "0.5.15")
    assert got == {"cuda_graph_max_bs": 8, "cuda_graph_max_bs_decode": 4}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--foo"], "unrecognized arguments: --foo"),
        (["--tp-size", "x"], "argument --tp-size: invalid int value: 'x'"),
        (["--mem-fraction-static", "high"], "argument --mem-fraction-static: invalid float value: 'high'"),
        (["--enable-metrics=1"], "argument --enable-metrics: ignored explicit argument '1'"),
        (["--port"], "argument --port: expected one argument"),
    ],
)
def test_errors_read_like_argparse(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as e:
        parse_server_args(argv, "0.5.9")
    assert str(e.value) == message
    assert e.value.flag == argv[0].split("=")[0]


def test_choices_per_version() -> None:
    with pytest.raises(FlagError, match="invalid choice: 'nvfp4'"):
        parse_server_args(["--kv-cache-dtype", "nvfp4"], "0.5.9")
    assert parse_server_args(["--kv-cache-dtype", "nvfp4"], "0.5.23") == {"kv_cache_dtype": "nvfp4"}
    assert parse_server_args(["--speculative-algorithm", "DFLASH"], "0.5.23")  # free-form there
    with pytest.raises(FlagError):
        parse_server_args(["--speculative-algorithm", "DFLASH"], "0.5.9")


def test_int_list_and_json() -> None:
    assert parse_server_args(["--cuda-graph-bs", "1", "2", "4"], "0.5.9") == {"cuda_graph_bs": [1, 2, 4]}
    got = parse_server_args(["--cuda-graph-config", '{"decode": {"max_bs": 64}}'], "0.5.23")
    assert got == {"cuda_graph_config": {"decode": {"max_bs": 64}}}
    with pytest.raises(FlagError, match="invalid json value"):
        parse_server_args(["--cuda-graph-config", "{nope"], "0.5.23")


def test_required_model_path() -> None:
    with pytest.raises(FlagError, match="required: --model-path"):
        parse_server_args(["--tp", "2"], "0.5.9", require_model_path=True)


def test_config_file_merges_before_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "server.yaml"
    cfg.write_text("model-path: /models/x\ntensor-parallel-size: 2\nenable-metrics: true\ntrust-remote-code: false\n")
    got = parse_server_args(["--config", str(cfg), "--tp", "4"], "0.5.9")
    assert got == {"model_path": "/models/x", "tp_size": 4, "enable_metrics": True}
    with pytest.raises(FlagError, match="Config file must be YAML format"):
        bad = tmp_path / "server.json"
        bad.write_text("{}")
        parse_server_args(["--config", str(bad)], "0.5.9")
    with pytest.raises(FlagError, match="Config file not found"):
        parse_server_args(["--config", str(tmp_path / "missing.yaml")], "0.5.9")


def test_canonical_accepts_every_spelling() -> None:
    for name in ("--mem-fraction-static", "mem-fraction-static", "mem_fraction_static", "--mem_fraction_static"):
        assert canonical(name, "0.5.9").name == "--mem-fraction-static"
    assert canonical("tp", "0.5.9").dest == "tp_size"
    assert canonical("--tensor-parallel-size", "0.5.23").name == "--tp-size"
    assert canonical("ep", "0.5.23").name == "--ep-size"
    assert canonical("enable-hicache", "0.5.23").name == "--enable-hierarchical-cache"
    with pytest.raises(FlagError, match="ambiguous option: --pp could match"):
        canonical("pp", "0.5.9")
    with pytest.raises(FlagError, match="ambiguous option: --cuda-graph-max-bs could match"):
        canonical("cuda-graph-max-bs", "0.5.23")
    with pytest.raises(FlagError, match="unrecognized arguments: --no-such-flag"):
        canonical("no-such-flag", "0.5.9")
    with pytest.raises(FlagError):
        canonical("attn-dp-size", "0.5.9")


def test_graph_max_bs_flag_per_version() -> None:
    assert graph_max_bs_flag("0.5.9") == "--cuda-graph-max-bs"
    assert graph_max_bs_flag("0.5.14") == "--cuda-graph-max-bs"
    assert graph_max_bs_flag("0.5.15") == "--cuda-graph-max-bs-decode"
    assert graph_max_bs_flag("0.5.23") == "--cuda-graph-max-bs-decode"
    assert graph_max_bs_flag(None) == "--cuda-graph-max-bs"


def test_bad_version() -> None:
    with pytest.raises(FlagError):
        flag_table("latest")


def test_0523_token_counts_take_sglangs_suffixes() -> None:
    """0.5.23 parses --context-length, --max-total-tokens and --max-prefill-tokens with its
    human_readable_int (checked against the wheel by tests/backends/test_flags_sglang_wheel.py); 0.5.9
    with int."""
    args = parse_server_args(["--model-path", "m", "--context-length", "32k", "--max-total-tokens", "1Mi",
                              "--max-prefill-tokens", "25.6k"], "0.5.23")
    assert (args["context_length"], args["max_total_tokens"], args["max_prefill_tokens"]) == (32000, 2**20, 25600)
    with pytest.raises(FlagError, match="context-length"):
        parse_server_args(["--model-path", "m", "--context-length", "1.5Ki"], "0.5.23")
    with pytest.raises(FlagError, match="context-length"):
        parse_server_args(["--model-path", "m", "--context-length", "32k"], "0.5.9")
