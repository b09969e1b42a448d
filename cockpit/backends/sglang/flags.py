"""SGLang's server flags, per version: the one place that knows which flag exists where.

The table is written from SGLang's `server_args.py` (0.5.9 and 0.5.23, see
shared/reference/sglang.md §5). `parse_server_args` runs a real `argparse` parser built from the
table, so abbreviations, ambiguity and type errors behave the way SGLang's own command line does
(Python's argparse does the prefix matching; we only shape the error text). The simulator uses it
to refuse exactly what SGLang would refuse; the command builder uses it to validate profiles.

Versions in between the two we model (e.g. 0.5.15) get a table by version range: every row says
since when it exists and in which version it was removed.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from cockpit.backends import flagtable
from cockpit.backends.base import FlagError

VERSIONS: tuple[str, ...] = ("0.5.9", "0.5.23")
DEFAULT_VERSION = "0.5.9"

# The release that renamed the decode-graph batch-size flags (--cuda-graph-max-bs became a
# deprecated alias there and disappeared by 0.5.23).
GRAPH_FLAGS_RENAMED_IN = "0.5.15"

FlagType = str  # "bool" | "int" | "float" | "str" | "int_list" | "json" | "human_int" (0.5.23's `32k`)


@dataclass(frozen=True)
class FlagSpec:
    name: str  # canonical spelling with dashes: "--mem-fraction-static"
    dest: str  # snake_case key as in SGLang's ServerArgs: "mem_fraction_static"
    type: FlagType
    default: Any  # SGLang's default; None = decided at run time ("auto") or unset
    aliases: tuple[str, ...] = ()  # other spellings argparse accepts exactly: ("--tensor-parallel-size",)
    per_rank: bool = False  # the value applies to every GPU process separately
    choices: tuple[Any, ...] | None = None
    help: str = ""
    deprecated: str | None = None  # the warning SGLang prints when the flag is used, if any

    @property
    def option_strings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def version_key(version: str) -> tuple[int, ...]:
    """"0.5.23" -> (0, 5, 23); tolerant of suffixes like "0.5.9.post1" or "0.5.23rc1"."""
    return flagtable.version_key(version, DEFAULT_VERSION)


def resolve_version(version: str | None) -> str:
    """None -> DEFAULT_VERSION; otherwise the version string, checked for shape."""
    return flagtable.resolve_version(version, DEFAULT_VERSION)


# ---- the table ----------------------------------------------------------------------------------
# Each row: option strings (canonical first), type, default, and keyword extras:
#   since / until (version range, `until` exclusive), per_rank, choices, help, deprecated, dest.

_KV_DTYPES_059 = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
_KV_DTYPES_0523 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
# 0.5.9's server_args.py already lists page_first_kv_split and page_head (checked against the wheel
# by tests/backends/test_flags_sglang_wheel.py)
_HICACHE_LAYOUTS_059 = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head")
_HICACHE_LAYOUTS_0523 = _HICACHE_LAYOUTS_059
_HICACHE_STORAGE_059 = ("file", "mooncake", "hf3fs", "nixl", "aibrix", "dynamic", "eic")
_HICACHE_STORAGE_0523 = (*_HICACHE_STORAGE_059, "sim", "npu_memcache", "simm", "mori", "shm", "tensorcast", "seaweedfs")
_SPEC_ALGOS_059 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
_NEW = "0.5.23"  # flags that exist from 0.5.23 on (we model no release between 0.5.15 and 0.5.23)

_ROWS: list[tuple[tuple[str, ...], FlagType, Any, dict[str, Any]]] = [
    # model and tokenizer
    (("--model-path", "--model"), "str", None, {"help": "The path of the model weights (local folder or Hugging Face repo id)."}),
    (("--tokenizer-path",), "str", None, {}),
    (("--tokenizer-mode",), "str", "auto", {"choices": ("auto", "slow")}),
    (("--skip-tokenizer-init",), "bool", False, {}),
    (("--load-format",), "str", "auto", {}),
    (("--trust-remote-code",), "bool", False, {"help": "Allow custom models defined on the Hub in their own modeling files."}),
    (("--dtype",), "str", "auto", {}),
    (("--quantization",), "str", None, {}),
    (("--context-length",), "int", None, {"until": _NEW, "help": "The model's maximum context length (default: from config.json)."}),
    (("--context-length",), "human_int", None, {"since": _NEW, "help": "The model's maximum context length (default: from config.json)."}),
    (("--device",), "str", None, {}),
    (("--served-model-name",), "str", None, {}),
    (("--chat-template",), "str", None, {}),
    (("--is-embedding",), "bool", False, {}),
    (("--revision",), "str", None, {}),
    (("--language-only",), "bool", False, {}),
    (("--download-dir",), "str", None, {}),
    # HTTP server
    (("--host",), "str", "127.0.0.1", {"help": "The host of the HTTP server."}),
    (("--port",), "int", 30000, {"help": "The port of the HTTP server."}),
    (("--skip-server-warmup",), "bool", False, {"help": "Skip the warmup request after the server starts."}),
    (("--warmups",), "str", None, {}),
    (("--api-key",), "str", None, {}),
    (("--file-storage-path",), "str", "sglang_storage", {"until": _NEW}),
    (("--file-storage-path",), "str", None, {"since": _NEW}),  # 0.5.23's field: Optional[str] = None
    # memory and scheduling
    (("--mem-fraction-static",), "float", None, {
        "per_rank": True,
        "help": "The fraction of the memory used for static allocation (model weights and KV cache memory "
                "pool). Use a smaller value if you see out-of-memory errors.",
    }),
    (("--max-running-requests",), "int", None, {"help": "The maximum number of running requests."}),
    (("--max-queued-requests",), "int", None, {}),
    (("--max-total-tokens",), "int", None, {
        "per_rank": True, "until": _NEW,
        "help": "The maximum number of tokens in the memory pool (per rank; for development and debugging).",
    }),
    (("--max-total-tokens",), "human_int", None, {
        "per_rank": True, "since": _NEW,
        "help": "The maximum number of tokens in the memory pool (per rank; for development and debugging).",
    }),
    (("--chunked-prefill-size",), "int", None, {
        "help": "The maximum number of tokens in a chunk for the chunked prefill. -1 disables chunking.",
    }),
    (("--max-prefill-tokens",), "int", 16384, {"until": _NEW}),
    (("--max-prefill-tokens",), "human_int", 16384, {"since": _NEW}),
    (("--schedule-policy",), "str", "fcfs", {}),
    (("--schedule-conservativeness",), "float", 1.0, {}),
    (("--page-size",), "int", None, {}),
    (("--kv-cache-dtype",), "str", "auto", {"choices": _KV_DTYPES_059, "until": _NEW}),
    (("--kv-cache-dtype",), "str", "auto", {"choices": _KV_DTYPES_0523, "since": _NEW}),
    (("--disable-radix-cache",), "bool", False, {}),
    (("--enable-mixed-chunk",), "bool", False, {}),
    (("--enable-memory-saver",), "bool", False, {}),
    (("--allow-auto-truncate",), "bool", False, {}),
    (("--stream-interval",), "int", 1, {}),
    (("--stream-output",), "bool", False, {"until": _NEW}),  # not a server flag of 0.5.23
    (("--random-seed",), "int", None, {}),
    (("--watchdog-timeout",), "float", 300.0, {"help": "A hang longer than this many seconds crashes the server."}),
    # parallelism
    (("--tp-size", "--tensor-parallel-size"), "int", 1, {"help": "The tensor parallelism size."}),
    (("--dp-size", "--data-parallel-size"), "int", 1, {"help": "The data parallelism size."}),
    (("--pp-size", "--pipeline-parallel-size"), "int", 1, {"help": "The pipeline parallelism size."}),
    (("--pp-max-micro-batch-size",), "int", None, {}),
    (("--pp-async-batch-depth",), "int", 0, {}),
    (("--ep-size", "--ep"), "int", 1, {"until": _NEW, "help": "The expert parallelism size."}),
    (("--ep-size", "--ep", "--expert-parallel-size"), "int", 1, {"since": _NEW, "help": "The expert parallelism size."}),
    (("--moe-a2a-backend",), "str", "none", {}),
    (("--enable-dp-attention",), "bool", False, {"until": _NEW}),
    (("--enable-dp-attention",), "bool", False, {
        "since": _NEW,
        "deprecated": "Use --attn-dp-size <dp-size> instead of --dp-size <dp-size> --enable-dp-attention.",
    }),
    (("--attn-dp-size", "--attention-data-parallel-size"), "int", None, {"since": _NEW}),
    (("--enable-dp-lm-head",), "bool", False, {}),
    (("--nnodes",), "int", 1, {"help": "The number of nodes."}),
    (("--node-rank",), "int", 0, {"help": "The node rank."}),
    (("--dist-init-addr", "--nccl-init-addr"), "str", None, {
        "help": "The host address for initializing distributed backend (e.g., `192.168.0.2:25000`).",
    }),
    (("--dist-timeout",), "int", None, {}),
    (("--base-gpu-id",), "int", 0, {}),
    (("--gpu-id-step",), "int", 1, {}),
    # logging and metrics
    (("--log-level",), "str", "info", {}),
    (("--log-level-http",), "str", None, {}),
    (("--log-requests",), "bool", False, {}),
    (("--log-requests-level",), "int", 2, {"choices": (0, 1, 2, 3)}),
    (("--show-time-cost",), "bool", False, {}),
    (("--enable-metrics",), "bool", False, {"help": "Enable Prometheus metrics (/metrics)."}),
    (("--enable-metrics-for-all-schedulers",), "bool", False, {}),
    (("--decode-log-interval",), "int", 40, {"help": "Decode iterations between `Decode batch` log lines."}),
    (("--enable-cache-report",), "bool", False, {}),
    # kernels and backends
    (("--attention-backend",), "str", None, {}),
    (("--sampling-backend",), "str", None, {}),
    (("--grammar-backend",), "str", None, {}),
    (("--disable-overlap-schedule",), "bool", False, {}),
    (("--enable-torch-compile",), "bool", False, {}),
    (("--torch-compile-max-bs",), "int", 32, {}),
    (("--tool-call-parser",), "str", None, {}),
    (("--reasoning-parser",), "str", None, {}),
    (("--json-model-override-args",), "str", "{}", {}),
    # CUDA graphs: renamed in 0.5.15, old spellings gone in 0.5.23
    (("--cuda-graph-max-bs",), "int", None, {
        "until": _NEW, "per_rank": True,
        "help": "Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this value.",
    }),
    (("--cuda-graph-bs",), "int_list", None, {"until": _NEW, "per_rank": True}),
    (("--enable-piecewise-cuda-graph",), "bool", False, {"until": _NEW}),
    (("--piecewise-cuda-graph-max-tokens",), "int", None, {"until": _NEW}),
    (("--cuda-graph-max-bs-decode",), "int", None, {"since": GRAPH_FLAGS_RENAMED_IN, "per_rank": True,
                                                    "help": "The largest decode batch captured as a CUDA graph."}),
    (("--cuda-graph-max-bs-prefill",), "int", None, {"since": GRAPH_FLAGS_RENAMED_IN, "per_rank": True}),
    (("--cuda-graph-bs-decode",), "int_list", None, {"since": GRAPH_FLAGS_RENAMED_IN, "per_rank": True}),
    (("--cuda-graph-bs-prefill",), "int_list", None, {"since": GRAPH_FLAGS_RENAMED_IN, "per_rank": True}),
    # unset on the command line: folded into cuda_graph_config at run time (decode "full", prefill
    # "breakable" by default, as the plan reads them), so the parser's default is None
    (("--cuda-graph-backend-decode",), "str", None, {"since": _NEW, "choices": ("full", "breakable", "disabled")}),
    (("--cuda-graph-backend-prefill",), "str", None, {"since": _NEW, "choices": ("full", "breakable", "disabled")}),
    (("--cuda-graph-config",), "json", None, {"since": _NEW}),
    (("--disable-decode-cuda-graph",), "bool", False, {"since": _NEW}),
    (("--disable-prefill-cuda-graph",), "bool", False, {"since": _NEW}),
    (("--disable-cuda-graph",), "bool", False, {"until": _NEW, "help": "Disable cuda graph."}),
    (("--disable-cuda-graph",), "bool", False, {
        "since": _NEW,
        "deprecated": "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
                      "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.",
    }),
    (("--disable-cuda-graph-padding",), "bool", False, {}),
    # hierarchical cache (HiCache): sizes are per rank, in decimal GB
    (("--enable-hierarchical-cache",), "bool", False, {"until": _NEW, "help": "Enable hierarchical cache."}),
    (("--enable-hierarchical-cache", "--enable-hicache"), "bool", False, {"since": _NEW, "help": "Enable hierarchical cache."}),
    (("--hicache-ratio",), "float", 2.0, {
        "until": _NEW, "per_rank": True,
        "help": "The ratio of the size of host KV cache memory pool to the size of device pool.",
    }),
    (("--hicache-ratio",), "float", None, {
        "since": _NEW, "per_rank": True,
        "help": "The ratio of the size of host KV cache memory pool to the size of device pool.",
    }),
    (("--hicache-size",), "int", 0, {
        "per_rank": True,
        "help": "The size of host KV cache memory pool in gigabytes (per rank), which will override the "
                "hicache_ratio if set.",
    }),
    (("--hicache-host-memory-fraction",), "float", 0.8, {"since": _NEW}),
    (("--hicache-write-policy",), "str", "write_through", {
        "choices": ("write_back", "write_through", "write_through_selective"),
    }),
    (("--hicache-io-backend",), "str", "kernel", {"choices": ("direct", "kernel", "kernel_ascend")}),
    (("--hicache-mem-layout",), "str", "layer_first", {"until": _NEW, "choices": _HICACHE_LAYOUTS_059}),
    (("--hicache-mem-layout",), "str", "page_first", {"since": _NEW, "choices": _HICACHE_LAYOUTS_0523}),
    (("--hicache-storage-backend",), "str", None, {"until": _NEW, "choices": _HICACHE_STORAGE_059}),
    (("--hicache-storage-backend",), "str", None, {"since": _NEW, "choices": _HICACHE_STORAGE_0523}),
    (("--hicache-storage-prefetch-policy",), "str", "best_effort", {"until": _NEW}),
    (("--hicache-storage-prefetch-policy",), "str", "timeout", {  # 0.5.23's default changed
        "since": _NEW, "choices": ("best_effort", "wait_complete", "timeout")}),
    # speculative decoding
    (("--speculative-algorithm",), "str", None, {"until": _NEW, "choices": _SPEC_ALGOS_059}),
    (("--speculative-algorithm",), "str", None, {"since": _NEW}),
    (("--speculative-draft-model-path", "--speculative-draft-model"), "str", None, {}),
    (("--speculative-num-steps",), "int", None, {}),
    (("--speculative-eagle-topk",), "int", None, {}),
    (("--speculative-num-draft-tokens",), "int", None, {}),
    (("--speculative-draft-kv-cache-dtype",), "str", None, {"since": _NEW}),
    # prefill/decode disaggregation (server_args.py; the memory plan reads the role)
    (("--disaggregation-mode",), "str", "null", {"choices": ("null", "prefill", "decode")}),
    (("--disaggregation-transfer-backend",), "str", "mooncake", {}),
    (("--disaggregation-bootstrap-port",), "int", 8998, {}),
    (("--disaggregation-ib-device",), "str", None, {}),
    (("--num-reserved-decode-tokens",), "int", 512, {}),
    # a YAML file of flags, merged in front of the command line
    (("--config",), "str", None, {"help": "Read flags from a YAML file (CLI flags override it)."}),
]


# ---- bounds: the numbers each numeric flag may take (issue 40) -----------------------------------
# By dest, apart from the rows (whose types and defaults are checked against SGLang's parser): a
# number outside is refused before launch, naming the range (flagtable.check_bounds). SGLang's
# argparse takes any int or float; its own checks (server_args.py `check_server_args`) are few, so
# most bounds are what the number is: a count of GPUs or requests, a TCP port, a fraction.
_B = flagtable.Bound
_PORT = _B(1, 65535, why="a TCP port")
_COUNT = _B(1, why="a count")
_SIZE = _B(1, why="a size in tokens or requests")
BOUNDS: dict[str, flagtable.Bound] = {
    "port": _PORT,
    "disaggregation_bootstrap_port": _PORT,
    "tp_size": _B(1, why="a number of GPUs"),
    "dp_size": _B(1, why="a number of replicas"),
    "pp_size": _B(1, why="a number of pipeline stages"),
    "ep_size": _B(1, why="a number of GPUs"),
    "attn_dp_size": _B(1, why="a number of replicas"),
    "nnodes": _B(1, why="a number of nodes"),
    "node_rank": _B(0, why="a node's index"),
    "base_gpu_id": _B(0, why="SGLang's check_server_args: base_gpu_id must be non-negative"),
    "gpu_id_step": _B(1, why="SGLang's check_server_args: gpu_id_step must be positive"),
    "mem_fraction_static": _B(0, 1, low_open=True, why="a fraction of the GPU's memory"),
    "hicache_ratio": _B(0, low_open=True, why="host pool ÷ device pool, per rank"),
    "hicache_size": _B(0, why="GB per rank; 0 sizes the host pool by --hicache-ratio"),
    "hicache_host_memory_fraction": _B(0, 1, low_open=True, why="a fraction of the host's memory"),
    "max_running_requests": _SIZE,
    "max_queued_requests": _SIZE,
    "max_total_tokens": _SIZE,
    "max_prefill_tokens": _SIZE,
    "context_length": _SIZE,
    "page_size": _SIZE,
    "stream_interval": _COUNT,
    "decode_log_interval": _COUNT,
    "torch_compile_max_bs": _SIZE,
    "cuda_graph_max_bs": _SIZE,
    "cuda_graph_bs": _SIZE,
    "cuda_graph_max_bs_decode": _SIZE,
    "cuda_graph_max_bs_prefill": _SIZE,
    "cuda_graph_bs_decode": _SIZE,
    "cuda_graph_bs_prefill": _SIZE,
    "pp_max_micro_batch_size": _SIZE,
    "piecewise_cuda_graph_max_tokens": _SIZE,
    "pp_async_batch_depth": _B(0, why="a depth"),
    "num_reserved_decode_tokens": _B(0, why="a number of tokens"),
    "speculative_num_steps": _COUNT,
    "speculative_eagle_topk": _COUNT,
    "speculative_num_draft_tokens": _COUNT,
    "watchdog_timeout": _B(0, low_open=True, why="seconds"),
    "dist_timeout": _B(1, why="seconds"),
    "schedule_conservativeness": _B(0, why="a factor"),
}


@functools.lru_cache(maxsize=32)
def _table(version: str) -> dict[str, FlagSpec]:
    vk = version_key(version)
    out: dict[str, FlagSpec] = {}
    for names, ftype, default, extra in _ROWS:
        if not flagtable.in_range(vk, extra, DEFAULT_VERSION):
            continue
        spec = FlagSpec(
            name=names[0],
            dest=extra.get("dest", flagtable.dest_of(names[0])),
            type=ftype,
            default=default,
            aliases=tuple(names[1:]),
            per_rank=bool(extra.get("per_rank", False)),
            choices=extra.get("choices"),
            help=extra.get("help", ""),
            deprecated=extra.get("deprecated"),
        )
        if spec.dest in out:  # a row per version range must not overlap
            raise AssertionError(f"flag table: {spec.name} defined twice for {version}")
        out[spec.dest] = spec
    return out


def flag_table(version: str | None = None) -> dict[str, FlagSpec]:
    """Every flag the given SGLang version accepts, keyed by dest (snake_case)."""
    return dict(_table(resolve_version(version)))


def graph_max_bs_flag(version: str | None = None) -> str:
    """The flag that caps the decode CUDA-graph batch size, spelled as this version accepts it."""
    if version_key(resolve_version(version)) >= version_key(GRAPH_FLAGS_RENAMED_IN):
        return "--cuda-graph-max-bs-decode"
    return "--cuda-graph-max-bs"


# ---- argparse, SGLang-shaped --------------------------------------------------------------------


_json_value = flagtable.json_type("json")
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(value: str) -> int:
    """0.5.23's token counts (`--context-length 32k`): SI suffixes k M G T (decimals allowed),
    IEC Ki Mi Gi Ti (integers only), case-sensitive; else a plain integer (SGLang's
    `utils.common.human_readable_int`, whose name argparse's error repeats)."""
    text = value.strip()
    m = _HUMAN_INT.fullmatch(text)
    if m is None:
        return int(text)
    number, suffix = m.groups()
    if suffix in _IEC:
        if "." in number:
            raise ValueError(value)
        return int(number) * _IEC[suffix]
    from decimal import Decimal  # here: ~1 ms of every diagnose's start-up otherwise

    return int(Decimal(number) * _SI[suffix])


@functools.lru_cache(maxsize=32)
def _parser(version: str) -> flagtable.RaisingArgParser:
    p = flagtable.RaisingArgParser(prog="sglang serve", add_help=False, allow_abbrev=True)
    types: flagtable.ArgTypes = {"int": int, "float": float, "str": str, "int_list": int, "json": _json_value,
                                 "human_int": human_readable_int}
    for spec in _table(version).values():
        flagtable.add_flag(p, spec, types)
    return p


def _flag_error(message: str) -> FlagError:
    return flagtable.flag_error(message, "--")


def _expand_config(argv: list[str], version: str) -> list[str]:
    """SGLang's `--config file.yaml`: its keys become flags placed before the command line."""
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise FlagError("--config", "Only one --config argument is allowed")
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise FlagError("--config", "argument --config: expected one argument")
    from pathlib import Path  # here: pathlib (with urllib.parse) costs ~3 ms of diagnose's start-up

    path = Path(argv[i + 1])
    rest = argv[:i] + argv[i + 2 :]
    if path.suffix not in (".yaml", ".yml"):
        raise FlagError("--config", f"Config file must be YAML format, got: {path}")
    if not path.is_file():
        raise FlagError("--config", f"Config file not found: {path}")
    import yaml  # local: only the simulator and `check` ever read such a file

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise FlagError("--config", f"Config file {path} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise FlagError("--config", f"Config file {path} must contain a mapping at the top level")
    merged: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if value is True:
            merged.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            merged.append(flag)
            merged.extend(str(v) for v in value)
        elif isinstance(value, dict):
            merged.extend([flag, json.dumps(value)])
        else:
            merged.extend([flag, str(value)])
    return merged + rest


def parse_server_args(argv: list[str], version: str | None = None, *, require_model_path: bool = False) -> dict[str, Any]:
    """Parse a server command line the way that SGLang version's argparse would.

    Returns dest -> typed value for the flags given (defaults are not filled in). Raises FlagError
    with argparse's own wording: `ambiguous option: --pp could match --pp-size, …`,
    `unrecognized arguments: --foo`, `argument --tp-size: invalid int value: 'x'`.
    """
    v = resolve_version(version)
    args = _expand_config(list(argv), v)
    try:
        ns = _parser(v).parse_args(args)
    except flagtable.Refusal as exc:
        raise _flag_error(str(exc)) from None
    out = dict(vars(ns))
    out.pop("config", None)
    if require_model_path and "model_path" not in out:
        raise FlagError("--model-path", "the following arguments are required: --model-path")
    return out


def canonical(name: str, version: str | None = None) -> FlagSpec:
    """The flag a name refers to, as SGLang would resolve it.

    Accepts `--mem-fraction-static`, `mem-fraction-static`, `mem_fraction_static`, aliases
    (`--tensor-parallel-size`) and unique prefixes (`--tp`). Raises FlagError when the name is
    unknown or ambiguous in that version.
    """
    v = resolve_version(version)
    table = _table(v)
    raw = name.strip()
    bare = raw.lstrip("-").replace("_", "-")
    if not bare:
        raise FlagError(raw, f"not a flag name: {raw!r}")
    opt = "--" + bare
    by_option: dict[str, FlagSpec] = flagtable.by_option(table)
    if opt in by_option:
        return by_option[opt]
    matches = [o for o in by_option if o.startswith(opt)]
    if len(matches) == 1:
        return by_option[matches[0]]
    if len(matches) > 1:
        raise FlagError(raw, f"ambiguous option: {opt} could match {', '.join(matches)}")
    hint = ""
    if bare in ("cuda-graph-max-bs", "cuda-graph-bs") and version_key(v) >= version_key(GRAPH_FLAGS_RENAMED_IN):
        hint = f" (SGLang {v} spells it {graph_max_bs_flag(v) if bare == 'cuda-graph-max-bs' else '--cuda-graph-bs-decode'})"
    raise FlagError(raw, f"unrecognized arguments: {opt}{hint} (not a flag of SGLang {v})")


def value_to_argv(spec: FlagSpec, value: Any) -> list[str]:
    """One flag and its value as argv items: bools are a bare flag or nothing, lists repeat values."""
    if spec.type == "bool":
        return [spec.name] if value else []
    return flagtable.valued_argv(spec.name, spec.type, value)
