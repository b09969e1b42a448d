"""Diagnosis for vLLM runs: a RunState (plus profile and host facts) -> findings with vLLM flag changes.

Pure: no I/O, no clocks. The advice keeps the SGLang rules' invariants: the verb matches the
direction of the change, a change never proposes the current value, and every change shows its
predicted effect (GiB freed, KV tokens, free memory after start-up) with the arithmetic.

Finding ids:

| id | severity | when |
|---|---|---|
| `oom_crash` | critical | CUDA OOM at run time: lower --gpu-memory-utilization by ΔB / T (or pin --kv-cache-memory-bytes) |
| `oom_at_startup` | critical | CUDA OOM while loading or profiling: smaller batches / more GPUs |
| `graph_capture_oom` | critical | CUDA OOM while capturing graphs: lower util, fewer/smaller graphs |
| `init_not_enough_memory` | critical | no KV cache memory / max-model-len does not fit (RAISE util or lower --max-model-len), or free memory below util·T (LOWER util) |
| `host_oom_killed` | critical | a worker was SIGKILLed by the OOM killer, with evidence (a kernel/Slurm OOM line, the cgroup's oom_kill counter) |
| `process_died` | critical | VLLM::Worker / VLLM::EngineCore died without a Python error of its own (named) |
| `killed_by_signal` | critical | a process was killed by signal 9 (SIGKILL) with nothing showing memory pressure (who sent it is unknown), or the server died of another signal with nothing in the log: SIGILL, SIGSEGV, SIGBUS … decoded |
| `nccl_timeout` / `nccl_error` | critical | a collective timed out / NCCL failed |
| `port_in_use` | critical | the HTTP port was taken |
| `startup_error` | critical | the engine failed to start for a reason other than memory |
| `crash_unclassified` | critical | the server died, no known signature |
| `low_headroom_after_graph_capture` | critical < warn, warning < target | free memory after start-up on the worst rank |
| `headroom_ok` | ok | free memory after start-up ≥ target on every rank |
| `graph_estimate_off` | warning | vLLM's CUDA-graph estimate is far from the captured pool |
| `rank_memory_imbalance` | warning | one GPU had ≥ 0.3 GiB less free at start than its peers (another process on it) |
| `kv_pool_below_context` | warning | the KV cache holds fewer tokens than one --max-model-len request |
| `kv_concurrency` | info | KV tokens vs --max-model-len × --max-num-seqs |
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cockpit.backends.base import HostFacts
from cockpit.backends.common import flags_by_dest
from cockpit.backends.vllm.flags import DEFAULT_VERSION, canonical, default_util, version_key
from cockpit.backends.vllm.memory import (
    GIB,
    UtilMove,
    default_max_num_seqs,
    floor2,
    graph_estimate_off,
    lower_util_for,
    raise_util_for,
)
from cockpit.core.crashstory import SIGKILL_SENDERS, killed_finding_words, signal_words
from cockpit.core.findings import Finding, FlagChange, quoted, sort_findings
from cockpit.core.numbers import as_float
from cockpit.core.state import RunState

if TYPE_CHECKING:
    from cockpit.core.profile import Profile

DEFAULT_TARGET_HEADROOM_GB = 5.0
DEFAULT_WARN_HEADROOM_GB = 3.0
OOM_MARGIN_GB = 1.0  # beyond the failed allocation itself, when the headroom is not in the log

_RX_TOTAL = re.compile(r"total capacity of ([\d.]+) GiB")
_RX_FREE_LOW = re.compile(
    r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_RX_MAX_LEN = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory \((-?[\d.]+) GiB\)"
    r"(?:\.\s*Based on the available memory, the estimated maximum model length is (\d+))?"
)
# the CPU build (vllm/v1/worker/cpu_worker.py): host memory of a NUMA node instead of a GPU
_RX_CPU_FREE_LOW = re.compile(
    r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired CPU memory utilization "
    r"\(([\d.]+), ([\d.]+) GiB\)"
)
_RX_CPU_KV_LOW = re.compile(
    r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less than requested memory for kv "
    r"\(([\d.]+)(?:/[\d.]+)? GiB\)"
)
_CPU_MARKS = ("CPU KV cache size", "CPU memory utilization", "on kv cache allocation", "on the CPU backend",
              "device_config=cpu", "GiB for KV cache on node")
_RX_PROCESS_DIED = re.compile(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+|None)\)")
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"  # GiB; the CPU build reads it before any flag (vllm/platforms/cpu.py)
_RX_V0_LEN = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)")
_RX_OOM = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB)\. GPU \d+ has a total capacity of ([\d.]+) GiB of which ([\d.]+) (GiB|MiB) is free")


def run_version(state: RunState, profile: Profile | None = None) -> str:
    if state.format and state.format.startswith("vllm-"):
        v = state.format.removeprefix("vllm-")
        if re.match(r"^\d+\.\d+", v) and not v.endswith("+"):
            return v
    if profile is not None and profile.version and profile.backend == "vllm":
        return profile.version
    return DEFAULT_VERSION


class _Ctx:
    def __init__(self, state: RunState, profile: Profile | None, hosts: list[HostFacts], target: float, warn: float):
        self.state = state
        self.target = target
        self.warn = warn
        self.version = run_version(state, profile)
        self.profile_flags: dict[str, Any] = flags_by_dest(profile, canonical, self.version)
        ranks = list(state.ranks.values())
        self.util_source = "the log"
        util = as_float(state.server_args.get("gpu_memory_utilization"))
        if util is None:
            utils = [r.figures["util"] for r in ranks if "util" in r.figures]
            util = utils[0] if utils else None
        if util is None:
            util = as_float(self.profile_flags.get("gpu_memory_utilization"))
            self.util_source = "the profile"
        if util is None:
            util = default_util(self.version)
            self.util_source = f"vLLM {self.version}'s default"
        self.util = util
        totals = [r.total_gb for r in ranks if r.total_gb]
        self.total: float | None = min(totals) if totals else None
        if self.total is None and state.crash is not None:
            m = _RX_TOTAL.search(state.crash.message + "\n" + "\n".join(state.crash.decisive_lines))
            if m:
                self.total = float(m.group(1))
        if self.total is None:
            gpu = [h.gpu_mem_total_gib for h in hosts if h.gpu_mem_total_gib]
            self.total = min(gpu) if gpu else None
        self.headroom = state.min_headroom_gb
        self.worst = state.worst_rank
        kvs = [r.kv_gb for r in ranks if r.kv_gb]
        self.kv = min(kvs) if kvs else None
        self.tokens = state.max_total_num_tokens
        if self.tokens is None:
            toks = [r.kv_tokens for r in ranks if r.kv_tokens]
            self.tokens = min(toks) if toks else None
        self.pinned_kv = self.flag("kv_cache_memory_bytes")
        env = dict(profile.env) if profile is not None else {}
        crash_text = (state.crash.message + "\n" + "\n".join(state.crash.decisive_lines)) if state.crash else ""
        self.cpu = bool(env.get(CPU_KV_ENV)) or any(m in crash_text for m in _CPU_MARKS) or (
            str(state.server_args.get("device") or "") == "cpu")
        self.cpu_kv_env = as_float(env.get(CPU_KV_ENV)) if self.cpu else None

    def kv_knob(self) -> str:
        """What sized the KV cache: `env` (VLLM_CPU_KVCACHE_SPACE, the CPU build reads it first),
        `bytes` (--kv-cache-memory-bytes), or `util` (--gpu-memory-utilization × the GPU's memory, on
        the CPU build × host memory)."""
        if self.cpu_kv_env is not None:
            return "env"
        if self.pinned_kv:
            return "bytes"
        return "util"

    def flag(self, dest: str) -> Any:
        if dest in self.state.server_args:
            return self.state.server_args[dest]
        return self.profile_flags.get(dest)

    def move_down(self, need_gb: float) -> UtilMove | None:
        if self.total is None:
            return None
        return lower_util_for(self.util, self.total, need_gb, headroom=self.headroom, kv=self.kv, tokens=self.tokens)

    def batch_alternatives(self) -> list[FlagChange]:
        alts: list[FlagChange] = []
        seqs = as_float(self.flag("max_num_seqs"))
        default_seqs = default_max_num_seqs(self.total)
        cur = int(seqs) if seqs else default_seqs
        if cur:
            alts.append(FlagChange("--max-num-seqs", int(seqs) if seqs else None, max(1, cur // 2)))
        mbt = as_float(self.flag("max_num_batched_tokens"))
        if mbt:
            alts.append(FlagChange("--max-num-batched-tokens", int(mbt), max(512, int(mbt) // 2)))
        return alts


def _util_finding(ctx: _Ctx, fid: str, severity: str, ranks: tuple[str, ...], lead: str, move: UtilMove | None,
                  alts: list[FlagChange], why: str) -> Finding:
    """A finding whose advice is "lower --gpu-memory-utilization", with the ΔB / T arithmetic."""
    if move is None:
        new = round(ctx.util - 0.03, 2)
        msg = (f"{lead} Lower --gpu-memory-utilization {ctx.util:g} → {new:g} (from {ctx.util_source}); the GPU's total "
               "memory is not in the log, so the GiB this frees (Δu × total) cannot be computed.")
        return Finding(fid, severity, msg, ranks, (FlagChange("--gpu-memory-utilization", ctx.util, new),), {}, None, tuple(alts))
    predicted: dict[str, Any] = {"freed_gb_per_gpu": round(move.moved_gb, 2)}
    if move.headroom_after is not None:
        predicted["headroom_gb"] = round(move.headroom_after, 2)
    if move.tokens_after is not None:
        predicted["max_total_num_tokens"] = move.tokens_after
    if move.kv_after is not None:
        predicted["kv_gb"] = round(move.kv_after, 2)
    cost = ""
    if move.tokens_before is not None and move.tokens_after is not None:
        cost = f", costing {move.tokens_before - move.tokens_after:,} KV tokens ({move.tokens_before:,} → {move.tokens_after:,})"
    after = f", predicted free after start-up ≈ {move.headroom_after:.2f} GiB (target {ctx.target:g})" if move.headroom_after is not None else ""
    msg = (f"{lead} Lower --gpu-memory-utilization {move.util_old:g} → {move.util_new:g}: vLLM budgets a fraction of the "
           f"card's TOTAL memory, so this frees ({move.util_old:g} − {move.util_new:g}) × {move.total:.2f} GiB = "
           f"{move.moved_gb:.2f} GiB per GPU{why}{after}{cost}.")
    alternatives = list(alts)
    if move.kv_bytes_after is not None:
        msg += (f" Or pin the KV cache instead: --kv-cache-memory-bytes {move.kv_bytes_after} ({move.kv_after:.2f} GiB per GPU, "
                "exact, util then ignored).")
        alternatives.insert(0, FlagChange("--kv-cache-memory-bytes", ctx.pinned_kv, move.kv_bytes_after))
    if ctx.util_source != "the log":
        msg += f" (--gpu-memory-utilization {ctx.util:g} is {ctx.util_source}.)"
    return Finding(fid, severity, msg, ranks, (FlagChange("--gpu-memory-utilization", move.util_old, move.util_new),),
                   predicted, move.arithmetic(), tuple(alternatives))


# ---- crash rules ----------------------------------------------------------------------------------


def _crash_findings(ctx: _Ctx) -> list[Finding]:
    crash = ctx.state.crash
    if crash is None:
        return []
    ranks = (crash.rank,) if crash.rank else ()
    where = f" on {crash.rank}" if crash.rank else ""
    text = crash.message + "\n" + "\n".join(crash.decisive_lines)
    kind = crash.kind
    if kind == "cuda_oom" and crash.phase == "startup":
        msg = (f"CUDA out of memory during start-up{where} (line {crash.line}), while the weights loaded or the "
               "profile run measured the activation peak: the model and one full batch do not fit. Shrink the "
               "profiled batch, or add GPUs (--tensor-parallel-size) or quantize.")
        alts = ctx.batch_alternatives()
        return [Finding("oom_at_startup", "critical", msg, ranks, tuple(alts[:1]), {}, None, tuple(alts[1:]))]
    if kind == "cuda_oom":
        if ctx.headroom is not None:
            lead = (f"CUDA out of memory in {crash.phase}{where} (line {crash.line}); after start-up the worst rank "
                    f"({ctx.worst}) had only {ctx.headroom:.2f} GiB free for the activations of a large batch.")
            move = ctx.move_down(ctx.target - ctx.headroom)
            why = f" to reach the {ctx.target:g} GiB target"
        else:
            m = _RX_OOM.search(text)
            need = OOM_MARGIN_GB
            lead = f"CUDA out of memory in {crash.phase}{where} (line {crash.line})."
            if m:
                req = float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
                free = float(m.group(4)) / (1024 if m.group(5) == "MiB" else 1)
                need = max(req - free, 0.0) + OOM_MARGIN_GB
                lead += f" It needed {req:.2f} GiB with {free:.2f} GiB free."
            move = ctx.move_down(need)
            why = f" ({need:.2f} GiB: the failed allocation plus {OOM_MARGIN_GB:g} GiB)"
        return [_util_finding(ctx, "oom_crash", "critical", ranks, lead, move, ctx.batch_alternatives(), why)]
    if kind == "graph_capture_oom":
        return [_graph_capture_oom(ctx, ranks, where, crash.line, text)]
    if kind == "init_not_enough_memory":
        return [_init_not_enough(ctx, ranks, where, text)]
    if kind in ("host_oom_killed", "hicache_host_memory", "killed_by_signal"):
        died = _RX_PROCESS_DIED.search(text)
        who = f"vLLM's {died[1]}" if died else "A vLLM process" if crash.line else "The vLLM server process"
        msg = killed_finding_words(crash, who, where)
        if kind == "killed_by_signal":
            return [Finding("killed_by_signal", "critical", msg, ranks)]
        msg += (" Look for other memory users on the host; --cpu-offload-gb and --swap-space (≤0.17) also take "
                "host RAM.")
        return [Finding("host_oom_killed", "critical", msg, ranks)]
    if kind == "nccl_timeout":
        msg = (f"A NCCL collective timed out{where} (line {crash.line}): a peer rank died or hung first, or the network "
               "between nodes stalled. The first rank that failed above this line is the cause.")
        return [Finding("nccl_timeout", "critical", msg, ranks)]
    if kind == "nccl_error":
        msg = (f"NCCL failed{where} (line {crash.line}): {quoted(crash.message, 160)}. Check that every GPU is visible and "
               "healthy, NCCL_SOCKET_IFNAME / NCCL_IB_* on multi-node runs, and shared memory (/dev/shm) in containers; "
               "NCCL_DEBUG=INFO shows the failing call.")
        return [Finding("nccl_error", "critical", msg, ranks)]
    if kind == "port_in_use":
        port = int(as_float(ctx.flag("port")) or 8000)
        msg = (f"Port {port} is already in use (line {crash.line}): another server (perhaps an earlier run that did not stop) "
               "is listening. Stop it, or move this run to another port.")
        return [Finding("port_in_use", "critical", msg, ranks, (FlagChange("--port", port, port + 1),))]
    if kind == "startup_error":
        msg = (f"vLLM failed to start{where} (line {crash.line}): {quoted(crash.message, 240)}. This is not a memory "
               "signature: the decisive lines name the argument, model or environment problem.")
        return [Finding("startup_error", "critical", msg, ranks)]
    died = _RX_PROCESS_DIED.search(text)
    if died or "engine core exited unexpectedly" in text or "Engine core process" in text:
        who = f"vLLM's worker process {died[1]} (VLLM::Worker)" if died else "vLLM's engine process (VLLM::EngineCore)"
        code = died[2] if died else None
        how = ("its exit code was not known (None): it was killed before vLLM could read it, by a signal (SIGKILL: "
               f"who sent it is not known: {SIGKILL_SENDERS}; nothing shows memory pressure) or a native crash"
               if code in (None, "None") else f"exit code {code}")
        msg = (f"{who} died unexpectedly (line {crash.line}); {how}. The API server can no longer serve (EngineDeadError, "
               "/health 503) and exits. Nothing in the log says why it died: look at the host (`dmesg`, memory, "
               "another operator's kill) before restarting.")
        return [Finding("process_died", "critical", msg, ranks)]
    if crash.exit_code is not None and signal_words(crash.exit_code) and crash.exit_code not in (-15, 143):
        msg = (f"The server died of a signal{where}: {signal_words(crash.exit_code)} (exit code {crash.exit_code}); "
               f"the log has no error of its own before it (line {crash.line}: {quoted(crash.message, 160)}).")
        return [Finding("killed_by_signal", "critical", msg, ranks)]
    msg = f"The server died{where} (line {crash.line}) with no known signature: {quoted(crash.message, 200)}."
    return [Finding("crash_unclassified", "critical", msg, ranks)]


def _graph_capture_oom(ctx: _Ctx, ranks: tuple[str, ...], where: str, line: int, text: str) -> Finding:
    m = _RX_OOM.search(text)
    need = OOM_MARGIN_GB
    lead = f"Out of memory while capturing CUDA graphs{where} (line {line})."
    if m:
        req = float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
        free = float(m.group(4)) / (1024 if m.group(5) == "MiB" else 1)
        need = max(req - free, 0.0) + OOM_MARGIN_GB
        lead += f" The capture needed {req:.2f} GiB with {free:.2f} GiB free: vLLM's graph estimate fell short."
    alts: list[FlagChange] = []
    size = as_float(ctx.flag("max_cudagraph_capture_size"))
    if version_key(ctx.version) >= version_key("0.11.1"):
        cur = int(size) if size else 512
        alts.append(FlagChange("--max-cudagraph-capture-size", int(size) if size else None, max(1, cur // 2)))
    alts += ctx.batch_alternatives()[:1]
    alts.append(FlagChange("--enforce-eager", bool(ctx.flag("enforce_eager")) or None, True))
    move = ctx.move_down(need)
    f = _util_finding(ctx, "graph_capture_oom", "critical", ranks, lead, move, alts,
                      f" ({need:.2f} GiB: the failed allocation plus {OOM_MARGIN_GB:g} GiB)")
    msg = f.message + " Or capture fewer/smaller graphs (--max-cudagraph-capture-size, -cc.cudagraph_mode=FULL_DECODE_ONLY); --enforce-eager last."
    return Finding(f.id, f.severity, msg, f.ranks, f.changes, f.predicted, f.arithmetic, f.alternatives)


def _gib_up(gib: float) -> int:
    """Whole GiB at or above `gib` (VLLM_CPU_KVCACHE_SPACE is an integer)."""
    return max(1, int(-(-gib // 1)))


def _cpu_not_enough(ctx: _Ctx, ranks: tuple[str, ...], where: str, text: str) -> Finding | None:
    """The CPU build's host-memory refusals: the knob that decided is named, never another one."""
    m = _RX_CPU_FREE_LOW.search(text)
    if m:
        node, free, total, util, requested = m.group(1), *(float(m.group(i)) for i in range(2, 6))
        new = min(0.99, max(0.01, floor2(free / total - 0.005)))
        if new >= util:
            new = round(util - 0.01, 2)
        msg = (f"Start-up refused{where}: NUMA node {node} had {free:.2f} of {total:.2f} GiB of host memory available, "
               f"less than --gpu-memory-utilization {util:g} × {total:.2f} = {requested:.2f} GiB (on vLLM's CPU build the "
               f"flag is a fraction of HOST memory). Free host memory, or LOWER --gpu-memory-utilization {util:g} → {new:g} "
               f"(≤ available/total = {free / total:.3f}); or size the KV cache directly with {CPU_KV_ENV} (GiB) or "
               "--kv-cache-memory-bytes.")
        return Finding("init_not_enough_memory", "critical", msg, ranks, (FlagChange("--gpu-memory-utilization", util, new),),
                       {"budget_gb": round(new * total, 2), "free_gb": free},
                       f"u ≤ F/T = {free:.2f} / {total:.2f} = {free / total:.4f}; − 0.005 → {new:.2f} (rounded down)")
    m = _RX_CPU_KV_LOW.search(text)
    if m:
        node, free, total, asked = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
        lead = (f"Start-up refused{where}: NUMA node {node} had {free:.2f} of {total:.2f} GiB of host memory available "
                f"when vLLM allocated the KV cache, less than the {asked:.2f} GiB asked for")
        knob = ctx.kv_knob()
        if knob == "env":
            new_gib = max(1, int(free * 0.9))
            msg = (f"{lead} by {CPU_KV_ENV}={ctx.cpu_kv_env:g} in the profile's env (it decides the CPU KV cache before "
                   f"any flag). Free host memory, or LOWER {CPU_KV_ENV} {ctx.cpu_kv_env:g} → {new_gib} in the profile's env.")
            return Finding("init_not_enough_memory", "critical", msg, ranks, (), {"kv_gb": new_gib})
        if knob == "bytes":
            new_b = int(free * 0.9 * GIB)
            msg = (f"{lead} by --kv-cache-memory-bytes {int(ctx.pinned_kv)}. Free host memory, or LOWER "
                   f"--kv-cache-memory-bytes to {new_b} ({new_b / GIB:.2f} GiB, 90 % of what was available).")
            return Finding("init_not_enough_memory", "critical", msg, ranks,
                           (FlagChange("--kv-cache-memory-bytes", int(ctx.pinned_kv), new_b),), {"kv_gb": round(new_b / GIB, 2)})
        new = round(max(0.01, ctx.util - 0.05), 2)
        msg = (f"{lead} by --gpu-memory-utilization {ctx.util:g} × host memory. Free host memory (other processes), or "
               f"LOWER --gpu-memory-utilization {ctx.util:g} → {new:g}.")
        return Finding("init_not_enough_memory", "critical", msg, ranks, (FlagChange("--gpu-memory-utilization", ctx.util, new),))
    return None


