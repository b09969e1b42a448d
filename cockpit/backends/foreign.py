"""Logs that are not SGLang's or vLLM's: other engines, their forks and ports, benchmark clients.

`cockpit diagnose` reads a log only if it is one of its engines'. A llama.cpp, TGI, TensorRT-LLM,
LMDeploy or Ollama log holds lines our grammars also read (a PyTorch `CUDA out of memory`, a
Python traceback, a Rust port whose name contains "vllm"), and a benchmark client prints figures
an operator may paste by mistake; read as ours they would give a crash summary about a server that
never ran. So before reading, each line of a log's opening is tested against the marks other
programs print and nothing of ours does (their logger prefixes, their module paths, their banners);
`foreign_lines` returns which program the marked lines name and the opening without them. The
caller (diagnose) refuses the file when enough of its lines are marked and what is left scores as
no engine of ours: a mixed log (a server log with a benchmark summary pasted below it) still reads.

Each mark was read in public reports of those programs (tests/data/real/others/ holds them, each
with its source). A program's own names come first; generic marks (a Rust or Go backtrace frame)
only set lines aside and name the program when no named mark was found.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from cockpit.backends import engine_names

# (label, keys, pattern): the label completes "looks like …, not SGLang or vLLM"; a line is tested
# against the pattern only when it holds one of the keys (plain substrings, so the opening of an
# SGLang or vLLM log, which holds none, costs a few substring searches a line)
_NAMED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("a vllm.rs log (a Rust engine named after vLLM)", ("vllm_rs", "vllm-rs", "vllm.rs"),
     r"vllm_rs\b|vllm-rs|vllm\.rs\b"),
    ("a candle-vllm log (a Rust engine named after vLLM)", ("candle_vllm", "candle-vllm"), r"candle[_-]vllm"),
    ("a mistral.rs log", ("mistralrs", "mistral.rs"), r"\bmistralrs[_-]\w+|mistral\.rs\b"),
    ("a candle log", ("candle_",), r"\bcandle_(?:core|nn|transformers|examples)\b"),
    ("an Ollama log", (" level=", "[GIN]", "ollama[", "OLLAMA_", ".go:", "llama runner"),
     r"\blevel=(?:INFO|WARN|ERROR|DEBUG)\s+source=\S+\.go:\d+|\[GIN\] \d{4}/|\bollama\[\d+\]:"
     r"|\bOLLAMA_[A-Z_]+|\b(?:routes|llama|server|sched)\.go:\d+|llama runner"),
    ("a llama.cpp log", ("llama_", "llm_load_", "ggml_", "print_info:", "load_tensors:", "common_init", "system_info:",
                         "log_info:", "device_info:", "srv ", "slot ", "llama-server", "llama.cpp", "KoboldCpp",
                         "koboldcpp", "KoboldCPP", "GGUF Arch", "Identified as"),
     r"\b(?:llama_model_loader|llm_load_\w+|llama_new_context_with_model|llama_context|llama_kv_cache\w*"
     r"|llama_init_from_model|llama_model_load\w*|ggml_\w+|print_info|load_tensors|common_init\w*"
     r"|system_info|log_info|device_info|srv +\w+|slot +\w+):"
     r"|^\d+\.\d\d\.\d{3}\.\d{3} [IWEDT] |\bllama-server\b|\bllama\.cpp\b|(?i:koboldcpp)"
     r"|^The reported GGUF Arch is|^Identified as \w+ model"),
    ("a TGI (text-generation-inference) log", ("text_generation", "text-generation", "ShardCannotStart", "shard-manager"),
     r"text[_-]generation[_-](?:launcher|server|router|inference)|\bShardCannotStart\b|\bshard-manager\b"),
    ("a TensorRT-LLM log", ("TensorRT", "TRT", "tensorrt", "trtllm", "tritonserver", ".cc:"),
     r"\[TensorRT-LLM\]|\[TRT-LLM\]|\[TRT\] \[[IWEV]\]|tensorrt_?llm|TensorRT-LLM|\btrtllm"
     r"|tritonserver|^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\.cc:\d+\]"),
    ("an LMDeploy log", ("lmdeploy", "turbomind", "[TM][", "Turbomind", "model_source:", "model_config:", "engine_cfg:",
                         "chat_template_config:"),
     r"\blmdeploy\b|\bturbomind\b|\[TM\]\[(?:INFO|WARNING|ERROR|DEBUG)\]|TurbomindEngineConfig"
     r"|^(?:model_source|model_config|engine_cfg|chat_template_config):"),
    ("a benchmark client's output", ("Benchmark", "requests:", "TTFT", "TPOT", "ITL", "E2E", "Request throughput", "oken throughput",
                                     "Total input", "Total generated",
                                     "request rate", "request concurrency", "Burstiness", "Backend:", "Time taken", "evalscope",
                                     "genai-perf", "---", "Average ", "test run"),
     r"Serving Benchmark Result|^Successful requests:|^Failed requests:"
     r"|^Benchmark duration \(s\):|^(?:Mean|Median|P\d+) (?:TTFT|TPOT|ITL|E2E)"
     r"|^(?:Request|Output token|Input token|Total [Tt]oken|Peak output token) throughput"
     r"|^Total (?:input|generated) tokens|^Traffic request rate|^Max(?:imum)? request concurrency"
     r"|^Burstiness factor|^Backend: +\w+|^Benchmarking summary|Time taken for tests"
     r"|\bevalscope\b|\bgenai-perf\b|^Successful/total requests|^-{3,}[A-Za-z][\w ()-]+-{3,}$"
     r"|^Average (?:Time to First Token|seconds/token|milliseconds/|input length|output length)"
     r"|^Starting initial single prompt test run|^Initial test run completed"),
)
# Marks of a language runtime, not of one program: they set a line aside but name only as a last resort.
_GENERIC: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("a Rust program's log", ("::", "panicked at", "stack backtrace", "RUST_BACKTRACE", "/rustc/"),
     r"^\s*\d+: +(?:0x[0-9a-f]+ - )?(?:<|[\w{}\[\]]+::)|panicked at |^stack backtrace:"
     r"|RUST_BACKTRACE|^\s+at /rustc/|^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z +(?:TRACE|DEBUG|INFO|WARN|ERROR) +[a-z_]\w*(?:::\w+)*: "),
    ("a Go program's log", ("runtime", "goroutine "),
     r"\bruntime/\w+\.(?:go|s):\d+|^(?:.*: )?goroutine \d+ |^(?:.*: )?runtime\.\w+\("),
)
# (outer, inner): the outer program runs the inner one, whose lines it passes through
_WRAPS = (("an Ollama log", "a llama.cpp log"),
          ("a vllm.rs log (a Rust engine named after vLLM)", "a candle log"),
          ("a candle-vllm log (a Rust engine named after vLLM)", "a candle log"),
          ("a mistral.rs log", "a candle log"))
# (label, keys, pattern, keys as bytes: the opening is searched for them before it is decoded)


@functools.cache
def _tables() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The tables with their keys as bytes, built on first use; a row's pattern is compiled only
    when an opening holds one of its keys (`_compiled`): `diagnose` asks about every log, and
    compiling them all cost every run ~2 ms (~3 % of diagnose's start-up), refused or not."""
    def build(rows: Any) -> tuple[Any, ...]:
        return tuple((label, keys, rx, tuple(k.encode() for k in keys)) for label, keys, rx in rows)
    return build(_NAMED), build(_GENERIC)


