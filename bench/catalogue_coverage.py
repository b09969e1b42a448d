"""How much of the engines' own decisive messages `cockpit diagnose` reads, per engine release.

tests/data/catalogue/messages.json (tools/message_catalogue.py) holds the logger format strings and
exception messages of each sampled SGLang and vLLM release on the paths a diagnosis reads. Here
every failure message (a raise, or a logger call at error level and above) is rendered with typical
values into a short log of that release: the release's own record head, a rank prefix of its era
(SGLang `[… TP3]`, `[… DP1 TP3]`; vLLM `(Worker_TP3 pid=N)`, `(VllmWorker rank=3 pid=N)`, V0's
`(VllmWorkerProcess pid=N)`), once bare and once under an operator's wrapper (docker compose,
kubectl --timestamps, srun -l); a raised message as the traceback that ends with it. A message is
*classified* when diagnose reports a crash of a kind its family allows, in the start-up phase the
short log proves (weights were loading, nothing was served), at the prefix's rank, in every variant. Memory and NCCL messages count as such only when they say the memory ran out or the
collective failed (a warmup or port message: the warmup failed, the port is taken); the families'
other raises are configuration checks (group "checks"), for which any crash reported is right. A
message the API server or the engine's client prints may name no rank.

    python bench/catalogue_coverage.py            # classified / catalogued per engine release
    python bench/catalogue_coverage.py -v         # and each message that is not
    python bench/catalogue_coverage.py --json

It also renders each info-level start-up line that prints a per-rank figure (weights, free memory,
the KV pool, graphs) alone under its release's rank prefix and counts those that give the rank a
figure (a second table; some of them only count in context — a V1 `Graph capturing finished … took
X GiB` before the KV is sized is the memory-profiling pass — so its misses are read, not asserted).

tests/backends/test_catalogue_render.py asserts the failure checks (the floor per family, and every message
classified now stays so).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "tests" / "data" / "catalogue" / "messages.json"
FAILURE_KINDS = ("raise", "log.error", "log.exception", "log.critical", "log.fatal")
# the crash kinds a message of each family may be read as
ALLOWED: dict[str, frozenset[str]] = {
    "device_oom": frozenset({"cuda_oom", "graph_capture_oom", "kv_pool_exhausted", "init_not_enough_memory"}),
    "kv_pool": frozenset({"kv_pool_exhausted", "init_not_enough_memory", "cuda_oom", "startup_error"}),
    "hicache": frozenset({"hicache_host_memory", "startup_error", "init_not_enough_memory"}),
    "graph_capture": frozenset({"graph_capture_oom", "cuda_oom", "startup_error", "unknown"}),
    "nccl": frozenset({"nccl_timeout", "nccl_error", "watchdog_timeout"}),
    "warmup": frozenset({"warmup_failed"}),
    "port": frozenset({"port_in_use", "startup_error"}),
    "death": frozenset({"unknown", "host_oom_killed", "killed_by_signal", "cuda_oom", "nccl_error", "nccl_timeout", "watchdog_timeout",
                        "startup_error"}),
    "startup": frozenset({"startup_error", "init_not_enough_memory", "unknown"}),
}
ANY_CRASH = frozenset({"cuda_oom", "graph_capture_oom", "kv_pool_exhausted", "init_not_enough_memory", "hicache_host_memory",
                       "host_oom_killed", "killed_by_signal", "nccl_timeout", "nccl_error", "watchdog_timeout", "warmup_failed", "port_in_use",
                       "startup_error", "unknown"})
GROUPS = {"memory": ("device_oom", "kv_pool", "hicache"), "nccl": ("nccl",), "start-up": ("startup", "port", "warmup"),
          "graphs": ("graph_capture",), "death": ("death",), "checks": ()}
# A memory or NCCL message is decisive when it says the memory ran out or the collective failed; the
# family's other raises (a KV dtype the backend lacks, NCCL on a device without it) are configuration
# checks: any crash reported is right for them (group "checks")
_RX_MEMORY_FAILURE = re.compile(
    r"out of memory|\boom\b|not enough (?:gpu |host |device |cpu )?memory|no (?:available |gpu )?memory|exhausted"
    r"|leaves? no|no room|insufficient|runs? out|is full|larger than the maximum|cannot (?:allocate|fit)"
    r"|(?:memory|capacity)\W.*exceed|exceeds? .*(?:memory|capacity)", re.IGNORECASE)
_RX_NCCL_FAILURE = re.compile(r"time(?:d)? ?out|error|fail|abort|watchdog|hang|unhandled", re.IGNORECASE)
# likewise a warmup or port message: the warmup failed, the port is taken
_RX_WARMUP_FAILURE = re.compile(r"warm ?up (?:failed|error)|warmup.*(?:fail|error)|(?:fail|error).*warm ?up", re.IGNORECASE)
_RX_PORT_FAILURE = re.compile(r"already in use|in use|open port|free port|bind|\[Errno 98\]", re.IGNORECASE)
# what the API server or the engine's client prints is no rank's (a crash it reports has no rank)
_RX_RANKLESS = re.compile(r"entrypoints/|core_client\.py|v1/engine/utils\.py|api_server|launcher|http_server|engine\.py$")


def group_of(entry: dict[str, Any]) -> str:
    fam = entry["family"]
    if fam in GROUPS["memory"]:
        return "memory" if _RX_MEMORY_FAILURE.search(entry["text"]) else "checks"
    if fam == "nccl":
        return "nccl" if _RX_NCCL_FAILURE.search(entry["text"]) else "checks"
    if fam in ("warmup", "port"):
        rx = _RX_WARMUP_FAILURE if fam == "warmup" else _RX_PORT_FAILURE
        return "start-up" if rx.search(entry["text"]) else "checks"
    return next(g for g, fams in GROUPS.items() if fam in fams)
_RX_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?([sdifgrxe%])|\{[^{}]*\}")
WRAPPERS = ("", "llm-1  | ", "2025-06-01T12:00:01.123456789Z ", "3: ")


# Typical values by what a field stands for, read from the words around it (the first that fits):
# a fraction (mem-fraction-static, utilization), a size in GB/GiB, a pid, a process name, a port
_TYPICAL = (
    (re.compile(r"(?:fraction|utilization|viable|above|ratio)[\w-]*\W{0,3}$|viable[^{}%]*= $", re.IGNORECASE), None, "0.85"),
    (None, re.compile(r"^ ?(?:GB|GiB|MB|MiB)\b"), "1.50"),
    (re.compile(r"pid[= ]$"), None, "4242"),
    (re.compile(r"(?:Subprocess|process) $"), None, "scheduler_3"),
    (re.compile(r"port\W{0,3}$", re.IGNORECASE), None, "30000"),
    (None, re.compile(r"^ watchdog"), "Scheduler"),
)


def render(text: str) -> str:
    """A format string with typical values: a fraction, a size, a pid, a process name, a port or
    the watchdog's owner where the words around a field say so; else 1.50 for a float field and 3 for the rest (a rank,
    a count, an id)."""
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        before, after = text[max(0, m.start() - 40):m.start()], text[m.end():m.end() + 8]
        for rx_before, rx_after, value in _TYPICAL:
            if (rx_before is None or rx_before.search(before)) and (rx_after is None or rx_after.search(after)):
                return value
        if m.group(1) in ("f", "g", "e"):
            return "12" if ".0" in m.group(0) else "1.50"  # `%.0f` prints a whole number
        return "3"
    return _RX_SPEC.sub(one, text).replace("{{", "{").replace("}}", "}")


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


@dataclass
class Variant:
    log: str
    rank: str | None


def _exc_name(kind: str) -> str:
    return kind.split(" ", 1)[1] if kind.startswith("raise ") else "RuntimeError"


def sglang_variants(entry: dict[str, Any], version: str) -> list[Variant]:
    msg = render(entry["text"]).replace("\n", " ")
    origin = entry["origins"].get(version) or next(iter(entry["origins"].values()))
    path = origin.split(":")[0]
    prefixes = [("[2025-06-01 12:00:01 TP3] ", "TP3"), ("[2025-06-01 12:00:01 DP1 TP3] ", "DP1 TP3")]
    if vkey(version) < (0, 4):
        prefixes = [("[2025-06-01 12:00:01 TP3] ", "TP3")]
    out = []
    for prefix, rank in prefixes:
        head = f"[2025-06-01 12:00:00 {rank}] Load weight begin. avail mem=70.00 GB"
        if entry["kind"].startswith("raise"):
            body = [f"{prefix}Scheduler hit an exception: Traceback (most recent call last):",
                    f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line 100, in event_loop_normal',
                    "    raise", f"{_exc_name(entry['kind'])}: {msg}"]
        else:
            body = [f"{prefix}{msg}"]
        out.append(Variant("\n".join([head, *body]) + "\n", rank))
    base = out[0].log.splitlines()
    for wrap in WRAPPERS[1:]:  # every wrapper in front of the plain prefix's lines
        out.append(Variant("\n".join(wrap + ln for ln in base) + "\n", out[0].rank))
    return out


def vllm_variants(entry: dict[str, Any], version: str) -> list[Variant]:
    msg = render(entry["text"]).replace("\n", " ")
    origin = entry["origins"].get(version) or next(iter(entry["origins"].values()))
    path, lineno = origin.rsplit(":", 1)
    fname = path.rsplit("/", 1)[-1]
    v = vkey(version)
    if v >= (0, 11):
        prefix, rank, head = "(Worker_TP3 pid=4242) ", "TP3", f"[{fname}:{lineno}]"
    elif v >= (0, 8):
        prefix, rank, head = "(VllmWorker rank=3 pid=4242) ", "TP3", f"[{fname}:{lineno}]"
    else:
        prefix, rank, head = "(VllmWorkerProcess pid=4242) ", "VllmWorkerProcess pid=4242", f"{fname}:{lineno}]"
    first = f"INFO 06-01 12:00:00 {'[llm_engine.py:1]' if v >= (0, 8) else 'llm_engine.py:1]'} Initializing an LLM engine (v{version}) with config: model='m'"
    level = "ERROR"
    if entry["kind"].startswith("raise"):
        body = [f"{prefix}{level} 06-01 12:00:01 {head} Traceback (most recent call last):",
                f'{prefix}{level} 06-01 12:00:01 {head}   File "/usr/local/lib/python3.12/dist-packages/{path}", line {lineno}, in run',
                f"{prefix}{level} 06-01 12:00:01 {head}     raise",
                f"{prefix}{level} 06-01 12:00:01 {head} {_exc_name(entry['kind'])}: {msg}"]
    else:
        body = [f"{prefix}{level} 06-01 12:00:01 {head} {msg}"]
    loading = f"{prefix}INFO 06-01 12:00:00 {'[gpu_model_runner.py:1]' if v >= (0, 8) else 'model_runner.py:1]'} Starting to load model m..."
    base = [first, loading, *body]
    return [Variant("\n".join(wrap + ln for ln in base) + "\n", rank) for wrap in WRAPPERS]


def check(entry: dict[str, Any], version: str) -> tuple[bool, str]:
    """Whether diagnose reads this release's message as a crash its family allows, at the rank."""
    from cockpit.commands.diagnose import diagnose_logs
    from cockpit.errors import BadInput

    variants = (sglang_variants if entry["engine"] == "sglang" else vllm_variants)(entry, version)
    with tempfile.TemporaryDirectory() as tmp:
        for i, var in enumerate(variants):
            path = Path(tmp) / f"{i}.log"
            path.write_text(var.log)
            try:
                state, _findings, _reads = diagnose_logs([str(path)])
            except BadInput as exc:
                return False, f"refused: {exc}"
            crash = state.crash
            if crash is None:
                return False, f"no crash (variant {i})"
            if crash.kind not in (ANY_CRASH if group_of(entry) == "checks" else ALLOWED[entry["family"]]):
                return False, f"kind {crash.kind} (variant {i})"
            # the short log proves start-up (weights were loading, nothing served): a graph message may
            # also be read as the capture's, a message that names its batch (prefill, decode) as that batch's
            phases = {"startup", "graph_capture"} if entry["family"] == "graph_capture" else {"startup"}
            phases |= {p for p in ("prefill", "decode") if re.search(rf"\b{p}\b", entry["text"], re.IGNORECASE)}
            if crash.phase not in phases:
                return False, f"phase {crash.phase} (variant {i})"
            origin = entry["origins"].get(version) or entry["origins"][entry["last"]]
            if crash.rank != var.rank and not (crash.rank is None and _RX_RANKLESS.search(origin.split(":")[0])):
                return False, f"rank {crash.rank!r}, want {var.rank!r} (variant {i})"
    return True, ""