def _raise_kv_knob(ctx: _Ctx, need_gib: float | None) -> tuple[str, FlagChange | None]:
    """(words, change) that give the KV cache more memory through the knob that decided its size:
    the CPU build's env var (words only: a relaunch with --set cannot change the env), or
    --kv-cache-memory-bytes. ("", None) when --gpu-memory-utilization decides (the caller's rule)."""
    knob = ctx.kv_knob()
    if knob == "env":
        cur = ctx.cpu_kv_env or 0.0
        new = _gib_up(need_gib + 0.25) if need_gib else int(max(cur * 2, cur + 1))
        if new <= cur:
            new = int(cur) + 1
        return (f" {CPU_KV_ENV}={cur:g} in the profile's env decided the KV cache size (the CPU build reads it before "
                f"any flag, so --gpu-memory-utilization and --kv-cache-memory-bytes change nothing): RAISE it to {new} "
                f"(GiB) in the profile's env.", None)
    if knob == "bytes":
        cur_b = int(ctx.pinned_kv)
        new_b = int((need_gib + 0.25) * GIB) if need_gib else max(2 * cur_b, GIB)
        if new_b <= cur_b:
            new_b = max(2 * cur_b, GIB)
        return (f" --kv-cache-memory-bytes {cur_b} decided the KV cache size (--gpu-memory-utilization then changes "
                f"nothing): RAISE it to {new_b} ({new_b / GIB:.2f} GiB).", FlagChange("--kv-cache-memory-bytes", cur_b, new_b))
    return "", None


