"""vLLM's `vllm serve` flags, per version: the one place that knows which flag exists where.

Two releases are modelled (shared/reference/vllm.md §1, §5; strings checked against vLLM's
`engine/arg_utils.py` and `config/*.py`): **0.33.0**, the current release, and **0.16.0**
(Feb 2026), the older release most met in the field. A version in between gets the rows whose
`since`/`until` range covers it.

`parse_serve_args` runs a real `argparse` parser built from the table (vLLM's
FlexibleArgumentParser is an argparse subclass with abbreviations on), so prefixes
(`--kv-cache-memory=` → `--kv-cache-memory-bytes`), ambiguity and type errors behave as vLLM's own
command line does. Flags vLLM renamed or removed are refused with the new spelling named.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from cockpit.backends import flagtable
from cockpit.backends.base import FlagError

VERSIONS: tuple[str, ...] = ("0.16.0", "0.33.0")
DEFAULT_VERSION = "0.33.0"
# --gpu-memory-utilization's default moved 0.9 -> 0.92 in 0.20 (with the CUDA-graph estimate).
UTIL_DEFAULT_CHANGED_IN = "0.20.0"
SWAP_SPACE_REMOVED_IN = "0.18.0"

FlagType = str  # "bool" | "int" | "float" | "str" | "int_list" | "str_list" | "json" | "bytes" | "len" | "count"


@dataclass(frozen=True)
class FlagSpec:
    name: str  # canonical spelling: "--gpu-memory-utilization"
    dest: str  # snake_case as in vLLM's EngineArgs: "gpu_memory_utilization"
    type: FlagType
    default: Any  # None = decided at start-up ("auto") or unset
    aliases: tuple[str, ...] = ()
    per_rank: bool = False  # the value applies to every GPU separately
    choices: tuple[Any, ...] | None = None
    help: str = ""
    negatable: bool = False  # a BooleanOptionalAction: `--no-<flag>` exists

    @property
    def option_strings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def version_key(version: str) -> tuple[int, ...]:
    """"0.33.0" -> (0, 33, 0); tolerant of "0.10.1.1" and "0.11.0rc2"."""
    return flagtable.version_key(version, DEFAULT_VERSION)


def resolve_version(version: str | None) -> str:
    return flagtable.resolve_version(version, DEFAULT_VERSION)


def default_util(version: str | None) -> float:
    """vLLM's --gpu-memory-utilization default for this version."""
    return 0.92 if version_key(resolve_version(version)) >= version_key(UTIL_DEFAULT_CHANGED_IN) else 0.9


# ---- renamed and removed flags -------------------------------------------------------------------
# old spelling -> (since which version it is refused, what the operator should do instead)
RENAMED: dict[str, tuple[str, str]] = {
    "--cuda-graph-sizes": ("0.11.1", "use --cudagraph-capture-sizes (the list) or --max-cudagraph-capture-size (the largest size)"),
    "--max-seq-len-to-capture": ("0.11.1", "use --max-cudagraph-capture-size"),
    "--swap-space": (SWAP_SPACE_REMOVED_IN, "drop it: the V1 engine has no CPU swap space (preempted requests are recomputed)"),
    "--preemption-mode": ("0.11.0", "drop it: the V1 engine always recomputes preempted requests"),
    "--disable-log-requests": ("0.11.0", "drop it: request logging is off by default (--enable-log-requests turns it on)"),
    "--kv-cache-memory-gb": ("0.11.0", "use --kv-cache-memory-bytes (bytes per GPU, e.g. 20G)"),
}

# ---- the table ----------------------------------------------------------------------------------
_OLD = "0.16.0"
_KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
# Rows marked `since: _CHECKED` are what tests/real_engine/test_flags_vllm.py found in 0.32.0's own
# parser (the real-engine tier's engine) where the rows before differ; the earlier rows stay as
# written from the docs (no engine of theirs is installed to check them against).
_CHECKED = "0.32.0"
_DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")
_KV_DTYPES_032 = ("auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                  "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head", "nvfp4", "nvfp4_4over6",
                  "nvfp4_ds_mla", "turboquant_3bit_nc", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4",
                  "ultraquant_4bit")
