"""Runs ON the server's host (stdlib only, sent on stdin to `python - '<json>'`): which token ids the
model's tokenizer holds, for `cockpit bench`'s synthetic prompts.

Request (argv[1], JSON): {"path": model dir or Hugging Face id, "hf": {HF_HOME/HF_HUB_CACHE only}}.
Answer (one JSON line):
  {"source": "tokenizer.json", "dir", "ranges": [[lo, hi), ...], "size": N}  the tokenizer's own ids,
      the special (added, `special: true`) tokens left out;
  {"source": "config.json", "dir", "vocab_size": N}  no tokenizer.json: the model's vocabulary size;
  {"error": "..."}.
Files are read up to a cap (a tokenizer.json is a few MB; 64 MB is not a tokenizer) and the answer
is bounded: at most MAX_RANGES ranges.
"""

import json
import os
import sys

FILE_CAP = 64 * 2**20
MAX_RANGES = 4096
MAX_ID = 10**7  # no tokenizer holds ten million tokens


def _snapshot(model_id, hf):
    roots = [hf.get("HF_HUB_CACHE"), os.path.join(hf["HF_HOME"], "hub") if hf.get("HF_HOME") else None,
             os.path.expanduser("~/.cache/huggingface/hub")]
    for root in filter(None, roots):
        snaps = os.path.join(root, "models--" + model_id.replace("/", "--"), "snapshots")
        if os.path.isdir(snaps):
            found = sorted((os.path.join(snaps, s) for s in os.listdir(snaps)), key=os.path.getmtime)
            if found:
                return found[-1]
    return None


def _load(path):
    with open(path, "rb") as f:
        data = f.read(FILE_CAP + 1)
    if len(data) > FILE_CAP:
        raise ValueError(f"{path} is larger than {FILE_CAP} bytes")
    return json.loads(data.decode("utf-8", "replace"))


def _ids(tok):
    model = tok.get("model") if isinstance(tok, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: {piece: id}
        ids = {v for v in vocab.values() if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_ID}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        ids = set(range(min(len(vocab), MAX_ID)))
    else:
        return None
    for added in tok.get("added_tokens") or ():
        if isinstance(added, dict) and isinstance(added.get("id"), int) and added.get("special"):
            ids.discard(added["id"])
    return ids


def _ranges(ids):
    out: list = []
    for i in sorted(ids):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    if len(out) > MAX_RANGES:  # a vocabulary full of holes: the widest ranges are plenty
        out = sorted(sorted(out, key=lambda r: r[0] - r[1])[:MAX_RANGES])
    return out


def collect(path, hf):
    d = path
    if not os.path.isdir(d):
        d = _snapshot(path, hf) if path.count("/") == 1 and not path.startswith((".", "/")) else None
        if d is None:
            return {"error": f"{path} is not a directory on this host (nor in its Hugging Face cache)"}
    tj = os.path.join(d, "tokenizer.json")
    if os.path.isfile(tj):
        ids = _ids(_load(tj))
        if ids:
            return {"source": "tokenizer.json", "dir": d, "ranges": _ranges(ids), "size": len(ids)}
    cj = os.path.join(d, "config.json")
    if os.path.isfile(cj):
        cfg = _load(cj)
        for c in (cfg, cfg.get("text_config") if isinstance(cfg, dict) else None):
            n = c.get("vocab_size") if isinstance(c, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and 0 < n < MAX_ID:
                return {"source": "config.json", "dir": d, "vocab_size": n}
    return {"error": f"{d} has neither a readable tokenizer.json nor a vocab_size in config.json"}


def main(argv):
    try:
        req = json.loads(argv[1])
        res = collect(str(req["path"]), dict(req.get("hf") or {}))
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
        res = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