def _init_not_enough(ctx: _Ctx, ranks: tuple[str, ...], where: str, text: str) -> Finding:
    cpu = _cpu_not_enough(ctx, ranks, where, text)
    if cpu is not None:
        return cpu
    m = _RX_FREE_LOW.search(text)
    if m:
        free, total, util, requested = (float(m.group(i)) for i in range(1, 5))
        new = min(0.99, max(0.01, floor2(free / total - 0.005)))  # below F/T with a little to spare
        if new >= util:
            new = round(util - 0.01, 2)
        msg = (f"Start-up refused{where}: only {free:.2f} of {total:.2f} GiB were free, less than "
               f"--gpu-memory-utilization {util:g} × {total:.2f} = {requested:.2f} GiB. Another process holds the GPU (an "
               f"earlier run that did not stop?): free it, or LOWER --gpu-memory-utilization {util:g} → {new:g} "
               f"(≤ free/total = {free / total:.3f}).")
        budget = {"budget_gb": round(new * total, 2), "free_gb": free}
        arith_low = f"u ≤ F/T = {free:.2f} / {total:.2f} = {free / total:.4f}; − 0.005 → {new:.2f} (rounded down)"
        return Finding("init_not_enough_memory", "critical", msg, ranks,
                       (FlagChange("--gpu-memory-utilization", util, new),), budget, arith_low)
    m2 = _RX_MAX_LEN.search(text)
    if m2:
        length, need_kv, avail = int(m2.group(1)), float(m2.group(2)), float(m2.group(3))
        est = int(m2.group(4)) if m2.group(4) else None
        knob_words, knob_change = _raise_kv_knob(ctx, need_kv)
        more = "give the KV cache more memory" if ctx.kv_knob() != "util" else "RAISE --gpu-memory-utilization"
        lead = (f"Start-up failed{where}: one request at --max-model-len {length:,} needs {need_kv:.2f} GiB of KV cache "
                f"but only {avail:.2f} GiB were left. LOWER --max-model-len, or {more}.")
        changes: list[FlagChange] = []
        alts: list[FlagChange] = []
        predicted: dict[str, Any] = {}
        arith: str | None = None
        if est:
            changes.append(FlagChange("--max-model-len", length, est))
            predicted["max_model_len"] = est
            lead += f" vLLM estimates {est:,} tokens fit: --max-model-len {est}."
        if ctx.kv_knob() != "util":
            lead += " Or:" + knob_words if est else knob_words
            if knob_change is not None:
                (alts if changes else changes).append(knob_change)
            return Finding("init_not_enough_memory", "critical", lead, ranks, tuple(changes), predicted, None, tuple(alts))
        if ctx.total and ctx.util < 1.0:
            up = raise_util_for(ctx.util, ctx.total, need_kv - avail + 0.1)
            (alts if changes else changes).append(FlagChange("--gpu-memory-utilization", ctx.util, up.util_new))
            predicted["kv_gb"] = round(avail + up.moved_gb * -1, 2)
            arith = f"Δu = (need {need_kv:.2f} − avail {avail:.2f} + 0.1) / T {ctx.total:.2f} → {up.util_new:.2f} (rounded up)"
            lead += f" Or raise --gpu-memory-utilization {ctx.util:g} → {up.util_new:g} (+{-up.moved_gb:.2f} GiB for KV per GPU)."
        return Finding("init_not_enough_memory", "critical", lead, ranks, tuple(changes), predicted, arith, tuple(alts))
    m3 = _RX_V0_LEN.search(text)
    if m3:
        length, fit = int(m3.group(1)), int(m3.group(2))
        msg = (f"Start-up failed{where}: --max-model-len {length:,} is more than the {fit:,} tokens the KV cache holds. "
               f"LOWER --max-model-len to {fit}, or RAISE --gpu-memory-utilization.")
        return Finding("init_not_enough_memory", "critical", msg, ranks, (FlagChange("--max-model-len", length, fit),),
                       {"max_model_len": fit})
    # `No available memory for the cache blocks` (or auto-fit found no room): the weights and the
    # activation peak took the whole util·T budget.
    knob_words, knob_change = _raise_kv_knob(ctx, None)
    if knob_words:
        msg = f"Start-up failed{where}: no memory was left for the KV cache." + knob_words
        return Finding("init_not_enough_memory", "critical", msg, ranks, (knob_change,) if knob_change else (),
                       {"kv_gb": round(knob_change.to_value / GIB, 2)} if knob_change else {})
    lead = (f"Start-up failed{where}: after the weights and the activation peak, --gpu-memory-utilization {ctx.util:g} "
            "left no memory for the KV cache. This is the opposite of an OOM: RAISE --gpu-memory-utilization "
            "(lowering it makes this worse), or lower --max-num-batched-tokens (a smaller activation peak).")
    if ctx.util >= 1.0:
        msg = lead + " --gpu-memory-utilization is already 1: the model does not fit these GPUs. Add GPUs or quantize."
        return Finding("init_not_enough_memory", "critical", msg, ranks, tuple(ctx.batch_alternatives()[1:2]))
    if ctx.total:
        short = -ctx.kv if ctx.kv is not None and ctx.kv < 0 else 0.0
        up = raise_util_for(ctx.util, ctx.total, short + 2.0)
        msg = lead + f" Use {up.util_new:g}: +{-up.moved_gb:.2f} GiB per GPU for the KV cache."
        arith = f"Δu = ({short:.2f} short + 2 GiB for a useful cache) / T {ctx.total:.2f} → {up.util_new:.2f} (rounded up)"
        return Finding("init_not_enough_memory", "critical", msg, ranks,
                       (FlagChange("--gpu-memory-utilization", ctx.util, up.util_new),),
                       {"kv_gb": round((ctx.kv if ctx.kv is not None else 0.0) - up.moved_gb, 2)}, arith,
                       tuple(ctx.batch_alternatives()[1:]))
    new = round(min(1.0, ctx.util + 0.05), 2)
    msg = lead + " The GPU's total memory is not in the log, so the step is a guess."
    return Finding("init_not_enough_memory", "critical", msg, ranks, (FlagChange("--gpu-memory-utilization", ctx.util, new),))


