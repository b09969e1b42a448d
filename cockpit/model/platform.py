"""The card a plan is made for, as the engines' memory terms care about it: its vendor and
generation (ROCm or CUDA; Hopper/Blackwell, whose NCCL and all-reduce buffers are larger, or
older), and whether it is a small or desktop card where the same fixed overheads weigh more.

Judged from the GPU's name as nvidia-smi / amd-smi print it (the agent measures it); a card known
only by its size (`--gpu-mem-gb`) is `unknown`, and the plan widens its band instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass

# Name fragments, lower case. AMD Instinct cards print "AMD Instinct MI300X" (amd-smi) or the
# product id; NVIDIA's print "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "NVIDIA L4".
_ROCM = ("mi300", "mi308", "mi325", "mi350", "mi355", "instinct", "amd ")
_BLACKWELL = ("b200", "b300", "gb200", "gb300", "rtx pro 6000", "rtx 5090", "rtx 5080", "b100")
_HOPPER = ("h100", "h200", "h800", "h20", "gh200")
_DESKTOP = ("geforce", "rtx 30", "rtx 40", "rtx 50", "titan")
_SMALL = (" l4 ", " t4 ", " a10 ", " a10g ", " a2 ", " l40", " a40 ", " a6000", " a5000", " a4000")


@dataclass(frozen=True)
class Platform:
    vendor: str  # "cuda", "rocm" or "unknown"
    generation: str  # "blackwell", "hopper", "pre-hopper", "cdna3", "cdna4", "unknown"
    desktop: bool = False  # a display card: another process (the desktop) may hold memory
    small: bool = False  # a card under 50 GiB: fixed overheads are a large share

    @property
    def sm90_plus(self) -> bool:
        """Hopper or Blackwell: NVLS / symmetric-memory all-reduce, larger NCCL buffers."""
        return self.generation in ("hopper", "blackwell")

    @property
    def rocm(self) -> bool:
        return self.vendor == "rocm"

    @property
    def known(self) -> bool:
        return self.vendor != "unknown"

    def words(self) -> str:
        if not self.known:
            return "an unnamed card (known by its size only)"
        return f"{self.vendor.upper() if self.rocm else 'CUDA'} {self.generation}" + (" desktop" if self.desktop else "")


def platform_of(name: str | None, total_gib: float | None = None) -> Platform:
    n = f" {(name or '').lower()} "
    small = total_gib is not None and total_gib < 50
    if not name:
        return Platform("unknown", "unknown", small=small)
    if any(k in n for k in _ROCM):
        gen = "cdna4" if any(k in n for k in ("mi350", "mi355")) else "cdna3"
        return Platform("rocm", gen, small=small)
    desktop = any(k in n for k in _DESKTOP)
    if any(k in n for k in _BLACKWELL):
        return Platform("cuda", "blackwell", desktop=desktop, small=small)
    if any(k in n for k in _HOPPER):
        return Platform("cuda", "hopper", small=small)
    return Platform("cuda", "pre-hopper", desktop=desktop, small=small or any(k in n for k in _SMALL))


# ROCm's quick all-reduce (both engines, MI300-class cards and newer, TP 2, 4 or 8): off unless the
# operator names a quantization in the engine's environment variable (each backend names its own:
# vllm/plan.py, sglang/plan.py; default "NONE"). When on, each rank allocates a communication buffer
# of twice the largest problem (quickreduce `DeviceComms::init`: the two-shot kernel's two stages),
# the largest problem 2048 MB unless the engine's max-size variable says otherwise — 4 GiB per rank
# at the default.
QUICK_REDUCE_DEFAULT_MAX_MB = 2048
QUICK_REDUCE_WORLD_SIZES = (2, 4, 8)


def quick_reduce_gib(env: dict[str, str] | None, regime_var: str, max_mb_var: str) -> float:
    """GiB per rank of ROCm's quick all-reduce buffer that `env` turns on (`regime_var` names a
    quantization, `max_mb_var` the largest problem in MB); 0 when it is off. The caller checks the
    card is ROCm and TP is 2, 4 or 8."""
    regime = str((env or {}).get(regime_var, "NONE")).strip().upper()
    if regime in ("", "NONE"):
        return 0.0
    try:
        mb = int(str((env or {}).get(max_mb_var, "0")).strip() or 0)
    except ValueError:
        mb = 0
    return 2 * (mb if mb > 0 else QUICK_REDUCE_DEFAULT_MAX_MB) / 1024
