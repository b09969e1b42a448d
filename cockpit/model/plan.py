"""The memory plan's result, shared by every backend's budget and by its readers (CLI, check, up,
picker): one row per memory setting, the profile's row, the recommendation, and where the numbers
came from (estimate or a calibration run). Also the journal match that picks a calibration run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cockpit.core.overrides import normalise_flag_name


class PlanUnavailable(Exception):
    """A fact the plan needs is unknown (not wrong): the GPUs' memory. `hint` says what to pass."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class GpuFacts:
    """The GPUs a plan is made for."""

    total_gib: float  # memory.total of the smallest GPU the ranks use
    free_gib: float | None = None  # the least free memory on those GPUs now (another process's share)
    name: str | None = None  # that GPU's name, when measured (vLLM picks its batch defaults by it)


@dataclass(frozen=True)
class PlanRow:
    flag: str  # "--mem-fraction-static" / "--gpu-memory-utilization"
    value: float
    max_total_num_tokens: int  # the point estimate (0: the point estimate does not start)
    kv_gib: float
    headroom_after_capture_gib: float
    # the band: KV tokens at the low and high ends of every term's uncertainty (each end 0 when the
    # engine would refuse it); None for a calibrated row or a pinned size, whose point is measured
    tokens_low: int | None = None
    tokens_high: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_total_num_tokens_low": self.low,
            "max_total_num_tokens_high": self.high,
            "kv_gib": round(self.kv_gib, 2),
            "headroom_after_capture_gib": round(self.headroom_after_capture_gib, 2),
            "starts": self.starts,
            "may_not_start": self.tight,
        }

    @property
    def low(self) -> int:
        return self.max_total_num_tokens if self.tokens_low is None else min(self.tokens_low, self.max_total_num_tokens)

    @property
    def high(self) -> int:
        return self.max_total_num_tokens if self.tokens_high is None else max(self.tokens_high, self.max_total_num_tokens)

    def band_text(self) -> str:
        """`1,210,000 (1,150,000 – 1,260,000)`: the point and the band, as the plan prints it."""
        if self.low == self.high:
            return f"{self.max_total_num_tokens:,}"
        return f"{self.max_total_num_tokens:,} ({self.low:,} – {self.high:,})"

    @property
    def label(self) -> str:
        """The value as an operator writes it: `0.93`, or a byte count with its GiB."""
        if self.flag.endswith("-bytes"):
            return f"{self.flag}={int(self.value)} ({self.value / 2**30:.2f} GiB)"
        return f"{self.value:g}"

    @property
    def starts(self) -> bool:
        """False: even the high end of the band leaves no KV pool the server accepts — it refuses
        to start. A confident "cannot start" needs every term at its most favourable to fail."""
        return self.high > 0

    @property
    def tight(self) -> bool:
        """Tight: the high end starts and the low end does not — "tight: may not start"."""
        return self.starts and self.low <= 0


@dataclass(frozen=True)
class Calibration:
    """Measured anchors from one finished run of the same model, GPUs and parallelism."""

    run_id: str
    value: float  # the memory setting the run used
    max_total_num_tokens: int
    headroom_after_capture_gib: float
    started_at: str = ""