_UVICORN_LEVELS = ("critical", "debug", "error", "info", "trace", "warning")
_CG_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")

_ROWS: list[tuple[tuple[str, ...], FlagType, Any, dict[str, Any]]] = [
    # model
    (("--model",), "str", None, {"help": "Name or path of the Hugging Face model (the `serve MODEL` positional)."}),
    (("--tokenizer",), "str", None, {}),
    (("--revision",), "str", None, {}),
    (("--dtype",), "str", "auto", {"until": _CHECKED}),
    (("--dtype",), "str", "auto", {"since": _CHECKED, "choices": _DTYPES}),
    (("--quantization", "-q"), "str", None, {}),
    (("--trust-remote-code",), "bool", False, {"negatable": True}),
    (("--served-model-name",), "str", None, {"until": _CHECKED}),
    (("--served-model-name",), "str_list", None, {"since": _CHECKED, "help": "The model's names in the API, one or more (the first in metrics)."}),
    (("--max-model-len",), "len", None, {"help": "Model context length (default: from the model config; 1k, 32K, auto)."}),
    (("--load-format",), "str", "auto", {}),
    (("--download-dir",), "str", None, {}),
    (("--seed",), "int", None, {}),
    # parallelism
    (("--tensor-parallel-size", "-tp"), "int", 1, {"help": "Number of tensor parallel groups."}),
    (("--pipeline-parallel-size", "-pp"), "int", 1, {}),
    (("--data-parallel-size", "-dp"), "int", 1, {}),
    (("--data-parallel-size-local", "-dpl"), "int", None, {}),
    # DP across nodes: the head's address and RPC port, and where this node's DP ranks start
    (("--data-parallel-address", "-dpa"), "str", None, {}),
    (("--data-parallel-rpc-port", "-dpp"), "int", None, {}),
    (("--data-parallel-start-rank", "-dpr"), "int", None, {}),
    (("--enable-expert-parallel",), "bool", False, {"negatable": True, "help": "Use expert parallelism for MoE layers."}),
    (("--distributed-executor-backend",), "str", None, {"choices": ("mp", "ray", "uni", "external_launcher")}),
    (("--nnodes", "-n"), "int", 1, {"since": "0.11.1"}),
    (("--node-rank", "-r"), "int", 0, {"since": "0.11.1"}),
    (("--headless",), "bool", False, {"help": "Run only the engine (no API server): the other nodes of a multi-node run."}),
    (("--distributed-timeout-seconds",), "int", None, {"since": "0.11.1"}),
    (("--master-addr",), "str", "127.0.0.1", {"since": "0.11.1"}),
    (("--master-port",), "int", 29501, {"since": "0.11.1"}),
    # memory and KV cache
    (("--gpu-memory-utilization",), "float", 0.9, {
        "until": UTIL_DEFAULT_CHANGED_IN, "per_rank": True,
        "help": "The fraction of TOTAL GPU memory this instance may use (weights, activations, KV cache).",
    }),
    (("--gpu-memory-utilization", "--device-memory-utilization"), "float", 0.92, {
        "since": UTIL_DEFAULT_CHANGED_IN, "per_rank": True,
        "help": "The fraction of TOTAL GPU memory this instance may use (weights, activations, KV cache, "
                "CUDA-graph estimate).",
    }),
    (("--kv-cache-memory-bytes",), "bytes", None, {
        "per_rank": True,
        "help": "KV cache bytes per GPU (e.g. 20G); ignores --gpu-memory-utilization.",
    }),
    (("--swap-space",), "float", 4, {"until": SWAP_SPACE_REMOVED_IN}),
    (("--cpu-offload-gb",), "float", 0, {"per_rank": True}),
    (("--kv-cache-dtype",), "str", "auto", {"until": _CHECKED, "choices": _KV_DTYPES}),
    (("--kv-cache-dtype",), "str", "auto", {"since": _CHECKED, "choices": _KV_DTYPES_032}),
    (("--block-size",), "int", None, {}),
    (("--num-gpu-blocks-override",), "int", None, {}),
    (("--enable-prefix-caching",), "bool", None, {"negatable": True}),
    # scheduling
    (("--max-num-seqs",), "int", None, {"help": "Maximum number of sequences per iteration."}),
    (("--max-num-batched-tokens",), "int", None, {"until": _CHECKED, "help": "Maximum number of tokens per iteration."}),
    (("--max-num-batched-tokens",), "count", None, {"since": _CHECKED, "help": "Maximum number of tokens per iteration (8192, 8k, 8K)."}),
    (("--enable-chunked-prefill",), "bool", None, {"negatable": True}),
    (("--performance-mode",), "str", "balanced", {"since": "0.20.0", "choices": ("balanced", "interactivity", "throughput")}),
    # compilation and CUDA graphs
    (("--enforce-eager",), "bool", False, {"negatable": True, "help": "Always use eager mode: no CUDA graphs."}),
    (("--compilation-config", "-cc"), "json", None, {"help": "torch.compile / CUDA-graph config (JSON or -cc.key=value)."}),
    (("--optimization-level", "-O"), "int", None, {"since": "0.11.1"}),
    (("--cudagraph-capture-sizes",), "int_list", None, {"since": "0.11.1", "per_rank": True}),
    (("--max-cudagraph-capture-size",), "int", None, {"since": "0.11.1", "per_rank": True,
                                                      "help": "The largest batch size captured as a CUDA graph."}),
    # HTTP server
    (("--host",), "str", None, {}),
    (("--port",), "int", 8000, {"help": "The port of the HTTP server."}),
    (("--api-key",), "str", None, {"until": _CHECKED}),
    (("--api-key",), "str_list", None, {"since": _CHECKED}),
    (("--api-server-count", "-asc"), "int", None, {}),
    (("--uvicorn-log-level",), "str", "info", {"until": _CHECKED}),
    (("--uvicorn-log-level",), "str", "info", {"since": _CHECKED, "choices": _UVICORN_LEVELS}),
    (("--disable-uvicorn-access-log",), "bool", False, {"negatable": True}),
    (("--disable-log-stats",), "bool", False, {}),
    (("--enable-log-requests",), "bool", False, {"negatable": True}),
    (("--disable-log-requests",), "bool", False, {"until": "0.11.0"}),
    (("--chat-template",), "str", None, {}),
    (("--tool-call-parser",), "str", None, {}),
    (("--enable-auto-tool-choice",), "bool", False, {"until": _CHECKED}),
    (("--enable-auto-tool-choice",), "bool", False, {"since": _CHECKED, "negatable": True}),
    (("--reasoning-parser",), "str", None, {}),
    (("--generation-config",), "str", "auto", {}),
    # speculative decoding
    (("--speculative-config",), "json", None, {}),
    # prefill/decode disaggregation: the KV connector and this instance's role (kv_producer / kv_consumer / kv_both)
    (("--kv-transfer-config",), "json", None, {}),
]