# ---- memory rules ---------------------------------------------------------------------------------


def _headroom_findings(ctx: _Ctx) -> list[Finding]:
    after = {r.rank: r.avail_after_capture_gb for r in ctx.state.ranks.values() if r.avail_after_capture_gb is not None}
    if not after or ctx.headroom is None:
        return []
    worst = ctx.headroom
    if worst >= ctx.target:
        msg = (f"Free memory after start-up is {worst:.2f} GiB on the worst rank ({ctx.worst}), at or above the "
               f"{ctx.target:g} GiB target on every rank.")
        return [Finding("headroom_ok", "ok", msg, (), (), {"headroom_gb": round(worst, 2)})]
    worst_ranks = tuple(sorted((r for r, v in after.items() if v <= worst + 0.05), key=lambda r: after[r]))
    short = sum(1 for v in after.values() if v < ctx.target)
    severity = "critical" if worst < ctx.warn else "warning"
    lead = (f"Only {worst:.2f} GiB free after start-up on {worst_ranks[0]} ({short} of {len(after)} ranks below the "
            f"{ctx.target:g} GiB target, warn below {ctx.warn:g}): the largest batch's activations can run out of memory.")
    return [_util_finding(ctx, "low_headroom_after_graph_capture", severity, worst_ranks, lead,
                          ctx.move_down(ctx.target - worst), ctx.batch_alternatives(), f" to reach the {ctx.target:g} GiB target")]


