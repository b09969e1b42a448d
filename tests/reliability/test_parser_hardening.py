"""Issue 18, items 5 and 6: one malformed number never blinds the parser, and advice and JSON stay
inside their domains.

- A line whose figure does not parse (`avail mem=1.2.3 GB.`) or cannot be (a 400-digit value) is
  skipped and counted, never fatal: `diagnose` reads the rest of the log, `--json` says how many.
- Values outside physical ranges are refused as data (they never reach the arithmetic).
- `--mem-fraction-static` advice stays in (0, 1) and above the startup floor, or the finding says
  no setting reaches the target and what would.
- `--json` is strict JSON: no Infinity, no NaN.

Everything runs through the real parser and the real CLI (`python -m cockpit diagnose`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.backends.sglang.diagnosis import diagnose
from cockpit.backends.sglang.logparse import SGLangLogParser, read_log
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply
from cockpit.core.state import Crash, RunState

DATA = Path(__file__).resolve().parent.parent / "data"
HEALTHY = DATA / "sglang-0.5.9-llama70b-tp8-healthy.log"
BIG = "9" * 400


def cockpit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cockpit", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def _strict(text: str) -> dict:
    def refuse(const: str) -> None:
        raise AssertionError(f"non-strict JSON constant {const}")

    return json.loads(text, parse_constant=refuse)


def _with_line(tmp_path: Path, needle: str, replace: str) -> Path:
    text = HEALTHY.read_text()
    lines = text.splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if needle in ln)
    lines[i] = lines[i].replace(lines[i][lines[i].index(needle):].rstrip("\n"), replace)
    out = tmp_path / "hostile.log"
    out.write_text("".join(lines))
    return out


@pytest.mark.parametrize(
    ("needle", "hostile"),
    [
        ("Load weight begin. avail mem=", "Load weight begin. avail mem=1.2.3 GB"),
        ("Load weight begin. avail mem=", f"Load weight begin. avail mem={BIG}.5 GB"),
        ("Memory pool end. avail mem=", f"Memory pool end. avail mem={BIG} GB"),
        ("max_total_num_tokens=", f"max_total_num_tokens={BIG}, chunked_prefill_size=8192, context_len=131072, "
                                  f"available_gpu_mem={BIG} GB"),
        ("KV Cache is allocated.", f"KV Cache is allocated. #tokens: {BIG}, K size: 1.2.3 GB, V size: 2 GB"),
    ],
    ids=["two-dots", "400-digit-float", "400-digit-pool", "400-digit-tokens", "kv-line"],
)
def test_one_bad_number_is_one_skipped_line(tmp_path: Path, ledger, needle: str, hostile: str) -> None:
    log = _with_line(tmp_path, needle, hostile)
    ledger.fault("logs")
    r = cockpit("diagnose", "--json", str(log))
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert r.returncode in (0, 1), r.stderr
    out = _strict(r.stdout)
    assert out["phase"] == "ready" and out["crash"] is None  # the rest of the log was read
    assert out["lines"]["unparsed"] == 1 and out["lines_unparsed"] == 1
    text = json.dumps(out)
    assert BIG[:50] not in text  # never printed whole, never turned into inf
    assert out["min_headroom_gb"] is not None and 0 < out["min_headroom_gb"] < 200
    human = cockpit("diagnose", str(log))
    assert human.returncode == r.returncode and "1 recognised line held figures" in human.stdout
    ledger.survive("logs")


def test_the_live_parser_keeps_going_past_bad_numbers(ledger) -> None:
    """The supervisor's path: feed in pieces; the bad line is counted, READY is still reached."""
    data = HEALTHY.read_bytes().replace(b"Memory pool end. avail mem=", b"Memory pool end. avail mem=1.2.3", 1)
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for i in range(0, len(data), 777):
        for e in p.feed(data[i:i + 777]):
            apply(st, e)
    for e in p.finish():
        apply(st, e)
    ledger.fault("logs")
    assert st.phase == "ready" and st.lines_unparsed == 1 and st.crash is None
    ledger.survive("logs")


def test_figures_outside_physical_ranges_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "odd.log"
    log.write_text(
        "[2026-02-24 11:55:13 TP0] Load weight begin. avail mem=5000.00 GB\n"  # no GPU holds 5 TiB free
        "[2026-02-24 11:55:14 TP0] Load weight end. elapsed=1.0 s, type=X, avail mem=60.00 GB, mem usage=15.00 GB.\n"
        "[2026-02-24 11:55:15 TP0] Capture cuda graph end. Time elapsed: 1.0 s. mem usage=1.00 GB. avail mem=10.00 GB.\n"
    )
    st = read_log(log)
    rm = st.ranks["TP0"]
    assert rm.pre_load_avail_gb is None and st.lines_unparsed == 1
    assert rm.after_weights_avail_gb == 60.0 and rm.avail_after_capture_gb == 10.0


def _small_gpu_state(mfs: float, p: float, worst: float, a: float | None = None) -> RunState:
    s = RunState(format="sglang-0.5.9", phase="ready")
    s.server_args = {"mem_fraction_static": mfs, "tp_size": 1}
    r = s.rank("TP0")
    r.pre_load_avail_gb = p
    r.after_weights_avail_gb = a
    r.avail_after_capture_gb = worst
    return s


@pytest.mark.parametrize(("mfs", "p", "worst", "a"), [(0.95, 3.0, 0.1, None), (0.95, 3.0, 0.1, 2.5),
                                                      (0.3, 80.0, 0.5, 70.0), (0.06, 40.0, 0.2, None)])
def test_advice_never_leaves_the_flags_domain(mfs: float, p: float, worst: float, a: float | None) -> None:
    """P = 3 GiB used to give "Lower --mem-fraction-static 0.95 → −0.24"."""
    for crash in (None, Crash(kind="cuda_oom", phase="prefill", rank="TP0", line=9, message="CUDA out of memory")):
        s = _small_gpu_state(mfs, p, worst, a)
        s.crash = crash
        for f in diagnose(s):
            for c in f.changes:
                if c.flag == "--mem-fraction-static":
                    assert 0 < c.to_value < 1 and c.to_value < c.from_value, f.message
                    if a is not None:
                        assert c.to_value > 1 - a / p, f.message  # never past the startup floor
            if f.id in ("low_headroom_after_graph_capture", "oom_crash") and not f.changes:
                assert "no setting reaches the target" in f.message or "no lower setting" in f.message, f.message
                assert "What would:" in f.message


def test_json_is_strict_even_when_a_figure_is_not_finite(tmp_path: Path) -> None:
    """No path from the log reaches a non-finite float; the writer refuses one anyway."""
    from cockpit.commands.diagnose import FileRead, to_json

    st = RunState()
    st.available_gpu_mem_gb = float("inf")
    st.rank("TP0").avail_after_capture_gb = float("nan")
    out = to_json(st, [], [FileRead("x", 1, 1)])
    text = json.dumps(out, allow_nan=False)
    assert "Infinity" not in text and "NaN" not in text
    assert out["available_gpu_mem_gb"] is None