# ---- bounds: the numbers each numeric flag may take (issue 40) -----------------------------------
# By dest, apart from the rows: vLLM's own constraints where its config classes state them
# (pydantic `Field(ge=…, gt=…, le=…)` in vllm/config/*.py, checked against 0.32.0), else what the
# number is. vLLM refuses these only after its imports (seconds to a minute); the gate does first.
_B = flagtable.Bound
_PORT = _B(1, 65535, why="a TCP port")
BOUNDS: dict[str, flagtable.Bound] = {
    "port": _PORT,
    "master_port": _PORT,
    "tensor_parallel_size": _B(1, why="vLLM's ParallelConfig: ge=1"),
    "pipeline_parallel_size": _B(1, why="vLLM's ParallelConfig: ge=1"),
    "data_parallel_size": _B(1, why="vLLM's ParallelConfig: ge=1"),
    "data_parallel_size_local": _B(0, why="vLLM's ParallelConfig: ge=0"),
    "data_parallel_rpc_port": _PORT,
    "data_parallel_start_rank": _B(0, why="a DP rank: 0 or more"),
    "nnodes": _B(1, why="vLLM's ParallelConfig: ge=1"),
    "node_rank": _B(0, why="vLLM's ParallelConfig: ge=0"),
    "gpu_memory_utilization": _B(0, 1, low_open=True, why="vLLM's CacheConfig: gt=0, le=1"),
    "block_size": _B(0, low_open=True, why="vLLM's CacheConfig: gt=0"),
    "cpu_offload_gb": _B(0, why="vLLM's OffloadConfig: ge=0"),
    "swap_space": _B(0, why="GiB of CPU memory"),
    "kv_cache_memory_bytes": _B(0, why="bytes"),
    "num_gpu_blocks_override": _B(1, why="a number of blocks"),
    "max_num_seqs": _B(1, why="vLLM's SchedulerConfig: ge=1"),
    "max_num_batched_tokens": _B(1, why="vLLM's SchedulerConfig: ge=1"),
    "max_model_len": _B(-1, why="vLLM's ModelConfig: ge=-1 (-1: the model's own)"),
    "max_cudagraph_capture_size": _B(0, why="a batch size"),
    "cudagraph_capture_sizes": _B(1, why="batch sizes"),
    "api_server_count": _B(1, why="a count"),
    "optimization_level": _B(0, 3, why="vLLM's OptimizationLevel: O0 to O3"),
    "distributed_timeout_seconds": _B(1, why="seconds"),
}