def _graph_estimate(ctx: _Ctx) -> list[Finding]:
    for r in ctx.state.ranks.values():
        est, act = r.figures.get("graph_estimate_gb"), r.figures.get("graph_actual_gb")
        if est is None or act is None or not graph_estimate_off(est, act):
            continue
        if act > est:
            msg = (f"vLLM estimated {est:.2f} GiB for CUDA graphs on {r.rank} but captured {act:.2f} GiB: the KV cache was "
                   f"sized {act - est:.2f} GiB too big, out of the activation headroom. Lower --gpu-memory-utilization by "
                   "that much, or capture fewer graphs.")
            move = ctx.move_down(act - est)
            changes = (FlagChange("--gpu-memory-utilization", ctx.util, move.util_new),) if move else ()
            pred = {"freed_gb_per_gpu": round(move.moved_gb, 2)} if move else {}
        else:
            msg = (f"vLLM estimated {est:.2f} GiB for CUDA graphs on {r.rank} but captured only {act:.2f} GiB: "
                   f"{est - act:.2f} GiB per GPU that could hold KV cache stays unused. Raise --gpu-memory-utilization, or "
                   "pin the KV cache with --kv-cache-memory-bytes (vLLM's own summary line prints the value).")
            move = raise_util_for(ctx.util, ctx.total, est - act) if ctx.total else None
            changes = (FlagChange("--gpu-memory-utilization", ctx.util, move.util_new),) if move else ()
            pred = {"kv_gb_gain_per_gpu": round(-move.moved_gb, 2)} if move else {}
        return [Finding("graph_estimate_off", "warning", msg, (r.rank,), changes, pred, move.arithmetic() if move else None)]
    return []


