"""SGLang's real-engine venv for the tests of this branch until the `sgl-tier` branch's conftest
fixture `real_sglang` (same name, same fields) is merged; then this module goes and the tests'
fallback import with it. Never skips: a missing install FAILS with the command to run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

SGLANG_VERSION = "0.5.23"


@dataclass(frozen=True)
class RealSglang:
    venv: Path
    models: Path
    version: str = SGLANG_VERSION

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def tiny(self) -> Path:
        return self.models / "tiny-llama"

    def env(self, **extra: str) -> dict[str, str]:
        env = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
        env.update(extra)
        return env


@pytest.fixture(scope="session")
def real_sglang() -> RealSglang:
    cache = Path(os.environ.get("COCKPIT_ENGINE_CACHE") or Path.home() / ".cache" / "cockpit-engines")
    venv = Path(os.environ.get("COCKPIT_REAL_SGLANG_VENV") or cache / f"sglang-{SGLANG_VERSION}")
    for need in (venv / ".cockpit-installed", venv / "bin" / "python"):
        if not need.exists():
            pytest.fail(f"{need} is missing: run `bash scripts/real-engine.sh sglang`")
    return RealSglang(venv=venv, models=venv.parent / "models")