@functools.lru_cache(maxsize=32)
def _table(version: str) -> dict[str, FlagSpec]:
    vk = version_key(version)
    out: dict[str, FlagSpec] = {}
    for names, ftype, default, extra in _ROWS:
        if not flagtable.in_range(vk, extra, DEFAULT_VERSION):
            continue
        spec = FlagSpec(
            name=names[0], dest=flagtable.dest_of(names[0]), type=ftype, default=default, aliases=tuple(names[1:]),
            per_rank=bool(extra.get("per_rank", False)), choices=extra.get("choices"),
            help=extra.get("help", ""), negatable=bool(extra.get("negatable", False)),
        )
        if spec.dest in out:
            raise AssertionError(f"flag table: {spec.name} defined twice for {version}")
        out[spec.dest] = spec
    return out


def flag_table(version: str | None = None) -> dict[str, FlagSpec]:
    """Every flag the given vLLM version accepts, keyed by dest (snake_case)."""
    return dict(_table(resolve_version(version)))


# ---- value types --------------------------------------------------------------------------------

_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT]?)$")
# vLLM's human_readable_int: lower-case suffixes are decimal, upper-case binary.
_MULT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_bytes(s: str) -> int:
    """`40093519708`, `20G` (GiB), `20g` (GB) -> bytes."""
    m = _HUMAN.match(s.strip())
    if not m:
        raise ValueError(s)
    return int(float(m.group(1)) * _MULT[m.group(2)])


human_bytes.__name__ = "human_readable_int"


def model_len(s: str) -> int | str:
    """`--max-model-len`: an int, `1k` / `32K` / `25.6k`, or `auto` / `-1` (fit to memory)."""
    if s.strip().lower() in ("auto", "-1"):
        return "auto"
    return human_bytes(s)


model_len.__name__ = "human_readable_int_or_auto"


_json_value = flagtable.json_type("loads")


# ---- argparse, vLLM-shaped ---------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _parser(version: str) -> flagtable.RaisingArgParser:
    p = flagtable.RaisingArgParser(prog="vllm serve", add_help=False, allow_abbrev=True)
    p.add_argument("model_tag", nargs="?", default=argparse.SUPPRESS)
    types: flagtable.ArgTypes = {"int": int, "float": float, "str": str, "int_list": int, "str_list": str,
                               "json": _json_value, "bytes": human_bytes, "len": model_len, "count": human_bytes}
    for spec in _table(version).values():
        flagtable.add_flag(p, spec, types, argparse.BooleanOptionalAction if spec.negatable else "store_true")
    return p


def _flag_error(message: str) -> FlagError:
    return flagtable.flag_error(message, "-{1,2}")