def _compiled(rows: tuple[Any, ...], sample: bytes) -> tuple[Any, ...]:
    """The rows one of whose keys the opening holds, their patterns compiled (once: re caches)."""
    return tuple((label, keys, re.compile(rx), bkeys) for label, keys, rx, bkeys in rows if any(k in sample for k in bkeys))


_RX_WRAP = re.compile(r"^(?:[\w.-]+ +\| |[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \S+ [\w.-]+\[\d+\]: |> )")


@dataclass(frozen=True)
class Foreign:
    """What `foreign_lines` found in a log's opening."""

    label: str | None  # "a llama.cpp log", … — None when no line is marked
    marked: int  # lines marked as another program's
    lines: int  # non-empty lines read (0 when the opening holds no key of any other program: not read)
    rest: bytes  # the opening without the marked lines (what our engines' scores are asked about)


def foreign_lines(sample: bytes, limit: int = 2000) -> Foreign:
    """Which other program's lines the opening of a log holds, and the opening without them."""
    # only the programs one of whose keys the opening holds at all (none, for most of our logs)
    all_named, all_generic = _tables()
    named = _compiled(all_named, sample)
    generic = _compiled(all_generic, sample)
    if not named and not generic:
        return Foreign(None, 0, 0, sample)
    text = sample.decode("utf-8", "replace")
    counts: dict[str, int] = {}
    by_runtime: dict[str, int] = {}
    kept: list[str] = []
    marked = lines = 0
    for raw in text.splitlines()[:limit]:
        if not raw.strip():
            continue
        lines += 1
        label = _mark(raw, named)
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
        else:
            label = _mark(raw, generic)
            if label is None:
                kept.append(raw)
                continue
            by_runtime[label] = by_runtime.get(label, 0) + 1
        marked += 1
    pick = counts or by_runtime
    best = max(pick, key=lambda k: pick[k]) if pick else None
    for outer, inner in _WRAPS:  # a program that runs another prints both: the outer one ran
        if best == inner and outer in pick:
            best = outer
    return Foreign(best, marked, lines, "\n".join(kept).encode())


def _mark(raw: str, table: tuple[tuple[str, tuple[str, ...], re.Pattern[str], tuple[bytes, ...]], ...]) -> str | None:
    """The first label of `table` whose pattern marks the line (tested only when it holds a key)."""
    line: str | None = None
    for label, keys, rx, _ in table:
        if not any(k in raw for k in keys):
            continue
        if line is None:
            line = _RX_WRAP.sub("", raw, count=1)
        # the wrapper may carry the name (a compose service `vllm-rs-svc0  | `): the raw line too
        if rx.search(line) or (line is not raw and rx.search(raw)):
            return label
    return None


# Below this share of marked lines a log is read as ours even when the rest scores as no engine:
# a few marked lines in an unknown text are not enough to name another program.
MIN_SHARE = 0.25


def refusal(found: Foreign, rest_is_ours: bool) -> str | None:
    """The reason to refuse a log (`looks like …, not SGLang or vLLM`), or None to read it."""
    if found.label is None or rest_is_ours or found.marked < max(1, MIN_SHARE * found.lines):
        return None
    return f"looks like {found.label}, not {engine_names()}"