@dataclass(frozen=True)
class MemoryPlan:
    backend: str
    version: str
    model: str
    gpu_mem_gib: float
    tp: int
    dp: int
    ep: int
    weights_gib_per_rank: float
    kv_bytes_per_token: int
    rows: tuple[PlanRow, ...]
    current: PlanRow | None  # the profile's (or --set) value; None when it is the engine's default and unknown
    current_is_default: bool
    recommended: PlanRow | None  # the highest value meeting the target headroom; None if none does
    target_headroom_gib: float
    warn_headroom_gib: float
    terms: dict[str, float] = field(default_factory=dict)  # P, graphs, reserves… in GiB, for the arithmetic
    calibrated_from: str | None = None
    calibration_error: dict[str, float] = field(default_factory=dict)  # estimate − measured at the run's value
    notes: tuple[str, ...] = ()
    arithmetic: str = ""  # the backend's own formula with its numbers ("" : SGLang's δ·P wording)
    weights_source: str = "safetensors"  # "config": estimated from config.json alone (no index, no headers)
    request_tokens: int | None = None  # the request length the concurrency column is for (None: the context length)
    role: str | None = None  # prefill/decode disaggregation: which group this server is ("prefill", "decode", …)

    @property
    def request_length(self) -> int:
        """Tokens per request for the concurrency figures: the asked length, else the server's context."""
        if self.request_tokens:
            return self.request_tokens
        return int(self.terms.get("context_len") or 0)  # each backend's plan puts its context length there

    def concurrency(self, row: PlanRow) -> int | None:
        """How many requests of request_length tokens the row's KV pool holds at once (None: no length)."""
        n = self.request_length
        if n <= 0:
            return None
        return row.max_total_num_tokens // n

    @property
    def flag(self) -> str:
        return self.rows[0].flag if self.rows else ""

    @property
    def severity(self) -> str:
        """critical below the warn headroom, warning below the target, else ok."""
        if self.current is None:
            return "info"
        if not self.current.starts:
            return "critical"  # even the band's high end leaves no KV pool: the server refuses to start
        if self.current.max_total_num_tokens <= 0:
            return "critical"  # the point estimate does not start; only the band's high end does
        h = self.current.headroom_after_capture_gib
        if h < self.warn_headroom_gib:
            return "critical"
        if h < self.target_headroom_gib or self.current.tight:
            return "warning"
        return "ok"

    @property
    def safe_value(self) -> PlanRow | None:
        """The value that makes the band's low end start (terms `low_end_safe_value`), when the
        current one is tight; the backend found it in its own search range."""
        v = self.terms.get("low_end_safe_value")
        if v is None:
            return None
        return next((r for r in self.rows if abs(r.value - v) < 1e-9), None) or PlanRow(self.flag, v, 0, 0.0, 0.0)

    def to_json(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "backend": self.backend,
            "version": self.version,
            "model": self.model,
            "gpu_mem_gib": round(self.gpu_mem_gib, 2),
            "tp": self.tp,
            "dp": self.dp,
            "ep": self.ep,
            "weights_gib_per_rank": round(self.weights_gib_per_rank, 2),
            "role": self.role,
            "weights_source": self.weights_source,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "request_tokens": self.request_length or None,
            "rows": [self._row_json(r) for r in self.rows],
            "current": self._row_json(self.current) if self.current else None,
            "current_is_default": self.current_is_default,
            "recommended": (
                {"flag": rec.flag, "value": rec.value, "max_total_num_tokens": rec.max_total_num_tokens,
                 "headroom_after_capture_gib": round(rec.headroom_after_capture_gib, 2),
                 "concurrent_requests": self.concurrency(rec)}
                if rec else None
            ),
            "target_headroom_gib": self.target_headroom_gib,
            "warn_headroom_gib": self.warn_headroom_gib,
            "severity": self.severity,
            "terms_gib": {k: round(v, 3) for k, v in self.terms.items() if k.endswith("_gib")},
            "terms": {k: round(v, 4) for k, v in self.terms.items() if not k.endswith("_gib")},
            "calibrated_from": self.calibrated_from,
            "calibration_error": {k: round(v, 3) for k, v in self.calibration_error.items()},
            "notes": list(self.notes),
        }

    def _row_json(self, r: PlanRow) -> dict[str, Any]:
        return {**r.to_json(), "concurrent_requests": self.concurrency(r)}

    def summary(self, verdict: str = "") -> str:
        """One line for check, up and the picker: `0.93 predicted to leave 0.8 GiB after capture;
        0.88 predicted 5.5 GiB, −72 K KV tokens`. `verdict` (`below the 3 GiB warn level: …`) is
        said of the current value, right after its own clause, never after the recommendation's."""
        cur, rec = self.current, self.recommended
        if self.terms.get("after_weights_avail_gib", 1.0) <= 0:
            return (f"the weights ({self.weights_gib_per_rank:.1f} GiB per rank) do not fit in the "
                    f"{self.terms.get('pre_load_avail_gib', 0):.1f} GiB free before loading: more GPUs (a larger TP) are needed")
        ceiling = self.terms.get("util_ceiling")
        if cur is not None and cur.max_total_num_tokens <= 0 and ceiling is not None and cur.value > ceiling:
            head = (f"{cur.label} asks more than the GPU's free memory at start-up: the server refuses to start "
                    f"(the most it allows is {ceiling:.2f})")
            return head + (f"; {rec.label} predicted {rec.headroom_after_capture_gib:.1f} GiB after capture, "
                           f"{rec.max_total_num_tokens:,} KV tokens" if rec else "")
        if cur is not None and cur.tight:
            safe = self.safe_value
            head = (f"tight: {cur.label} may not start — KV tokens {cur.band_text()}, the band's low end "
                    "leaves no pool the server accepts")
            if safe is not None:
                head += f"; {safe.label} makes the low end start"
            if verdict and cur.max_total_num_tokens > 0:
                head += f"; {verdict}"
            return head + (f"; {rec.label} predicted {rec.headroom_after_capture_gib:.1f} GiB after capture, "
                           f"{rec.max_total_num_tokens:,} KV tokens" if rec and rec.value != cur.value else "")
        if cur is not None and not cur.starts:
            floor = self.terms.get("mfs_floor", self.terms.get("util_floor", 0.0))
            # SGLang's floor is where the pool is empty; vLLM's where it or the card's free memory is too small
            what = "no memory for the KV pool" if "mfs_floor" in self.terms else "too little memory for the KV cache"
            head = (f"{cur.label} leaves {what}: the server refuses to start "
                    f"(the floor is {floor:.3f})")
            return head + (f"; {rec.label} predicted {rec.headroom_after_capture_gib:.1f} GiB after capture, "
                           f"{rec.max_total_num_tokens:,} KV tokens" if rec else "")
        if cur is None:
            return "memory plan: the engine picks its own value; " + (
                f"{rec.label} is the highest predicted to leave {rec.headroom_after_capture_gib:.1f} GiB" if rec else "no value meets the target")
        head = f"{cur.label} predicted to leave {cur.headroom_after_capture_gib:.1f} GiB after capture"
        if self.weights_source == "config":
            head += " (weights estimated from config.json)"
        if verdict:
            head += f", {verdict}"
        if rec is None:
            return head + f"; no value from {self.rows[0].value:g} up leaves the {self.target_headroom_gib:g} GiB target"
        if rec.value == cur.value:
            return head + f" ({cur.max_total_num_tokens:,} KV tokens)"
        d = rec.max_total_num_tokens - cur.max_total_num_tokens
        sign = "−" if d < 0 else "+"
        return head + f"; {rec.label} predicted {rec.headroom_after_capture_gib:.1f} GiB, {sign}{_k(abs(d))} KV tokens"