# The per-rank start-up lines that print a memory or KV figure (weights, free memory, the pool, graphs)
_RX_FIGURE_LINE = re.compile(
    r"avail mem|mem usage|#tokens|K size|KV size|max_total_num_tokens|Memory pool end|weights took|Model loading took"
    r"|model weights take|blocks: |KV cache memory|KV cache size|Graph capturing finished|CUDA graph pool memory"
    r"|Free memory on device|avail_mem", re.IGNORECASE)
_FIGURE_FIELDS = ("pre_load_avail_gb", "weights_gb", "after_weights_avail_gb", "kv_gb", "kv_tokens",
                  "avail_before_capture_gb", "graph_gb", "avail_after_capture_gb", "total_gb")


def figure_lines(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The info-level start-up lines that carry a per-rank memory or KV figure."""
    return [e for e in doc if e["kind"] in ("log.info", "log.warning") and _RX_FIGURE_LINE.search(e["text"])
            and _RX_SPEC.search(e["text"]) and e["family"] in ("startup", "kv_pool", "graph_capture", "hicache")]


def check_figure(entry: dict[str, Any], version: str) -> tuple[bool, str]:
    """Whether a rendered figure line gives its rank a figure (or the pool its size)."""
    from cockpit.commands.diagnose import diagnose_logs, to_json
    from cockpit.errors import BadInput

    msg = render(entry["text"]).replace("\n", " ")
    if entry["engine"] == "sglang":
        rank, log = "TP3", f"[2025-06-01 12:00:01 TP3] {msg}\n"
    else:
        origin = entry["origins"].get(version) or entry["origins"][entry["last"]]
        path, lineno = origin.rsplit(":", 1)
        head = f"[{path.rsplit('/', 1)[-1]}:{lineno}]"
        v = vkey(version)
        prefix, rank = (("(Worker_TP3 pid=4242) ", "TP3") if v >= (0, 11) else ("(VllmWorker rank=3 pid=4242) ", "TP3")
                        if v >= (0, 8) else ("(VllmWorkerProcess pid=4242) ", "VllmWorkerProcess pid=4242"))
        if v < (0, 8):
            head = head[1:]
        log = f"{prefix}INFO 06-01 12:00:01 {head} {msg}\n"
    with tempfile.TemporaryDirectory() as tmp:
        path_ = Path(tmp) / "x.log"
        path_.write_text(log)
        try:
            state, findings, reads = diagnose_logs([str(path_)])
        except BadInput as exc:
            return False, f"refused: {exc}"
        out = to_json(state, findings, reads)
    if out["max_total_num_tokens"] is not None:
        return True, ""
    for r in out["ranks"]:
        if r["rank"] == rank and (any(r.get(k) is not None for k in _FIGURE_FIELDS) or r["figures"]):
            return True, ""
    return False, f"no figure for {rank} (ranks: {[r['rank'] for r in out['ranks']]})"


def figure_coverage(engine: str | None = None) -> dict[str, Any]:
    """{engine: {version: [read, catalogued]}} for the start-up figure lines, and the misses."""
    table: dict[str, dict[str, list[int]]] = {}
    misses: list[dict[str, Any]] = []
    cache: dict[tuple[str, str, str], tuple[bool, str]] = {}
    for e in figure_lines(load()):
        if engine and e["engine"] != engine:
            continue
        for version in e["versions"]:
            key = (e["engine"], e["text"], _era(e["engine"], version))
            if key not in cache:
                cache[key] = check_figure(e, version)
            ok, why = cache[key]
            cell = table.setdefault(e["engine"], {}).setdefault(version, [0, 0])
            cell[0] += ok
            cell[1] += 1
            if not ok and version == e["last"]:
                misses.append({"engine": e["engine"], "text": e["text"], "why": why, "versions": f"{e['first']}–{e['last']}",
                               "origin": e["origins"][e["last"]]})
    return {"table": table, "misses": misses}


def failures(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in doc if e["kind"].split(" ")[0] in ("raise",) or e["kind"] in FAILURE_KINDS]


def load() -> list[dict[str, Any]]:
    return list(json.loads(CATALOGUE.read_text())["messages"])


def coverage(engine: str | None = None, verbose: bool = False) -> dict[str, Any]:
    """{engine: {version: {group: [classified, catalogued]}}} and the misses."""
    table: dict[str, dict[str, dict[str, list[int]]]] = {}
    misses: list[dict[str, Any]] = []
    cache: dict[tuple[str, str, str], tuple[bool, str]] = {}
    for e in failures(load()):
        if engine and e["engine"] != engine:
            continue
        group = group_of(e)
        for version in e["versions"]:
            # a message whose text and origin file are those of an earlier release reads the same
            key = (e["engine"], e["text"], f"{e['kind']}|{_era(e['engine'], version)}")
            if key not in cache:
                cache[key] = check(e, version)
            ok, why = cache[key]
            cell = table.setdefault(e["engine"], {}).setdefault(version, {}).setdefault(group, [0, 0])
            cell[0] += ok
            cell[1] += 1
            if not ok and version == e["last"]:
                misses.append({"engine": e["engine"], "kind": e["kind"], "family": e["family"], "group": group,
                               "text": e["text"], "why": why,
                               "origin": e["origins"][e["last"]], "versions": f"{e['first']}–{e['last']}"})
    return {"table": table, "misses": misses}


def _era(engine: str, version: str) -> str:
    v = vkey(version)
    if engine == "vllm":
        return "v1-new" if v >= (0, 11) else "v1" if v >= (0, 8) else "v0"
    return "old" if v < (0, 4) else "new"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", nargs="?", choices=("sglang", "vllm"))
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = coverage(args.engine)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    groups = list(GROUPS)
    for engine, versions in res["table"].items():
        print(f"{engine}: failure messages classified / catalogued, per sampled release")
        print("    release      " + "".join(f"{g:>12}" for g in groups) + "       all")
        for version in sorted(versions, key=vkey):
            cells = versions[version]
            row = "".join(f"{f'{cells[g][0]}/{cells[g][1]}' if g in cells else '-':>12}" for g in groups)
            tot = [sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values())]
            print(f"    {version:<12} {row}   {tot[0]:>4}/{tot[1]:<4} ({100 * tot[0] / max(1, tot[1]):.0f} %)")
    figs = figure_coverage(args.engine)
    for engine, versions in figs["table"].items():
        print(f"{engine}: start-up figure lines (weights, free memory, KV pool, graphs) that give their rank a figure")
        print("    " + "  ".join(f"{v} {c[0]}/{c[1]}" for v, c in sorted(versions.items(), key=lambda kv: vkey(kv[0]))))
    if args.verbose:
        for m in figs["misses"]:
            print(f"  ✗ {m['engine']} figure    {m['versions']:<14} {m['origin']}: {m['text'][:110]!r} — {m['why']}")
        for m in res["misses"]:
            print(f"  ✗ {m['engine']} {m['group']:<9} {m['family']:<13} {m['versions']:<14} {m['origin']}: {m['text'][:110]!r}"
                  f" — {m['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
