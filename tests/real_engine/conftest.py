"""The real-engine tier: a real vLLM (its CPU build from PyPI) and SGLang's own engine (its CPU path)
launched by Cockpit on this machine.

Every test here is marked `real_engine` (added below by folder), and by engine: `real_sglang` for
the files named `test_sglang_*.py`, `real_vllm` for the others. Run the tier alone with
    bash scripts/test.sh -m real_engine        (or: .venv/bin/python -m pytest -m real_engine)
one engine's tests alone with `-m real_vllm` or `-m real_sglang`, and the fast tier alone with
`-m "not real_engine"`.

Fixtures:

`real_vllm` (session) -> RealVllm
    The engine's venv (installed and cached by scripts/real-engine.sh, which this fixture runs when
    COCKPIT_REAL_ENGINE_VENV is not set) and the tiny checkpoints it wrote. If the engine cannot be
    installed the tests FAIL with the command to run (never skip: CI installs it).
    Fields: venv, vllm (the `vllm` console script), python, models, tiny (tiny-llama: 1 KiB of KV a
    token in bfloat16), wide_kv (wide-kv-llama: 32 KiB a token), draft (tiny-draft-llama: tiny's
    speculative-decoding draft, 512 B a token), version ("0.32.0").
    Methods: profile(tmp_path, name, **overrides) -> Path writes a profile YAML that launches
    `vllm serve` on `tiny` on a free port (workdir, log and runs under tmp_path) and returns its path.

`real_sglang` (session) -> RealSglang
    SGLang 0.5.23's venv (`bash scripts/real-engine.sh sglang`, run by this fixture when
    COCKPIT_REAL_SGLANG_VENV is not set; fails, never skips, when it cannot be installed) and the
    same tiny checkpoints. `profile(tmp_path, name, server=…, env=…)` writes a profile launching
    `python -m sglang.launch_server --device cpu` on `tiny` with SGLANG_USE_CPU_ENGINE=1 (the CPU
    engine's switch), metrics on, a 4,096-token KV pool.

`engine_lock` (function): serialises real engines across concurrently running pytest processes on
    this machine (two CPU engines at once on 2 cores double every start-up). A file lock under the
    engine's cache dir; harmless in CI, where one pytest runs.

Engines are stopped by the test's own `cockpit down` or, failing that, by the autouse reaper in
tests/conftest.py (by recorded PID and process group, never by name).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
ENGINE_VERSION = "0.32.0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if here in path.parents:
            item.add_marker(pytest.mark.real_engine)
            item.add_marker(pytest.mark.real_sglang if path.name.startswith("test_sglang_")
                            else pytest.mark.real_vllm)


@dataclass(frozen=True)
class RealVllm:
    venv: Path
    models: Path
    version: str = ENGINE_VERSION

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def tiny(self) -> Path:
        return self.models / "tiny-llama"

    @property
    def wide_kv(self) -> Path:
        return self.models / "wide-kv-llama"

    @property
    def draft(self) -> Path:
        """tiny-draft-llama: a speculative-decoding draft for `tiny` (make_checkpoints.py)."""
        return self.models / "tiny-draft-llama"

    @property
    def cache_root(self) -> Path:
        # vLLM's torch.compile cache, shared by the tier's launches (like pip's cache: content-keyed,
        # never read as a test's state); a test's HOME is its own, so without this each launch
        # would compile again.
        return self.venv.parent / "vllm-cache"

    def env(self, **extra: str) -> dict[str, str]:
        """What a real-engine profile sets in the server's environment."""
        env = {
            # the CPU build's KV cache, in GiB (vLLM's CPU worker reads it before any flag)
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(self.cache_root),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        env.update(extra)
        return env

    def profile(self, tmp_path: Path, name: str = "real-vllm", *, server: dict[str, Any] | None = None,
                env: dict[str, str] | None = None, program: list[str] | None = None,
                **top: Any) -> Path:
        """A profile launching this engine on `tiny` (or server['model']) on a free port."""
        srv: dict[str, Any] = {
            "model": str(self.tiny), "port": free_port(), "host": "127.0.0.1",
            "dtype": "bfloat16", "max-model-len": 512,
        }
        srv.update(server or {})
        doc: dict[str, Any] = {
            "name": name, "backend": "vllm", "version": self.version,
            "hosts": [{"ssh": "local"}],
            "program": program or [str(self.vllm), "serve"],
            "workdir": str(tmp_path / "work"), "log": "logs/vllm.log",
            "env": self.env(**(env or {})),
            "server": {k: v for k, v in srv.items() if v is not None},
        }
        doc.update(top)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path


@pytest.fixture(scope="session")
def real_vllm() -> RealVllm:
    venv_env = os.environ.get("COCKPIT_REAL_ENGINE_VENV")
    if venv_env:
        venv = Path(venv_env)
    else:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "real-engine.sh")], capture_output=True,
                              text=True, timeout=1800)
        if proc.returncode != 0:
            pytest.fail(f"the real engine could not be installed (bash scripts/real-engine.sh):\n"
                        f"{proc.stderr[-3000:]}")
        venv = Path(proc.stdout.strip().splitlines()[-1])
    models = venv.parent / "models"
    if (models / "tiny-llama" / "config.json").exists() and not (models / "tiny-draft-llama" / "config.json").exists():
        # an engine cached before the draft checkpoint existed: write the missing one (the others are reused)
        subprocess.run([str(venv / "bin" / "python"), str(REPO / "tests" / "real_engine" / "make_checkpoints.py"),
                        str(models)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    for need in (venv / "bin" / "vllm", models / "tiny-llama" / "config.json", models / "tiny-draft-llama" / "config.json"):
        if not need.exists():
            pytest.fail(f"{need} is missing: run `bash scripts/real-engine.sh`")
    return RealVllm(venv=venv, models=models)


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

    @property
    def sglang_dir(self) -> Path:
        """The installed `sglang` package (its source, for the scans)."""
        found = sorted((self.venv / "lib").glob("python3*/site-packages/sglang"))
        assert found, f"no sglang package under {self.venv}/lib"
        return found[0]

    def env(self, **extra: str) -> dict[str, str]:
        """What an SGLang real-engine profile sets in the server's environment."""
        env = {
            # SGLang's CPU engine is chosen by this variable (srt/utils/common.py is_cpu()), with
            # --device cpu; without it the CUDA path runs on CPU tensors and fails building the model
            "SGLANG_USE_CPU_ENGINE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "DO_NOT_TRACK": "1",
        }
        env.update(extra)
        return env

    def profile(self, tmp_path: Path, name: str = "real-sglang", *, server: dict[str, Any] | None = None,
                env: dict[str, str] | None = None, **top: Any) -> Path:
        """A profile launching SGLang's CPU engine on `tiny` (or server['model-path']) on a free port."""
        srv: dict[str, Any] = {
            "model-path": str(self.tiny), "port": free_port(), "host": "127.0.0.1", "device": "cpu",
            "enable-metrics": True, "mem-fraction-static": 0.5, "max-total-tokens": 4096,
        }
        srv.update(server or {})
        doc: dict[str, Any] = {
            "name": name, "backend": "sglang", "version": self.version,
            "hosts": [{"ssh": "local"}],
            "python": str(self.python),
            "workdir": str(tmp_path / "work"), "log": "logs/sglang.log",
            "env": self.env(**(env or {})),
            "server": {k: v for k, v in srv.items() if v is not None},
        }
        doc.update(top)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path


@pytest.fixture(scope="session")
def real_sglang() -> RealSglang:
    venv_env = os.environ.get("COCKPIT_REAL_SGLANG_VENV")
    if venv_env:
        venv = Path(venv_env)
    else:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "real-engine.sh"), "sglang"], capture_output=True,
                              text=True, timeout=1800)
        if proc.returncode != 0:
            pytest.fail(f"SGLang could not be installed (bash scripts/real-engine.sh sglang):\n"
                        f"{proc.stderr[-3000:]}")
        venv = Path(proc.stdout.strip().splitlines()[-1])
    models = venv.parent / "models"
    for need in (venv / ".cockpit-installed", venv / "bin" / "python", models / "tiny-llama" / "config.json"):
        if not need.exists():
            pytest.fail(f"{need} is missing: run `bash scripts/real-engine.sh sglang`")
    return RealSglang(venv=venv, models=models)


def engine_lock_path(venv: Path) -> Path:
    """The machine-wide engine lock: one file beside every engine's venv (vLLM's and SGLang's)."""
    return venv.parent / ".engine.lock"


@pytest.fixture
def engine_lock(real_vllm: RealVllm) -> Iterator[None]:
    lock = engine_lock_path(real_vllm.venv)
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
