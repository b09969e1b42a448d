"""Model facts from a directory: here (`read_model_dir`) or on a GPU host over its transport
(`read_model_on_host`, which sends probe.py to the host's Python and reads only metadata)."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.model import probe
from cockpit.model.config import ModelConfig, ModelConfigError, parse_config
from cockpit.model.weights import WeightIndex, index_from_headers, index_from_json, parse_safetensors_header

if TYPE_CHECKING:
    from cockpit.transport.base import Transport

PROBE_SOURCE: bytes = Path(probe.__file__).read_bytes()


@dataclass(frozen=True)
class ModelFacts:
    """config.json plus the checkpoint's weight bytes (None when no weights are listed)."""

    where: str  # "gpu-box-1:/models/Kimi-K2.5" or a local path
    config: ModelConfig
    weights: WeightIndex | None


def facts_from_probe(answer: Mapping[str, Any], where: str, name: str | None = None) -> ModelFacts:
    """ModelFacts from probe.collect()'s answer (here or from a host)."""
    if answer.get("error"):
        raise ModelConfigError(f"{where}: {answer['error']}")
    try:
        raw = json.loads(answer["config"])
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{where}/config.json: not JSON ({exc})") from None
    cfg = parse_config(raw, f"{where}/config.json", name=name)
    weights: WeightIndex | None = None
    if answer.get("index"):
        try:
            idx = json.loads(answer["index"])
        except json.JSONDecodeError as exc:
            raise ModelConfigError(f"{where}/model.safetensors.index.json: not JSON ({exc})") from None
        weights = index_from_json(idx, f"{where}/model.safetensors.index.json")
    elif answer.get("headers"):
        tensors = []
        for fname, b64 in answer["headers"]:
            tensors += parse_safetensors_header(base64.b64decode(b64), f"{where}/{fname}")
        weights = index_from_headers(tensors, len(answer["headers"]))
    return ModelFacts(where, cfg, weights)


def read_model_dir(path: str | Path, name: str | None = None) -> ModelFacts:
    """Facts of a model directory on this machine (config.json + index or safetensors headers)."""
    p = str(path)
    return facts_from_probe(probe.collect(p), p, name=name or Path(p).name)


async def read_model_on_host(
    transport: Transport, model_path: str, *, python: str | None = None, env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> ModelFacts:
    """Facts of `model_path` as the GPU host sees it: probe.py runs on the host's Python, reads a few
    KB of metadata (never tensor data) and answers in one JSON line."""
    from cockpit.transport.local import LocalTransport

    py = python or (sys.executable if isinstance(transport, LocalTransport) else "python3")
    req = {"path": model_path, "env": {k: v for k, v in (env or {}).items() if k.startswith("HF_")}}
    done = await transport.run([py, "-", json.dumps(req, separators=(",", ":"))], stdin=PROBE_SOURCE, timeout=timeout)
    where = f"{transport.label}:{model_path}"
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ModelConfigError(f"{where}: reading the model's metadata failed: {err[-1] if err else f'exit {done.returncode}'}")
    try:
        answer = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ModelConfigError(f"{where}: unreadable answer from the model probe") from None
    return facts_from_probe(answer, where, name=Path(model_path).name)
