"""Runs ON the GPU host (stdlib only, sent on stdin to `python -` with its request defined above it):
read a model's metadata.

It reads `config.json`, `model.safetensors.index.json` when there is one, and otherwise the header
of each `.safetensors` file (8-byte length + JSON) — never tensor data. A model path that is not a
directory but looks like a Hugging Face id (`org/name`) is looked up in the HF cache
(`HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`), newest snapshot first.
Prints one JSON line: {"dir", "config", "index", "headers": [[file, base64 header]]} or {"error"}.
An index is summarised here, not sent whole (a 1-TB checkpoint's weight_map is megabytes):
{"total_size", "names": the tensor names with every number but the layer's collapsed to 0,
"max_layer": the highest layer index named}.
"""

import base64
import json
import os
import re
import struct
import sys

CONFIG_CAP = 4 * 2**20
INDEX_CAP = 64 * 2**20
HEADER_CAP = 100 * 2**20
HEADERS_TOTAL_CAP = 64 * 2**20


def _hf_snapshot(model_id, env):
    roots = [env.get("HF_HUB_CACHE"), os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None,
             os.path.expanduser("~/.cache/huggingface/hub")]
    folder = "models--" + model_id.replace("/", "--")
    for root in roots:
        snaps = os.path.join(root, folder, "snapshots") if root else None
        if not snaps or not os.path.isdir(snaps):
            continue
        cands = [os.path.join(snaps, d) for d in os.listdir(snaps)]
        cands = [d for d in cands if os.path.isfile(os.path.join(d, "config.json"))]
        if cands:
            return max(cands, key=os.path.getmtime)
    return None


def _read(path, cap):
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"{path} is larger than {cap} bytes; not metadata?")
    return data.decode("utf-8", "replace")


def summarise_index(idx):
    meta = idx.get("metadata") if isinstance(idx, dict) else None
    names = set()
    max_layer = -1
    for n in (idx.get("weight_map") or {}) if isinstance(idx, dict) else ():
        m = re.search(r"layers\.(\d+)\.", n)
        if m:
            max_layer = max(max_layer, int(m.group(1)))
        names.add(re.sub(r"\.\d+\.", ".0.", n))
    return {"total_size": (meta or {}).get("total_size"), "names": sorted(names), "max_layer": max_layer}


def collect(model, env=None):
    env = dict(os.environ if env is None else env)
    d = model
    if not os.path.isdir(d):
        if model.count("/") == 1 and not model.startswith((".", "/")):
            d = _hf_snapshot(model, env)
            if d is None:
                return {"error": f"{model} is not a directory and is not in the Hugging Face cache on this host"}
        else:
            return {"error": f"{model} is not a directory on this host"}
    cfg = os.path.join(d, "config.json")
    if not os.path.isfile(cfg):
        return {"error": f"{d} has no config.json"}
    out = {"dir": d, "config": _read(cfg, CONFIG_CAP), "index": None, "headers": []}
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(idx):
        out["index"] = summarise_index(json.loads(_read(idx, INDEX_CAP)))
        return out
    total = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return {"error": f"{d}/{name} is shorter than a safetensors header"}
            (n,) = struct.unpack("<Q", head)
            if n > HEADER_CAP:
                return {"error": f"{d}/{name}: header length {n} is not a safetensors header"}
            head += f.read(n)
        total += len(head)
        if total > HEADERS_TOTAL_CAP:
            return {"error": f"{d}: safetensors headers exceed {HEADERS_TOTAL_CAP} bytes"}
        out["headers"].append([name, base64.b64encode(head).decode("ascii")])
    return out


def main(argv):
    # The request (the model path and the profile's HF_* variables, a token among them) arrives in
    # the program text on stdin (read.probe_program defines REQUEST above this source), never in
    # argv, where any local user's `ps` would show it. argv[1] stays for running this file by hand.
    req = globals().get("REQUEST")
    if req is None:
        req = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        res = collect(str(req["path"]), {**os.environ, **(req.get("env") or {})})
    except (OSError, ValueError, KeyError) as exc:
        res = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
