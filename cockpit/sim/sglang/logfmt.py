"""Writing SGLang-shaped log records to stderr.

Every record is one `os.write` of whole lines, so that the main process and the eight rank
processes, which share the same stderr, never interleave inside a line (the same guarantee real
SGLang gets from its logging handlers, as long as lines stay short of the pipe buffer).
Timestamps are wall-clock local time; the `elapsed=` values inside messages are simulated seconds.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cockpit.backends.sglang import flags
from cockpit.sim.output import write_raw
from cockpit.sim.sglang.config import SimConfig


def timestamp() -> str:
    now = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes"):
        text += f".{int((now % 1) * 1000):03d}"
    return text


class Log:
    """The logger of one process: main ("" prefix) or a scheduler ("TP3", "DP1 TP3", ...)."""

    def __init__(self, prefix: str = "", fd: int = 2):
        self.prefix = f" {prefix}" if prefix else ""
        self.fd = fd

    def info(self, msg: str) -> None:
        write_raw(f"[{timestamp()}{self.prefix}] {msg}\n", self.fd)

    def raw(self, text: str) -> None:
        write_raw(text, self.fd)

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        # uvicorn pads "LEVEL:" to 9 characters, then the format adds one space
        write_raw(f"[{timestamp()}] {(level + ':').ljust(9)} {msg}\n", self.fd)


def fmt_size(num_bytes: float) -> str:
    """PyTorch's allocator size format (B, KiB, MiB, GiB with two decimals)."""
    if num_bytes < 1024:
        return f"{num_bytes:.2f} B"
    if num_bytes < 1024**2:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes < 1024**3:
        return f"{num_bytes / 1024**2:.2f} MiB"
    return f"{num_bytes / 1024**3:.2f} GiB"


# ---- server_args ----------------------------------------------------------------------------------


def resolved_server_args(cfg: SimConfig) -> dict[str, Any]:
    """Every flag of the version with its default, the given values, and what start-up resolved."""

    out: dict[str, Any] = {}
    for dest, spec in flags.flag_table(cfg.version).items():
        if dest == "config":
            continue
        out[dest] = spec.default
    out.update(cfg.args)
    out["model_path"] = cfg.model_path
    out["tokenizer_path"] = cfg.args.get("tokenizer_path") or cfg.model_path
    out["served_model_name"] = cfg.served_model_name
    out["host"] = cfg.host
    out["port"] = cfg.port
    out["mem_fraction_static"] = cfg.mfs
    out["chunked_prefill_size"] = cfg.chunked_prefill_size
    out["max_prefill_tokens"] = cfg.max_prefill_tokens
    out["tp_size"] = cfg.tp
    out["pp_size"] = cfg.pp
    out["dp_size"] = cfg.dp
    out["page_size"] = cfg.page_size
    out["kv_cache_dtype"] = cfg.args.get("kv_cache_dtype") or "auto"
    out["decode_log_interval"] = cfg.decode_log_interval
    if cfg.new_format:
        out["cuda_graph_max_bs_decode"] = cfg.cuda_graph_max_bs
        out["cuda_graph_bs_decode"] = cfg.cuda_graph_bs
    else:
        out["cuda_graph_max_bs"] = cfg.cuda_graph_max_bs
        out["cuda_graph_bs"] = cfg.cuda_graph_bs
    if cfg.hicache:
        out["hicache_ratio"] = cfg.hicache_ratio
        out["hicache_size"] = int(cfg.hicache_size_gb) if cfg.hicache_size_gb == int(cfg.hicache_size_gb) else cfg.hicache_size_gb
    return out


def server_args_line(cfg: SimConfig) -> str:
    """0.5.9: `server_args=ServerArgs(model_path='…', …)`; 0.5.23: `server_args={'model_path': …}`."""
    values = resolved_server_args(cfg)
    if cfg.new_format:
        return f"server_args={values!r}"
    inner = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return f"server_args=ServerArgs({inner})"