IMBALANCE_GB = 0.3  # a GPU this far below its peers' free memory at start shares it with something


def _imbalance(ctx: _Ctx) -> list[Finding]:
    """vLLM sizes every rank's KV cache from the smallest rank's block count: memory another process
    holds on one GPU shrinks them all (or fails the start-up check)."""
    free0 = {r.rank: r.pre_load_avail_gb for r in ctx.state.ranks.values() if r.pre_load_avail_gb is not None}
    if len(free0) < 2:
        return []
    top = max(free0.values())
    low = sorted(((top - v, name, v) for name, v in free0.items() if top - v >= IMBALANCE_GB), reverse=True)
    if not low or len(low) > len(free0) // 2:
        return []
    gap, name, v = low[0]
    msg = (f"{name} had {v:.2f} GiB free at start, {gap:.2f} GiB less than its peers: another process holds memory on "
           "its GPU, and vLLM gives every rank the smallest rank's KV cache. Free that GPU, or pin the KV cache with "
           "--kv-cache-memory-bytes a little below a healthy run's `to fit into requested memory` value.")
    return [Finding("rank_memory_imbalance", "warning", msg, tuple(n for _, n, _ in low), (), {"gap_gb": round(gap, 2)})]


def _kv_context(ctx: _Ctx) -> list[Finding]:
    st = ctx.state
    length = st.context_len or as_float(ctx.flag("max_model_len"))
    tokens = ctx.tokens
    if not length or not tokens:
        return []
    length = int(length)
    if tokens < length:
        new = max(1024, tokens // 1024 * 1024)
        msg = (f"The KV cache holds {tokens:,} tokens, fewer than one request at --max-model-len {length:,}: such a "
               "request can never run. Give the cache more memory (higher --gpu-memory-utilization if the headroom "
               "allows, --kv-cache-dtype fp8, more GPUs) or lower --max-model-len.")
        return [Finding("kv_pool_below_context", "warning", msg, (),
                        (FlagChange("--max-model-len", int(as_float(ctx.flag("max_model_len")) or length), new),),
                        {"max_model_len": new})]
    seqs = as_float(ctx.flag("max_num_seqs")) or default_max_num_seqs(ctx.total)
    full = tokens / length
    msg = f"The KV cache holds {tokens:,} tokens: {full:.2f} requests at the full --max-model-len {length:,}"
    if seqs:
        msg += f", against --max-num-seqs {int(seqs)} ({int(seqs) * length:,} tokens if every one were full length)"
    msg += "; shorter requests share it, and beyond it vLLM preempts and recomputes."
    return [Finding("kv_concurrency", "info", msg, (), (), {"full_length_requests": round(full, 2)})]


def diagnose(
    state: RunState, profile: Profile | None = None, hosts: Iterable[HostFacts] = (), *,
    target_headroom_gb: float | None = None, warn_headroom_gb: float | None = None,
) -> list[Finding]:
    """Every finding for this vLLM run, most severe first."""
    target = target_headroom_gb
    if target is None:
        target = profile.policy.target_headroom_gb if profile is not None else DEFAULT_TARGET_HEADROOM_GB
    warn = warn_headroom_gb
    if warn is None:
        warn = profile.policy.warn_headroom_gb if profile is not None else DEFAULT_WARN_HEADROOM_GB
    ctx = _Ctx(state, profile, list(hosts), target, min(warn, target))
    findings = _crash_findings(ctx)
    headroom = _headroom_findings(ctx)
    if state.crash is not None and state.crash.kind != "cuda_oom":
        headroom = [f for f in headroom if f.id != "headroom_ok"]
    if state.crash is not None and state.crash.kind == "cuda_oom" and state.crash.phase != "startup":
        headroom = [f for f in headroom if f.id != "low_headroom_after_graph_capture"]  # oom_crash says it
    findings += headroom
    findings += _graph_estimate(ctx)
    findings += _imbalance(ctx)
    findings += _kv_context(ctx)
    return sort_findings(findings)
