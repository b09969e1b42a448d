"""Model facts from a directory here (`read_model_dir`), or from probe.py's answer on a GPU host
(`facts_from_probe`; cockpit/preflight/planning.py runs the probe over the host's transport)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.model import probe
from cockpit.model.config import ModelConfig, ModelConfigError, parse_config
from cockpit.model.estimate import estimate_index
from cockpit.model.weights import (
    WeightIndex,
    index_from_headers,
    index_from_summary,
    parse_safetensors_header,
)

PROBE_SOURCE: bytes = Path(probe.__file__).read_bytes()


def probe_program(model: str, env: Mapping[str, str] | None = None) -> bytes:
    """The probe as one program for `python -` on stdin: its request (the path and the profile's
    HF_* variables, which may hold a token) is a literal above the probe's source, so nothing of it
    reaches the command line another local user's `ps` shows."""
    req = {"path": model, "env": {k: v for k, v in (env or {}).items() if k.startswith("HF_")}}
    return b"REQUEST = " + repr(req).encode("utf-8") + b"\n" + PROBE_SOURCE


@dataclass(frozen=True)
class ModelFacts:
    """config.json plus the checkpoint's weight bytes: read from the safetensors index or headers,
    else estimated from config.json (`weights.estimated`)."""

    where: str  # "gpu-box-1:/models/Kimi-K2.5" or a local path
    config: ModelConfig
    weights: WeightIndex | None
    draft: ModelFacts | None = None  # the speculative draft model the flags name, read beside it


def facts_from_probe(answer: Mapping[str, Any], where: str, name: str | None = None) -> ModelFacts:
    """ModelFacts from probe.collect()'s answer (here or from a host)."""
    if answer.get("error"):
        raise ModelConfigError(f"{where}: {answer['error']}")
    try:
        raw = json.loads(answer["config"])
    except (KeyError, TypeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelConfigError(f"{where}/config.json: not JSON ({exc})") from None
    cfg = parse_config(raw, f"{where}/config.json", name=name)
    weights: WeightIndex | None = None
    if answer.get("index"):
        weights = index_from_summary(answer["index"], f"{where}/model.safetensors.index.json")
    elif answer.get("headers"):
        tensors = []
        for item in answer["headers"]:
            try:
                fname, b64 = item
                head = base64.b64decode(b64, validate=True)
            except (TypeError, ValueError):
                raise ModelConfigError(f"{where}: the model probe's answer holds a header that is not base64") from None
            tensors += parse_safetensors_header(head, f"{where}/{fname}")
        weights = index_from_headers(tensors, len(answer["headers"]))
    else:
        # config.json alone (before the download): the weights estimated from its shapes and quantization
        weights = estimate_index(cfg, raw)
    return ModelFacts(where, cfg, weights)


def read_model_dir(path: str | Path, name: str | None = None) -> ModelFacts:
    """Facts of a model directory on this machine (config.json + index or safetensors headers)."""
    p = str(path)
    try:
        answer = probe.collect(p)
    except (OSError, ValueError) as exc:  # an unreadable file, an index that is not JSON
        raise ModelConfigError(f"{p}: {type(exc).__name__}: {exc}") from None
    return facts_from_probe(answer, p, name=name or Path(p).name)