def weight_notes(cfg: Any, weights: Any, dtype_flag: Any) -> list[str]:
    """The notes both backends give on where the weights came from and the dtype they load in."""
    notes = []
    if getattr(weights, "estimated", False):
        notes.append("weights estimated from config.json (no safetensors index or headers): shapes and "
                     "quantization_config give each tensor's bytes; docs/PLAN.md says how close that lands")
        if cfg.has_vision:
            notes.append("the vision tower is estimated from vision_config as a plain ViT and projector")
    name, nbytes = cfg.load_dtype(dtype_flag)
    if nbytes != cfg.dtype_bytes:
        notes.append(f"the launch holds unquantized weights and the auto KV cache in {name} ({nbytes} bytes), "
                     f"not the checkpoint's {cfg.dtype} ({cfg.dtype_bytes} bytes)")
    return notes


def _k(n: int) -> str:
    return f"{n / 1000:.0f} K" if n >= 10_000 else f"{n:,}"


def gpu_facts_from_hosts(hosts: Iterable[Any], env: Mapping[str, str] | None = None) -> GpuFacts:
    """The smallest GPU's total and the least free memory now on the GPUs the ranks will use
    (CUDA_VISIBLE_DEVICES of the profile's env, else all) from HostFacts-like objects."""
    hosts = list(hosts)
    totals = [h.gpu_mem_total_gib for h in hosts if h.gpu_mem_total_gib]
    if not totals:
        where = ", ".join(h.host for h in hosts) or "the hosts"
        raise PlanUnavailable(f"GPU memory unknown on {where}", hint="pass --gpu-mem-gb (memory per GPU, GiB as nvidia-smi shows it)")
    visible = None
    cvd = (env or {}).get("CUDA_VISIBLE_DEVICES")
    if cvd:
        try:
            visible = {int(x) for x in cvd.split(",") if x.strip()}
        except ValueError:
            visible = None  # UUIDs: every GPU counts
    frees = [g for h in hosts for i, g in enumerate(h.gpu_free_gib) if g is not None and (visible is None or i in visible)]
    names = [h.gpu_name for h in hosts if getattr(h, "gpu_name", None)]
    return GpuFacts(min(totals), min(frees) if frees else None, names[0] if names else None)


