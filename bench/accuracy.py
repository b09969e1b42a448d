"""Accuracy of `cockpit diagnose` on the real-log corpus (tests/data/real/).

Every excerpt `NAME.log` has `NAME.yaml` whose `expect:` keys the excerpt's own text proves
(tests/data/real/README.md). This runs diagnose on each, in process, the same code path as
`cockpit diagnose --json`, and compares every stated key. It prints right/total per field and the
share of files fully right, per corpus directory.

    python bench/accuracy.py                # every corpus directory
    python bench/accuracy.py sglang -v      # one directory, and each wrong key
    python bench/accuracy.py --json
    python bench/accuracy.py --batch issue23-2 -v   # one collection batch alone (the yaml's `batch:`)

tests/backends/test_real_corpus.py asserts the same comparisons file by file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "real"
FIELDS = ("recognised", "looks_like", "state", "crash", "phase", "rank", "max_total_num_tokens", "ranks", "findings")
# the corpus's per-rank keys -> the JSON's (the first that holds a figure)
RANK_KEYS = {
    "pre_load_avail_gb": ("pre_load_avail_gb",),
    "weights_gb": ("weights_gb",),
    "avail_after_weights_gb": ("after_weights_avail_gb",),
    "kv_gb": ("kv_gb",),
    "avail_before_capture_gb": ("avail_before_capture_gb",),
    "graph_gb": ("graph_gb",),
    "avail_after_capture_gb": ("avail_after_capture_gb",),
}


def _rank_figure(rank: dict[str, Any], key: str) -> Any:
    for k in RANK_KEYS.get(key, (key,)):
        if rank.get(k) is not None:
            return rank[k]
    return None


def backend_reads(directory: str) -> bool:
    """Whether Cockpit has a backend for the logs of this corpus directory (vllm/ waits for one)."""
    if directory == "sglang":
        return True
    if directory in ("nonlogs", "others"):
        return False
    from cockpit.backends import get_backend

    try:
        get_backend(directory)
    except ValueError:
        return False
    return True


def diagnose_json(log: Path) -> tuple[int, dict[str, Any] | None, str]:
    """(exit code, the --json document or None, the error line) for one file."""
    from cockpit.commands.diagnose import diagnose_logs, to_json
    from cockpit.core.findings import exit_code_for
    from cockpit.errors import BadInput

    try:
        state, findings, reads = diagnose_logs([str(log)])
    except BadInput as exc:
        return 2, None, str(exc)
    return exit_code_for(findings), to_json(state, findings, reads), ""


def expectations(yml: Path, readable: bool) -> dict[str, Any]:
    """The file's `expect:` keys; a log of a server Cockpit cannot read yet must be refused."""
    doc = yaml.safe_load(yml.read_text()) or {}
    expect = dict(doc.get("expect") or {})
    if not readable:  # refused; another program's log (others/) also says whose it looks like
        return {"recognised": False, **{k: v for k, v in expect.items() if k == "looks_like"}}
    return expect


def compare(expect: dict[str, Any], code: int, out: dict[str, Any] | None,
            err: str = "") -> dict[str, tuple[bool, Any, Any]]:
    """field -> (right, got, wanted) for every stated key (`err`: the refusal's message)."""
    res: dict[str, tuple[bool, Any, Any]] = {}
    crash = (out or {}).get("crash") or {}
    for key, want in expect.items():
        if key == "recognised":
            got: Any = code != 2
        elif key == "looks_like":
            m = re.search(r": looks like (.+), not [\w ]+$", err)
            got = m.group(1) if m else "(read as ours)" if code != 2 else err
        elif out is None:
            got = "(refused: exit 2)"
        elif key == "state":
            got = out["phase"]
        elif key == "crash":
            got = crash.get("kind", "none")
        elif key == "phase":
            got = crash.get("phase", "(no crash)")
        elif key == "rank":
            got = crash.get("rank")
        elif key == "max_total_num_tokens":
            got = out["max_total_num_tokens"]
        elif key == "ranks":
            by_rank = {r["rank"]: r for r in out["ranks"]}
            got = {}
            ok = True
            for rank, figures in (want or {}).items():
                have = by_rank.get(rank, {})
                got[rank] = {k: _rank_figure(have, k) for k in figures}
                ok = ok and all(_close(got[rank][k], v) for k, v in figures.items())
            res[key] = (ok, got, want)
            continue
        elif key == "findings":
            ids = [f["id"] for f in out["findings"]]
            res[key] = (all(w in ids for w in want), ids, want)
            continue
        else:
            got = out.get(key, "(not in output)")
        res[key] = (got == want if not isinstance(want, float) else _close(got, want), got, want)
    return res


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(got - want) < 0.006
    return bool(got == want)


def batch_of(yml: Path) -> str | None:
    """The collection batch an excerpt came in (its yaml's `batch:`), None for the earlier ones."""
    doc = yaml.safe_load(yml.read_text()) or {}
    label = doc.get("batch")
    return None if label is None else str(label)


def cases(directory: str | None = None, batch: str | None = None) -> list[tuple[str, Path, Path]]:
    """(directory, log, yaml) for every excerpt, sorted; `batch`: only those of one collection batch."""
    out = []
    for d in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        if directory and d.name != directory:
            continue
        for yml in sorted(d.glob("*.yaml")):
            # NAME.log, or for the non-logs any other NAME.* (a .md, a .bin)
            files = sorted(p for p in d.glob(f"{yml.stem}.*") if p.suffix != ".yaml")
            if files and (batch is None or batch_of(yml) == batch):
                out.append((d.name, files[0], yml))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", help="one corpus directory (sglang, vllm, nonlogs, others)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every wrong key")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--batch", help="only the excerpts of one collection batch (the yaml's `batch:` label)")
    args = ap.parse_args()
    summary: dict[str, Any] = {}
    readable = {}
    todo = cases(args.directory, args.batch)
    if args.batch and not todo:
        print(f"no excerpt has batch: {args.batch}", file=sys.stderr)
        return 2
    for directory, log, yml in todo:
        if directory not in readable:
            readable[directory] = backend_reads(directory)
        code, out, err = diagnose_json(log)
        res = compare(expectations(yml, readable[directory]), code, out, err)
        s = summary.setdefault(directory, {"files": 0, "fully_right": 0, "fields": {}, "wrong": []})
        s["files"] += 1
        s["fully_right"] += all(ok for ok, _, _ in res.values())
        for key, (ok, got, want) in res.items():
            right, total = s["fields"].get(key, (0, 0))
            s["fields"][key] = (right + ok, total + 1)
            if not ok:
                s["wrong"].append({"file": log.name, "key": key, "got": got, "want": want, "error": err})
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    for directory, s in summary.items():
        pct = 100 * s["fully_right"] / s["files"] if s["files"] else 0.0
        note = "" if readable[directory] else {
            "nonlogs": " (not logs: each must be refused, exit 2)",
            "others": " (other programs' logs: each must be refused, exit 2, naming the program)",
        }.get(directory, " (no backend reads these yet: each must be refused, exit 2)")
        print(f"{directory}: {s['fully_right']}/{s['files']} files fully right ({pct:.1f} %){note}")
        for key in FIELDS:
            if key in s["fields"]:
                right, total = s["fields"][key]
                print(f"    {key:<22} {right:>3}/{total:<3}")
        if args.verbose:
            for w in s["wrong"]:
                print(f"    ✗ {w['file']}: {w['key']} got {w['got']!r}, want {w['want']!r} {w['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