def _renamed_error(opt: str, version: str) -> FlagError | None:
    row = RENAMED.get(opt)
    if row is None or version_key(version) < version_key(row[0]):
        return None
    return FlagError(opt, f"unrecognized arguments: {opt} (vLLM {version} no longer has it; {row[1]})")


_DOTTED = re.compile(r"^(-cc|--compilation-config)\.([\w.]+)(?:=(.*))?$")


def _fold_dotted(argv: list[str]) -> list[str]:
    """vLLM's `-cc.cudagraph_mode=PIECEWISE` dotted keys -> one `--compilation-config JSON`."""
    merged: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        m = _DOTTED.match(argv[i])
        if not m:
            rest.append(argv[i])
            i += 1
            continue
        value = m.group(3)
        if value is None:
            if i + 1 >= len(argv):
                raise FlagError(m.group(1), f"argument {argv[i]}: expected one argument")
            value = argv[i + 1]
            i += 1
        i += 1
        node = merged
        keys = m.group(2).split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        try:
            node[keys[-1]] = json.loads(value)
        except ValueError:
            node[keys[-1]] = value
    if merged:
        rest += ["--compilation-config", json.dumps(merged)]
    return rest


def parse_serve_args(argv: list[str], version: str | None = None, *, require_model: bool = False) -> dict[str, Any]:
    """Parse `vllm serve` arguments (everything after `serve`) as that vLLM version would.

    Returns dest -> typed value for what was given (defaults are not filled in); the positional
    model lands in `model`. Raises FlagError with argparse's wording, or naming the new flag for
    one vLLM renamed or removed.
    """
    v = resolve_version(version)
    for tok in argv:
        if tok.startswith("--"):
            err = _renamed_error(tok.split("=", 1)[0], v)
            if err is not None:
                raise err
    args = _fold_dotted(list(argv))
    try:
        ns = _parser(v).parse_args(args)
    except flagtable.Refusal as exc:
        raise _flag_error(str(exc)) from None
    out = dict(vars(ns))
    table = _table(v)
    for dest, value in list(out.items()):
        if isinstance(value, list) and dest in table and table[dest].type == "str_list" and len(value) == 1:
            out[dest] = value[0]  # one name, one key: the text, as a profile writes it
    tag = out.pop("model_tag", None)
    if tag is not None:
        if "model" in out and out["model"] != tag:
            raise FlagError("--model", f"the model is given twice: serve {tag} and --model {out['model']}")
        out["model"] = tag
    if require_model and "model" not in out:
        raise FlagError("--model", "the following arguments are required: model_tag (vllm serve MODEL)")
    return out


def canonical(name: str, version: str | None = None) -> FlagSpec:
    """The flag a name refers to, as vLLM would resolve it (aliases, unique prefixes, `-tp`).

    Raises FlagError for an unknown or ambiguous name, and for one vLLM renamed or removed,
    naming what to use instead.
    """
    v = resolve_version(version)
    table = _table(v)
    raw = name.strip()
    bare = raw.lstrip("-").replace("_", "-")
    if not bare:
        raise FlagError(raw, f"not a flag name: {raw!r}")
    by_option: dict[str, FlagSpec] = flagtable.by_option(table)
    for opt in ("--" + bare, "-" + bare):
        if opt in by_option:
            return by_option[opt]
    opt = "--" + bare
    err = _renamed_error(opt, v)
    if err is not None:
        raise err
    matches = [o for o in by_option if o.startswith(opt)]
    if len(matches) == 1:
        return by_option[matches[0]]
    if len(matches) > 1:
        raise FlagError(raw, f"ambiguous option: {opt} could match {', '.join(matches)}")
    raise FlagError(raw, f"unrecognized arguments: {opt} (not a flag of vLLM {v})")


def value_to_argv(spec: FlagSpec, value: Any) -> list[str]:
    """One flag and its value as argv items (`--no-x` for a negatable flag set to false)."""
    if spec.type == "bool":
        if value:
            return [spec.name]
        return ["--no-" + spec.name[2:]] if spec.negatable and value is False else []
    return flagtable.valued_argv(spec.name, spec.type, value)