def calibration_from_run(r: Any, value_flag: str, default_value: float | None = None) -> Calibration | None:
    """A journal run as a calibration, when it recorded KV tokens, headroom and the setting (or ran
    with the engine's default, `default_value`)."""
    value = _norm(r.flags).get(normalise_flag_name(value_flag), default_value)
    if r.max_total_num_tokens is None or r.min_headroom_gb is None or not isinstance(value, (int, float)):
        return None
    return Calibration(str(r.id), float(value), int(r.max_total_num_tokens), float(r.min_headroom_gb), str(r.started_at))


# ---- calibration from the journal -----------------------------------------------------------------

# Which flags change the budget is the engine's to say: each backend's plan passes its own
# `SETUP_FLAGS` (a run that differs in any of them measured a different setup).


def _norm(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {normalise_flag_name(str(k)): v for k, v in flags.items()}


def pick_calibration(
    runs: Iterable[Any], *, backend: str, flags: Mapping[str, Any], hosts: tuple[str, ...], value_flag: str,
    setup_flags: Iterable[str], default_value: float | None = None,
) -> Calibration | None:
    """The newest finished run (journal RunRecord-like objects) of the same backend, hosts (the GPU
    type: the journal records hosts, not GPU models) and budget flags, that got past graph capture
    (it recorded KV tokens and headroom). `value_flag` is the memory setting's key in the flags;
    `setup_flags` the engine's flags that change the budget (profile spelling, no dashes)."""
    want = _norm(flags)
    setup = tuple(setup_flags)
    key = normalise_flag_name(value_flag)
    best = None
    for r in runs:
        if getattr(r, "outcome", "running") == "running" or getattr(r, "backend", backend) not in (backend, None):
            continue
        if r.max_total_num_tokens is None or r.min_headroom_gb is None:
            continue
        if tuple(r.hosts) != tuple(hosts):
            continue
        have = _norm(r.flags)
        if any(have.get(f) != want.get(f) for f in setup):
            continue
        value = have.get(key, default_value)
        if not isinstance(value, (int, float)):
            continue
        if best is None or r.started_at > best.started_at:
            best = Calibration(str(r.id), float(value), int(r.max_total_num_tokens), float(r.min_headroom_gb), str(r.started_at))
    return best
